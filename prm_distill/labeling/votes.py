"""Votes to labels: the mean is the soft label (0.5 stays 0.5), with majority and agreement beside it.

A step with too few valid votes stays unsupervised (None) rather than trusting one noisy answer.
Several judges vote together; each judge's agreement with the ensemble majority is reported so a
judge that favours its own family's style shows up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


def majority(votes: list[float]) -> float | None:
    """The most common vote, None on a tie or no votes."""
    top = Counter(votes).most_common(2)
    if not top or (len(top) == 2 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def agreement(votes: list[float]) -> float | None:
    """Share of votes equal to the most common one (the trainer's agreement weight); None without votes."""
    if not votes:
        return None
    return Counter(votes).most_common(1)[0][1] / len(votes)


def mean_label(votes: list[float], min_valid: int) -> float | None:
    return sum(votes) / len(votes) if len(votes) >= min_valid else None


@dataclass
class StepLabel:
    label: float | None
    votes: list[float]
    by_judge: dict[str, list[float]] = field(default_factory=dict)
    agreement: float | None = None
    majority: float | None = None
    vetoed: bool = False


def aggregate_step(by_judge: dict[str, list[float]], min_valid: int, veto: bool = False) -> StepLabel:
    """Pool every judge's valid votes; `veto` (a false equation found by the verifier) forces 0."""
    pooled = [v for vs in by_judge.values() for v in vs]
    label = 0.0 if veto else mean_label(pooled, min_valid)
    return StepLabel(label, pooled, {k: list(v) for k, v in by_judge.items()}, agreement(pooled), majority(pooled), veto)


def judge_agreement(steps: list[StepLabel]) -> dict[str, float | None]:
    """Per judge: share of steps (where both exist) on which its own majority equals the ensemble majority."""
    hits: dict[str, list[bool]] = {}
    for st in steps:
        if st.majority is None:
            continue
        for name, vs in st.by_judge.items():
            own = majority(vs)
            if own is not None:
                hits.setdefault(name, []).append(own == st.majority)
    return {name: sum(h) / len(h) for name, h in hits.items()}
