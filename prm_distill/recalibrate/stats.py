"""Small numeric pieces of a recalibration report: agreement, label shares, histograms, bins, split.

Pure functions over per-trajectory score and label lists, so the report, the audits and the tests
compute them one way. Supervised steps, agreement (`step_accuracy`) and reliability bins come from
`prm_distill.metrics`, whose conventions these follow: a supervised step has a label that is not
None; it is good above 0.5, bad below, neutral at exactly 0.5.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

import numpy as np

NAN = float("nan")
Labels = Sequence[float | None] | None


def label_distribution(labels: Iterable[Labels]) -> dict[str, float]:
    """Shares of bad (< 0.5), neutral (= 0.5) and good (> 0.5) labels among supervised steps, and n."""
    flat = [lab for ls in labels for lab in (ls or []) if lab is not None]
    n = len(flat)
    if not n:
        return {"bad": NAN, "neutral": NAN, "good": NAN, "n": 0}
    return {
        "bad": sum(lab < 0.5 for lab in flat) / n,
        "neutral": sum(lab == 0.5 for lab in flat) / n,
        "good": sum(lab > 0.5 for lab in flat) / n,
        "n": n,
    }


def histogram(scores: Sequence[Sequence[float]], bins: int) -> dict[str, list]:
    """A compact equal-width histogram of all step scores on [0, 1] (stored so the next report can draw it)."""
    flat = [s for ss in scores for s in ss]
    counts, edges = np.histogram(np.clip(flat, 0.0, 1.0), bins=bins, range=(0.0, 1.0))
    return {"edges": [round(float(e), 6) for e in edges], "counts": [int(c) for c in counts]}


def position_profile(scores: Sequence[Sequence[float]], n_bins: int) -> dict:
    """Mean score per relative-position bin (step i of n sits at i / (n - 1)) and the least-squares
    slope of score on relative position. Trajectories of one step have no position and are skipped."""
    x, s = [], []
    for ss in scores:
        n = len(ss)
        if n < 2:
            continue
        x += [i / (n - 1) for i in range(n)]
        s += list(ss)
    xa, sa = np.asarray(x, dtype=float), np.asarray(s, dtype=float)
    idx = np.minimum((xa * n_bins).astype(int), n_bins - 1) if xa.size else np.zeros(0, dtype=int)
    bins = [{"lo": b / n_bins, "hi": (b + 1) / n_bins, "n": int((idx == b).sum()),
             "mean_score": float(sa[idx == b].mean()) if (idx == b).any() else NAN} for b in range(n_bins)]
    slope = NAN
    if xa.size >= 2 and float(np.var(xa)) > 0:
        slope = float(np.cov(xa, sa, bias=True)[0, 1] / np.var(xa))
    return {"bins": bins, "slope": slope, "n_steps": int(xa.size), "n_trajectories": sum(len(ss) >= 2 for ss in scores)}


def split_ids(ids: Iterable[str], fit_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """(fit ids, evaluation ids): sorted, shuffled with `seed`, the first round(fraction * n) fit.

    Split by trajectory, never by step (steps of one trajectory are correlated), and independent of
    file order. With two or more ids both parts are non-empty.
    """
    order = sorted(set(ids))
    random.Random(seed).shuffle(order)
    n = len(order)
    k = round(fit_fraction * n)
    if n >= 2:
        k = min(max(k, 1), n - 1)
    return set(order[:k]), set(order[k:])


def finite_mean(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else NAN
