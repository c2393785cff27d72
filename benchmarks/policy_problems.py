"""Problem files for real-policy rollouts (docs/results.md, "Real-policy errors as a fifth source").

GSM8K *train* problems only, split as `prm-distill data gsm8k` split them (its train.jsonl / dev.jsonl, by
question text), so the rollouts' dev side is problem-disjoint from every training file; the first
`--skip` problems (best-of-N's choosing set) are kept out. A seeded sample of each side.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def questions(path: Path) -> set[str]:
    with path.open() as f:
        return {json.loads(line)["question"] for line in f if line.strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gsm8k", type=Path, default=Path("../shared/data/gsm8k/train.jsonl"), help="GSM8K train.jsonl (question, answer)")
    ap.add_argument("--built", type=Path, default=Path("runs/data/gsm8k"), help="folder of `prm-distill data gsm8k` (train.jsonl, dev.jsonl)")
    ap.add_argument("--output", type=Path, default=Path("runs/policy"), help="writes problems-train.jsonl and problems-dev.jsonl here")
    ap.add_argument("--train", type=int, default=480, help="train-side problems")
    ap.add_argument("--dev", type=int, default=48, help="dev-side problems")
    ap.add_argument("--skip", type=int, default=64, help="the first N GSM8K train problems are kept out (best-of-N chooses on them)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with a.gsm8k.open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    dev_q, train_q = questions(a.built / "dev.jsonl"), questions(a.built / "train.jsonl")
    cand = [(i, r) for i, r in enumerate(rows) if i >= a.skip]
    sides = {
        "dev": [(i, r) for i, r in cand if r["question"] in dev_q],
        "train": [(i, r) for i, r in cand if r["question"] in train_q and r["question"] not in dev_q],
    }
    rng = random.Random(a.seed)
    a.output.mkdir(parents=True, exist_ok=True)
    for name in ("dev", "train"):
        pool = sides[name]
        rng.shuffle(pool)
        chosen = sorted(pool[: getattr(a, name)], key=lambda x: x[0])
        with (a.output / f"problems-{name}.jsonl").open("w") as f:
            for i, r in chosen:
                f.write(json.dumps({"id": f"gsm8k-train-{i}", "question": r["question"], "answer": r["answer"]}) + "\n")
        print(f"{name}: {len(chosen)} of {len(pool)} problems -> {a.output / f'problems-{name}.jsonl'}")


if __name__ == "__main__":
    main()
