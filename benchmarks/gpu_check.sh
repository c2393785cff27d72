#!/usr/bin/env bash
# On a GPU machine (about 10 minutes): serve one exported checkpoint with vLLM (pooling runner, STEP
# pooler) and with `prm-distill serve`, score the same trajectories through both over HTTP, print
# steps/s for each and their largest score difference; then the server's batching on/off figures.
#
#   benchmarks/gpu_check.sh [MODEL_DIR]     # default: the default backbone with an untrained head
#
# Needs one Python env with prm_distill[serve] and a GPU build of vllm (PYTHON, default: python).
# Environment: DTYPE (bfloat16), TRAJECTORIES (512), STEPS (10), CONCURRENCY (64), POINT_SECONDS (10; not SECONDS, which is bash's elapsed-time counter).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python}
DTYPE=${DTYPE:-bfloat16}
TRAJECTORIES=${TRAJECTORIES:-512}
STEPS=${STEPS:-10}
CONCURRENCY=${CONCURRENCY:-64}
SECONDS_PER_POINT=${POINT_SECONDS:-10}
VLLM_PORT=${VLLM_PORT:-8101}
PRM_PORT=${PRM_PORT:-8102}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PYTHON" -c "import vllm, fastapi, httpx, prm_distill" || { echo "needs vllm and prm_distill[serve] in $PYTHON's env" >&2; exit 1; }
MODEL=${1:-$(cd benchmarks && "$PYTHON" -c "from serve_latency import bench_checkpoint; print(bench_checkpoint(None, False))")}
LOGS=$(mktemp -d)
echo "model $MODEL, dtype $DTYPE, logs in $LOGS"

# The exact command the README gives; vLLM gets part of the GPU so our engine fits beside it.
VLLM_CMD=$("$PYTHON" -m prm_distill.serve.vllm_backend --model "$MODEL" --print-serve-command --port "$VLLM_PORT" --dtype "$DTYPE")
echo "$VLLM_CMD"
bash -c "exec $VLLM_CMD --gpu-memory-utilization 0.4" > "$LOGS/vllm.log" 2>&1 &
VLLM_PID=$!
"$PYTHON" -m prm_distill.cli serve --model "$MODEL" --port "$PRM_PORT" --device cuda --dtype "$DTYPE" > "$LOGS/prm.log" 2>&1 &
PRM_PID=$!
trap 'kill "$VLLM_PID" "$PRM_PID" 2>/dev/null || true; wait' EXIT

wait_ready() {  # url log
    for _ in $(seq 1 600); do
        curl -sf "$1/health" > /dev/null && return 0
        sleep 1
    done
    echo "$1 did not become ready" >&2
    tail -50 "$2" >&2
    exit 1
}
wait_ready "http://127.0.0.1:$VLLM_PORT" "$LOGS/vllm.log"
wait_ready "http://127.0.0.1:$PRM_PORT" "$LOGS/prm.log"

"$PYTHON" benchmarks/engine_vs_vllm.py --model "$MODEL" --trajectories "$TRAJECTORIES" --steps "$STEPS" \
    --concurrency "$CONCURRENCY" --prm-url "http://127.0.0.1:$PRM_PORT" --vllm-url "http://127.0.0.1:$VLLM_PORT"

kill "$PRM_PID" "$VLLM_PID"
wait || true
trap - EXIT
"$PYTHON" benchmarks/serve_latency.py --model "$MODEL" --steps "$STEPS" --seconds "$SECONDS_PER_POINT"
