"""The demo's labelling stage: the training split relabelled as a user would, with the offline judges."""

from __future__ import annotations

import time
from pathlib import Path

from ..labeling import LabelJobConfig, label_records
from ..labeling.config import AnchorConfig, JudgeConfig, VerifierConfig
from ..records import Trajectory


def label_train_split(records: list[Trajectory], out: Path, n_judged: int, judge: JudgeConfig) -> list[Trajectory]:
    """Relabel the training split: `judge` (by default SmolLM2, first_error mode, constrained verdict,
    3 votes) with the arithmetic verifier on a sample, the verifier with answer anchoring on the rest;
    the labels by construction are kept aside to measure agreement."""
    t0 = time.time()
    # drop a wrong-answer rollout whose steps all look good; no zeroing of final steps: the student
    # cannot check a final answer and would learn to distrust every "The answer is" step
    anchor = AnchorConfig(enabled=True, rules=["drop_wrong_all_good"])
    judged = label_records(records[:n_judged], LabelJobConfig(
        mode="first_error", votes=3, verifier=VerifierConfig(enabled=True), anchor=anchor, progress=False, judge=judge),
        cache_path=out / "label_cache.jsonl")
    bulk = label_records(records[n_judged:], LabelJobConfig(verifier=VerifierConfig(alone=True), anchor=anchor, progress=False))
    labelled = judged + bulk
    truth = {r.id: r.labels for r in records}
    pairs = [(a, b) for r in labelled for a, b in zip(r.labels or [], truth[r.id] or []) if a is not None and b is not None]
    agree = sum((a >= 0.5) == (b >= 0.5) for a, b in pairs) / max(len(pairs), 1)
    print(f"[demo] labelled {len(records)} training rollouts in {time.time() - t0:.0f}s: {judge.name or judge.model} judge + arithmetic verifier on "
          f"{n_judged}, verifier + answer anchoring on the rest; {len(labelled)} kept, {len(pairs)} supervised steps, "
          f"agreement with the construction labels {agree:.3f}")
    return labelled
