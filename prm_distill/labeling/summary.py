"""The job summary: label distribution, vote agreement, invalid-vote rate, judge latency and cost,
and the mean label by relative step position (a judge whose labels slide with position, not
correctness, shows position bias)."""

from __future__ import annotations

from typing import Any

from ..records import Trajectory
from .labeler import RunStats
from .montecarlo import agreement_matrix, montecarlo_stats
from .votes import StepLabel, judge_agreement, majority

POSITION_BINS = 5


def _bucket(label: float) -> str:
    if label in (0.0, 0.5, 1.0):
        return f"{label:g}"
    return "(0,0.5)" if label < 0.5 else "(0.5,1)"


def _percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def reference_stats(records: list[Trajectory]) -> dict[str, Any] | None:
    """The reference rule's verdicts (correct, bare_answer, wrong, no_answer) and the records left
    unlabelled because their last step states no answer (named, never a silent label)."""
    verdicts = [(r.id, r.judge["reference"]["verdict"]) for r in records if r.judge and "reference" in r.judge]
    if not verdicts:
        return None
    counts = {v: sum(1 for _, x in verdicts if x == v) for v in ("correct", "bare_answer", "wrong", "no_answer")}
    return {**counts, "no_answer_ids": [rid for rid, v in verdicts if v == "no_answer"][:100]}


def summarize(records: list[Trajectory], stats: RunStats, skipped: list[dict[str, Any]], elapsed_s: float) -> dict[str, Any]:
    judged = [r for r in records if r.judge and "hard_negative" not in r.judge]
    negatives = [r for r in records if r.judge and "hard_negative" in r.judge]
    dist: dict[str, int] = {k: 0 for k in ("0", "(0,0.5)", "0.5", "(0.5,1)", "1", "null")}
    by_pos: list[list[float]] = [[] for _ in range(POSITION_BINS)]
    agreements, steps_for_judges, ref_hits = [], [], []
    for r in judged:
        by_judge = r.judge.get("by_judge", {})
        ref = r.metadata.get("input_labels")
        for k, lab in enumerate(r.labels or []):
            dist["null" if lab is None else _bucket(lab)] += 1
            if lab is None:
                continue
            by_pos[min(POSITION_BINS - 1, k * POSITION_BINS // len(r.steps))].append(lab)
            votes = r.votes[k] if r.votes else []
            if r.judge["agreement"][k] is not None:
                agreements.append(r.judge["agreement"][k])
            steps_for_judges.append(StepLabel(lab, votes, {n: v[k] for n, v in by_judge.items()}, majority=majority(votes)))
            if ref and ref[k] is not None:
                ref_hits.append((lab >= 0.5) == (ref[k] >= 0.5))
    labelled = sum(1 for r in judged for lab in r.labels or [] if lab is not None)
    valid = sum(r.judge.get("valid_votes", 0) for r in judged)
    invalid = sum(r.judge.get("invalid_votes", 0) for r in judged)
    answers = sum(r.judge.get("answers", 0) for r in judged)
    per_step = lambda x: round(x / labelled, 3) if labelled else None  # noqa: E731
    return {
        "records": len(judged),
        "hard_negatives": {kind: sum(1 for r in negatives if r.judge["hard_negative"] == kind) for kind in ("padded", "injected_error")},
        "steps": sum(len(r.steps) for r in judged),
        "labelled_steps": labelled,
        "label_distribution": dist,
        "mean_label": round(sum(lab for r in judged for lab in r.labels or [] if lab is not None) / labelled, 4) if labelled else None,
        "vote_agreement": round(sum(agreements) / len(agreements), 4) if agreements else None,
        "judge_agreement_with_ensemble": {k: round(v, 4) for k, v in judge_agreement(steps_for_judges).items()},
        "invalid_vote_rate": round(invalid / (valid + invalid), 4) if valid + invalid else None,
        "invalid_votes": invalid,
        "judge_latency_s": {
            "mean": round(sum(r.judge.get("latency_s", 0.0) for r in judged) / answers, 4) if answers else None,
            "p50_this_run": _percentile(stats.latencies, 0.5),
            "p95_this_run": _percentile(stats.latencies, 0.95),
        },
        "answers_per_labelled_step": per_step(answers),
        "tokens_per_labelled_step": {
            "in": per_step(sum(r.judge.get("tokens_in", 0) for r in judged)),
            "out": per_step(sum(r.judge.get("tokens_out", 0) for r in judged)),
        },
        "mean_label_by_position": {
            f"{100 * b // POSITION_BINS}-{100 * (b + 1) // POSITION_BINS}%": round(sum(v) / len(v), 4) if v else None
            for b, v in enumerate(by_pos)
        },
        "agreement_with_input_labels": round(sum(ref_hits) / len(ref_hits), 4) if ref_hits else None,
        "montecarlo": montecarlo_stats(judged),
        "reference": reference_stats(judged),
        "consensus": agreement_matrix(judged),
        "anchor_dropped": len(stats.dropped),
        "skipped_lines": len(skipped),
        "skipped": skipped[:100],
        "this_run": {
            "requests_sent": stats.sent, "cache_hits": stats.cache_hits,
            "tokens_in": stats.tokens_in, "tokens_out": stats.tokens_out, "elapsed_s": round(elapsed_s, 2),
        },
    }
