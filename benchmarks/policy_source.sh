#!/usr/bin/env bash
# Real-policy process data (docs/results.md, "Real-policy errors as a fifth source"): the Qwen2.5-Coder-0.5B
# policy's own samples on GSM8K train problems, first errors placed by the reference rule
# (`prm-distill label judge.backend=reference`). Needs the GSM8K build of benchmarks/quality.sh
# (DATA_ONLY=1 benchmarks/quality.sh) and the vLLM venv (scripts/setup_vllm.sh).
# Usage: POLICY=<qwen2.5-coder-0.5b folder> benchmarks/policy_source.sh
#   TRAIN_SECONDS (default 3000) time-boxes the train side's sampling; a rerun resumes both sides.
#   Writes $OUT/labels-{dev,train}/labels.jsonl (default OUT=runs/policy): the fifth data.train file and its dev side.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/policy}
POLICY=${POLICY:?set POLICY to the policy folder, e.g. \$(../shared/models/fetch.sh qwen2.5-coder-0.5b | tail -n 1)}
export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} TOKENIZERS_PARALLELISM=false
.venv/bin/python benchmarks/policy_problems.py --output "$OUT" || exit 1
rollout() {  # side, extra args: the one sampling command (same settings for sampling and the merge); ${limit[@]} prefixes it
  local side=$1; shift
  "${limit[@]}" .venv-vllm/bin/prm-distill rollout --policy "$POLICY" --problems "$OUT/problems-$side.jsonl" --output "$OUT/rollouts-$side" \
    --k 4 --temperature 0.8 --max-new-tokens 320 --backend vllm --seed 0 shard_problems=32 progress=false "$@"
}
for side in dev train; do
  limit=(); [ "$side" = train ] && limit=(timeout -s TERM "${TRAIN_SECONDS:-3000}")
  rollout "$side"
  rc=$?
  # 124 / 130: the time box or a signal stopped sampling; the finished samples are kept and labelled
  [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 130 ] || { echo "rollout $side failed: exit $rc"; exit $rc; }
  # after a stop, written samples may sit in shards or already in rollouts.jsonl: a rerun limited to the
  # problems whose 4 samples all exist (the rollout's own count: both, each sample once) generates nothing and merges
  # every written sample (a partial shard's samples too), so its summary covers them all
  n=$(.venv/bin/python -c "
import collections, json, sys
from pathlib import Path
from prm_distill.rollout.job import _done  # the rollout's own reading of what is written
have = collections.Counter(r['metadata']['problem_id'] for r in _done(Path(sys.argv[1])).values())
n = 0
for line in open(sys.argv[2]):
    if have[json.loads(line)['id']] < 4:
        break
    n += 1
print(n)" "$OUT/rollouts-$side" "$OUT/problems-$side.jsonl")
  [ "$n" -gt 0 ] || { echo "rollout $side: no problem has all its samples yet; rerun to resume"; exit 1; }
  limit=(); rollout "$side" --limit "$n" || exit 1
  .venv/bin/prm-distill label --config configs/label.yaml input="$OUT/rollouts-$side/rollouts.jsonl" \
    output="$OUT/labels-$side" judge.backend=reference votes=1 min_valid_votes=1 || exit 1
done
