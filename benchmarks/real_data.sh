#!/usr/bin/env bash
# Real data: distil the default backbone on the PRMBench training items in ../shared/data for a
# bounded budget (configs/prmbench.yaml: 35 min of training), then evaluate on ProcessBench GSM8K
# and MATH with the threshold the run chose on its PRMBench dev split (fixed before ProcessBench).
#   bash benchmarks/real_data.sh [extra train overrides...]
set -euo pipefail
export PYTHONUNBUFFERED=1  # progress lines reach the log as they happen
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/prmbench}
DATA=../shared/data
[ -d "$DATA/prmbench" ] || { echo "needs $DATA (the shared reference data)"; exit 1; }
/usr/bin/time -v $PY -m prm_distill.cli train --config configs/prmbench.yaml optim.output_dir="$OUT" "$@" 2>&1 | tee "$OUT.train.log"
/usr/bin/time -v $PY -m prm_distill.cli eval --model "$OUT" --format processbench --device cpu \
  --data "$DATA/processbench/gsm8k.json" --data "$DATA/processbench/math.json" --output "$OUT.processbench.json" 2>&1 | tee "$OUT.eval.log"
