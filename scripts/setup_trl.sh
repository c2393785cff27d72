#!/usr/bin/env bash
# Install TRL 1.13 (the last release with PRMTrainer, in trl.experimental.prm) into its own virtual
# env (.venv-trl), never into the project's .venv: benchmarks/vs_trl.py runs the peer trainer
# there in a subprocess.
# torch is pinned first: an unpinned torch would pull a multi-GB CUDA build. Safe to rerun: it does
# nothing when the env already imports trl's PRMTrainer.
#
#   scripts/setup_trl.sh            # -> .venv-trl next to pyproject.toml
#   TRL_VENV=/path scripts/setup_trl.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TRL_VENV:-$ROOT/.venv-trl}"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0"
TRL_VERSION="1.13.*"

if [[ -x "$PY" ]] && "$PY" -c "from trl.experimental.prm import PRMConfig, PRMTrainer" 2>/dev/null; then
    echo "TRL $("$PY" -c 'import trl; print(trl.__version__)') is already installed in $VENV"
    exit 0
fi

start=$SECONDS
[[ -x "$PY" ]] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

pip_install "torch==$TORCH_VERSION"
# gguf: transformers reads the embedded SmolLM2 from it; psutil: peak memory in the benchmark.
pip_install "torch==$TORCH_VERSION" "trl==$TRL_VERSION" datasets accelerate scikit-learn psutil gguf

"$PY" -c "import torch, transformers, trl; from trl.experimental.prm import PRMTrainer; print('TRL', trl.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__, 'ready')"
echo "installed in $((SECONDS - start)) s; size $(du -sh "$VENV" | cut -f1) ($VENV)"
