"""Step scores -> one trajectory score: the one aggregation used by rerank, pairs, filter and GRPO.

Give it *calibrated* scores after the checkpoint's verifier rule (what `PRMEngine.score` followed by
`calibrate`, or the client with the served calibration, returns), so every consumer ranks the same
numbers. Methods:

- `min`: the weakest step (a chain is as good as its worst link; the usual best-of-N choice).
- `prod`: product of P(good), the probability that every step is good if steps were independent.
- `last`: the final step's score (it has seen the whole solution).
- `mean`: average step score.
- `discounted`: sum_i gamma**i * s_i / sum_i gamma**i (i from 0): later steps weigh less, and the
  weights are normalised to sum to 1, so a longer trajectory is not favoured for having more steps
  (the practitioner's write-up: a plain or decayed sum rewards padding). gamma = 1 is the mean.
  `normalize=False` gives the raw decayed sum (kept for the GRPO helper's `decayed_sum`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

AGGREGATIONS = ("min", "prod", "last", "mean", "discounted")


def _check(step_scores: Sequence[float] | Any, gamma: float) -> np.ndarray:
    if not isinstance(gamma, (int, float)) or isinstance(gamma, bool) or not math.isfinite(gamma) or not 0 < gamma <= 1:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
    scores = np.asarray(step_scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.isfinite(scores).all():
        raise ValueError("step_scores must be a non-empty, finite 1-D sequence")
    return scores


def aggregate(step_scores: Sequence[float] | Any, method: str = "min", *, gamma: float = 0.9, normalize: bool = True) -> float:
    """One trajectory score from its per-step scores (see the module docstring for each method)."""
    if method not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {method!r} (expected {'|'.join(AGGREGATIONS)})")
    s = _check(step_scores, gamma)
    if method == "min":
        return float(s.min())
    if method == "prod":
        return float(np.prod(s))
    if method == "last":
        return float(s[-1])
    if method == "mean":
        return float(s.mean())
    weights = gamma ** np.arange(s.size, dtype=np.float64)
    total = float((weights * s).sum())
    return total / float(weights.sum()) if normalize else total


def aggregate_all(step_scores: Sequence[float], methods: Iterable[str] = AGGREGATIONS, *, gamma: float = 0.9) -> dict[str, float]:
    """{method: score} for several methods at once (rerank reports every method side by side)."""
    return {m: aggregate(step_scores, m, gamma=gamma) for m in methods}
