#!/usr/bin/env bash
# The CPU recipe end to end: build the process data, train (resumes from its checkpoints:
# a larger budget continues), then score ProcessBench GSM8K and MATH with thresholds chosen on the dev
# split of the training sources. Needs ../shared/data. Usage: benchmarks/quality.sh [train overrides...]
# The Qwen2.5 student (docs/results.md): CONFIG=configs/recipe-qwen-cpu.yaml OUT=runs/recipe-qwen-cpu \
#   benchmarks/quality.sh model.backbone="$(../shared/models/fetch.sh qwen2.5-coder-0.5b | tail -n 1)"
# QUALITY_ARGS="--test-limit 200" passes options to benchmarks/quality.py.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
DATA=${DATA:-../shared/data}
OUT=${OUT:-runs/recipe-cpu-mix}
CONFIG=${CONFIG:-configs/recipe-cpu-mix.yaml}
[ -d "$DATA/gsm8k" ] || { echo "quality.sh: $DATA not found (the real data sets)" >&2; exit 2; }
# Every source drops the problems of the test sets (ProcessBench GSM8K and MATH) by exact text.
EXCLUDE="--exclude $DATA/processbench/gsm8k.json --exclude $DATA/processbench/math.json"
[ -f runs/data/gsm8k/train.jsonl ] || $BIN/prm-distill data gsm8k --input "$DATA/gsm8k/train.jsonl" --output runs/data/gsm8k $EXCLUDE
[ -f runs/data/prmbench/train.jsonl ] || $BIN/prm-distill data prmbench $(for f in "$DATA"/prmbench/train_*.jsonl; do printf -- '--input %s ' "$f"; done) --output runs/data/prmbench $EXCLUDE
# PRM800K's human labels: PRMBench's problems keep PRMBench's side (its items are PRM800K solutions), its copies are dropped.
[ -f runs/data/prm800k/train.jsonl ] || $BIN/prm-distill data prm800k --input "$DATA/prm800k/phase1_train.parquet" --output runs/data/prm800k $EXCLUDE \
  --dev-with runs/data/prmbench/dev.jsonl --train-with runs/data/prmbench/train.jsonl
# MATH train holds PRM800K's (and so PRMBench's) problems: they keep those sources' sides.
[ -f runs/data/math/train.jsonl ] || $BIN/prm-distill data math --input "$DATA/math/train.jsonl" --output runs/data/math $EXCLUDE \
  $(for s in prmbench prm800k; do printf -- '--dev-with runs/data/%s/dev.jsonl --train-with runs/data/%s/train.jsonl ' $s $s; done)
[ -z "${DATA_ONLY:-}" ] || exit 0   # DATA_ONLY=1: only build (or reuse) the data (benchmarks/gpu_recipe.sh)
$BIN/prm-distill train --config "$CONFIG" optim.output_dir="$OUT" "$@"
# Thresholds from the policy's own labelled samples (docs/results.md): read beside the four-split rule when the
# real-policy dev side exists (benchmarks/policy_source.sh writes it).
POLICY_DEV=${POLICY_DEV:-runs/policy/labels-dev/labels.jsonl}
[ ! -f "$POLICY_DEV" ] || QUALITY_ARGS="${QUALITY_ARGS:-} --other-dev policy=$POLICY_DEV"
$BIN/python benchmarks/quality.py --model "$OUT" $(for s in gsm8k prmbench prm800k math; do printf -- '--dev runs/data/%s/dev.jsonl ' "$s"; done) \
  --test "$DATA/processbench/gsm8k.json" --test "$DATA/processbench/math.json" \
  --snapshots "$OUT/snapshots" --output "$OUT/quality.json" ${QUALITY_ARGS:-}
