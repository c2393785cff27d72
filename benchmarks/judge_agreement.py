"""The offline judges against labels known by construction: how often the embedded local judge
(SmolLM2-135M-Instruct in-process, first_error mode, constrained verdict, 3 votes) plus the
arithmetic verifier, and the verifier alone with answer anchoring, agree with the labels of
synthetic arithmetic trajectories whose first error is planted at a known step.

This is what the old `prm-distill demo` printed ("agreement with the construction labels"); the
main job (`prm-distill pipeline`) trains on the verifier's labels and no longer measures it.

    python benchmarks/judge_agreement.py [--n 1600] [--judged 48] [--judge-model smollm2] [--output runs/judge_agreement]

Prints one line per judge set (trajectories, kept after anchoring, supervised steps, agreement at
0.5, seconds) and writes them to OUTPUT/agreement.json; the local judge's answers are cached in
OUTPUT/label_cache.jsonl, so a rerun with the same settings costs nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from prm_distill.atomic import write_json
from prm_distill.labeling import LabelJobConfig, label_records
from prm_distill.labeling.config import AnchorConfig, JudgeConfig, VerifierConfig
from prm_distill.records import Trajectory
from prm_distill.synthetic import SyntheticConfig, generate


def agreement(labelled: list[Trajectory], truth: dict[str, list[float | None] | None]) -> tuple[int, float | None]:
    """(supervised steps compared, share where the label and the construction label fall on the same side of 0.5)."""
    pairs = [(a, b) for r in labelled for a, b in zip(r.labels or [], truth.get(r.id) or []) if a is not None and b is not None]
    return len(pairs), (sum((a >= 0.5) == (b >= 0.5) for a, b in pairs) / len(pairs) if pairs else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1600, help="synthetic trajectories (the old demo's training split)")
    p.add_argument("--judged", type=int, default=48, help="trajectories labelled by the local judge + verifier; the rest by the verifier alone")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--judge-model", default="smollm2", help="the local judge's model folder ('smollm2' = embedded)")
    p.add_argument("--output", default="runs/judge_agreement")
    args = p.parse_args()

    out = Path(args.output)
    records = generate(SyntheticConfig(n=args.n, seed=args.seed, id_prefix="train"))
    truth = {r.id: r.labels for r in records}
    # drop a wrong-answer rollout whose steps all look good; no zeroing of final steps (as the pipeline's label stage)
    anchor = AnchorConfig(enabled=True, rules=["drop_wrong_all_good"])
    judge = JudgeConfig(backend="local", model=args.judge_model, verdict="constrained")
    rows = []
    t0 = time.time()
    judged = label_records(records[: args.judged], LabelJobConfig(mode="first_error", votes=3, verifier=VerifierConfig(enabled=True), anchor=anchor,
                                                                   progress=False, judge=judge), cache_path=out / "label_cache.jsonl")
    rows.append(("local judge + verifier", args.judged, judged, time.time() - t0))
    t0 = time.time()
    bulk = label_records(records[args.judged :], LabelJobConfig(verifier=VerifierConfig(alone=True), anchor=anchor, progress=False))
    rows.append(("verifier + anchoring", args.n - args.judged, bulk, time.time() - t0))
    rows.append(("both (the old demo's set)", args.n, judged + bulk, rows[0][3] + rows[1][3]))

    report = []
    for name, n, labelled, seconds in rows:
        steps, agree = agreement(labelled, truth)
        report.append({"judges": name, "trajectories": n, "kept": len(labelled), "supervised_steps": steps, "agreement": agree,
                       "seconds": round(seconds, 1)})
        print(f"{name:28} {n:5} trajectories, {len(labelled):5} kept, {steps:6} supervised steps, agreement "
              f"{'n/a' if agree is None else f'{agree:.3f}'} with the construction labels ({seconds:.0f}s)")
    write_json(out / "agreement.json", {"config": vars(args), "rows": report})
    print(json.dumps({"written": str(out / "agreement.json")}))


if __name__ == "__main__":
    main()
