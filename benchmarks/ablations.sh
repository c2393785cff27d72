#!/usr/bin/env bash
# Equal-schedule ablations of the CPU recipes: each run follows CONFIG's schedule step for step and stops
# at STOP steps (optim.stop_at_step), then is scored on ProcessBench (thresholds from the dev split of the
# training sources). Needs the data of benchmarks/quality.sh.
# Usage: benchmarks/ablations.sh [names...]
#   EXTRA="optim.seed=1" adds train overrides to every run; QUALITY_ARGS adds benchmarks/quality.py options
#   (e.g. "--other-dev prm800k=runs/data/prm800k/dev.jsonl": thresholds and AUROC on PRM800K's human-labelled dev too)
#   configs/recipe-cpu.yaml (default; GSM8K test only): both gsm8k prmbench layers24 layers30 pairwise mix
#   CONFIG=configs/recipe-cpu-mix.yaml STOP=150 (GSM8K and MATH, TEST_LIMIT items each, all four dev splits):
#     four (the recipe) no-prm800k no-math two (GSM8K + PRMBench only) neutral-half neutral-unsupervised
#     (what a PRM800K rating 0 means in training: 0.5, or no label; the recipe's is good; dev stays the recipe's)
#     alternatives (PRM800K's train file plus up to 8 non-preferred rated steps per problem as items of their own,
#     --alternatives-per-problem 8; those of problems in any dev split are dropped, so dev stays the recipe's)
#     (the recorded ablations in docs/results.md ran on that recipe's first schedule: EXTRA="optim.max_steps=450 optim.mixed_precision=no")
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
DATA=${DATA:-../shared/data}
STOP=${STOP:-60}
ROOT=${ROOT:-runs/ablations}
CONFIG=${CONFIG:-configs/recipe-cpu.yaml}
G=runs/data/gsm8k P=runs/data/prmbench H=runs/data/prm800k M=runs/data/math
if [ "$CONFIG" = configs/recipe-cpu.yaml ]; then
  DEVS="--dev $G/dev.jsonl --dev $P/dev.jsonl --dev-limit 300"; TESTS="--test $DATA/processbench/gsm8k.json"
else
  DEVS="--dev $G/dev.jsonl --dev $P/dev.jsonl --dev $H/dev.jsonl --dev $M/dev.jsonl"
  TESTS="--test $DATA/processbench/gsm8k.json --test $DATA/processbench/math.json --test-limit ${TEST_LIMIT:-200}"
fi
run() {  # name, overrides...
  local name=$1; shift
  local out="$ROOT/$name"
  [ -f "$out/prm_distill.json" ] || $BIN/prm-distill train --config "$CONFIG" optim.output_dir="$out" \
      optim.stop_at_step="$STOP" optim.snapshot_steps=0 optim.max_minutes=null ${EXTRA:-} "$@"
  $BIN/python benchmarks/quality.py --model "$out" $DEVS $TESTS ${QUALITY_ARGS:-} --output "$out/quality.json" | tail -n 12
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
    four) run four ;;
    no-prm800k) run no-prm800k "data.train=[$G/train.jsonl,$P/train.jsonl,$M/train.jsonl]" "data.mix=[1,1,0.5]" ;;
    no-math) run no-math "data.train=[$G/train.jsonl,$P/train.jsonl,$H/train.jsonl]" "data.mix=[1,1,1.5]" ;;
    two) run two "data.train=[$G/train.jsonl,$P/train.jsonl]" "data.mix=[]" ;;
    neutral-half|neutral-unsupervised) neutral=${n#neutral-}
      [ -f runs/data/prm800k-$neutral/train.jsonl ] || $BIN/prm-distill data prm800k --input "$DATA/prm800k/phase1_train.parquet" \
        --output runs/data/prm800k-$neutral --neutral $neutral --exclude "$DATA/processbench/gsm8k.json" --exclude "$DATA/processbench/math.json" \
        --dev-with $P/dev.jsonl --train-with $P/train.jsonl
      run $n "data.train=[$G/train.jsonl,$P/train.jsonl,runs/data/prm800k-$neutral/train.jsonl,$M/train.jsonl]" ;;
    alternatives) A=runs/data/prm800k-alt8
      [ -f $A/train.jsonl ] || $BIN/prm-distill data prm800k --input "$DATA/prm800k/phase1_train.parquet" --output $A \
        --alternatives-per-problem 8 --exclude "$DATA/processbench/gsm8k.json" --exclude "$DATA/processbench/math.json" \
        --dev-with $P/dev.jsonl --train-with $P/train.jsonl
      # the builder's split is drawn over its own problems, so this build's dev differs from the recipe's: keep the
      # recipe's train file and add the alternatives of problems that no dev split holds
      [ -f $A/train-recipe-split.jsonl ] || $BIN/python - "$A" $G $P $H $M <<'PY'
import json, sys
out, *sources = sys.argv[1:]
held = {json.loads(line)["question"] for s in sources for line in open(f"{s}/dev.jsonl")}
rows = [json.loads(line) for f in ("train", "dev") for line in open(f"{out}/{f}.jsonl")]
alts = [r for r in rows if r["metadata"]["kind"] == "alternative" and r["question"] not in held]
with open(f"{out}/train-recipe-split.jsonl", "w") as f:
    f.writelines(open(f"{sources[2]}/train.jsonl"))
    f.writelines(json.dumps(r) + "\n" for r in alts)
print(f"{len(alts)} alternatives outside every dev split added to {sources[2]}/train.jsonl")
PY
      run alternatives "data.train=[$G/train.jsonl,$P/train.jsonl,$A/train-recipe-split.jsonl,$M/train.jsonl]" ;;
    *) echo "unknown ablation $n" >&2; exit 2 ;;
  esac
done
