#!/usr/bin/env bash
# Equal-schedule ablations of the CPU recipe (issue 10): each run follows configs/recipe-cpu.yaml's
# schedule step for step and stops at STOP steps (optim.stop_at_step), then is scored on ProcessBench
# GSM8K (thresholds from the dev split of the training sources). Needs the data of benchmarks/quality.sh.
# Usage: benchmarks/ablations.sh [names...]   (default: all; names: both gsm8k prmbench layers24 layers30 pairwise mix noverifier)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
DATA=${DATA:-../shared/data}
STOP=${STOP:-60}
ROOT=${ROOT:-runs/ablations}
G=runs/data/gsm8k P=runs/data/prmbench
run() {  # name, overrides...
  local name=$1; shift
  local out="$ROOT/$name"
  [ -f "$out/prm_distill.json" ] || $BIN/prm-distill train --config configs/recipe-cpu.yaml optim.output_dir="$out" \
      optim.stop_at_step="$STOP" optim.snapshot_steps=0 optim.max_minutes=null "$@"
  $BIN/python benchmarks/quality.py --model "$out" --dev $G/dev.jsonl --dev $P/dev.jsonl --dev-limit 300 \
      --test "$DATA/processbench/gsm8k.json" --output "$out/quality.json" | tail -n 8
}
names=${*:-both gsm8k prmbench layers24 layers30 pairwise mix}
for n in $names; do
  echo "== $n (stop at step $STOP)"
  case $n in
    both) run both ;;
    gsm8k) run gsm8k "data.train=[$G/train.jsonl]" ;;
    prmbench) run prmbench "data.train=[$P/train.jsonl]" ;;
    layers24) run layers24 model.num_layers=24 ;;
    layers30) run layers30 model.num_layers=30 ;;
    pairwise) run pairwise loss.kind=pairwise ;;
    mix) run mix loss.kind=mix ;;
    *) echo "unknown ablation $n" >&2; exit 2 ;;
  esac
done
