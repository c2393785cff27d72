"""Step and trajectory metrics used by training, evaluation and recalibration.

Conventions (documented in the README):
- A supervised step is *good* when its label is above 0.5 and *bad* when below; soft labels of
  exactly 0.5 are left out of AUROC and accuracy but count in ECE (which compares mean score to
  mean label per bin).
- ProcessBench: a trajectory's prediction is the first step whose score is below the threshold,
  else -1; accuracy is taken separately on erroneous and on all-correct items and F1 is their
  harmonic mean.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Sequence

import numpy as np

NAN = float("nan")


def supervised(scores: Sequence[Sequence[float]], labels: Sequence[Sequence[float | None] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Flat (scores, labels) of the supervised steps (label not None; a None label list is skipped)."""
    p, y = [], []
    for ss, ls in zip(scores, labels):
        if ls is None:
            continue
        for s, lab in zip(ss, ls):
            if lab is not None:
                p.append(s)
                y.append(lab)
    return np.asarray(p, dtype=float), np.asarray(y, dtype=float)


def binary_auroc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """AUROC of scores against a positive/negative flag (ties count half; NaN when only one class is present)."""
    from sklearn.metrics import roc_auc_score

    yb = np.asarray(positive, dtype=bool)
    if yb.all() or not yb.any():
        return NAN
    return float(roc_auc_score(yb, np.asarray(scores, dtype=float)))


def step_auroc(scores, labels) -> float:
    """AUROC of step scores against good/bad labels (NaN when only one class is present)."""
    p, y = supervised(scores, labels)
    keep = y != 0.5
    return binary_auroc(p[keep], y[keep] > 0.5)


def paired_auroc_difference(scores_a, scores_b, labels, *, groups: Sequence[Hashable] | None = None, n_boot: int = 1000,
                            seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Step AUROC of a minus that of b on the same items, with a paired bootstrap interval over
    items (steps of one item are not independent, so items are what is resampled). Items of one
    problem are not independent either (a dev split holds several solutions per problem): give
    `groups` (one key per item, e.g. its question) and whole groups are resampled, which widens the
    interval to what the number of problems supports. Two scorers whose interval contains 0 are not
    told apart by this data."""
    if not len(scores_a) == len(scores_b) == len(labels):
        raise ValueError("scores_a, scores_b and labels must list the same items")
    if groups is not None and len(groups) != len(labels):
        raise ValueError(f"groups must name one group per item: {len(groups)} for {len(labels)} items")
    if not 0 < level < 1 or n_boot < 1:
        raise ValueError("level must lie in (0, 1) and n_boot >= 1")
    members: dict[Hashable, int] = {}
    cluster = [members.setdefault(g, len(members)) for g in (range(len(labels)) if groups is None else groups)]
    diff = step_auroc(scores_a, labels) - step_auroc(scores_b, labels)
    # A resample of whole clusters is a weight per cluster (how often it was drawn), so each scorer's
    # AUROC is the weighted Mann-Whitney statistic over one sort of its scores, not a new sort per draw.
    a, b = _WeightedAuroc(scores_a, labels, cluster), _WeightedAuroc(scores_b, labels, cluster)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        drawn = np.bincount(rng.integers(0, len(members), len(members)), minlength=len(members)).astype(float)
        d = a(drawn) - b(drawn)
        if not math.isnan(d):
            boots.append(d)
    lo, hi = (np.quantile(boots, [(1 - level) / 2, (1 + level) / 2]) if boots else (NAN, NAN))
    return {"difference": float(diff), "low": float(lo), "high": float(hi), "level": level, "n_boot": len(boots),
            "n_groups": len(members)}


class _WeightedAuroc:
    """Step AUROC (ties count half, 0.5 and unlabelled steps left out) when each item's steps are
    counted `weight[cluster of the item]` times: a bootstrap draw without copying or re-sorting."""

    def __init__(self, scores, labels, cluster: Sequence[int]) -> None:
        p, y, c = [], [], []
        for ss, ls, k in zip(scores, labels, cluster):
            for s, lab in zip(ss, ls or []):
                if lab is not None and lab != 0.5:
                    p.append(s)
                    y.append(lab > 0.5)
                    c.append(k)
        self.good = np.asarray(y, dtype=bool)
        self.cluster = np.asarray(c, dtype=int)
        # dense rank of each score: equal scores share a rank, the tie that counts half
        ranks, self.rank = np.unique(np.asarray(p, dtype=float), return_inverse=True)
        self.n_ranks = len(ranks)

    def __call__(self, cluster_weight: np.ndarray) -> float:
        w = cluster_weight[self.cluster]
        good = np.bincount(self.rank[self.good], w[self.good], self.n_ranks)
        bad = np.bincount(self.rank[~self.good], w[~self.good], self.n_ranks)
        n_good, n_bad = good.sum(), bad.sum()
        if n_good == 0 or n_bad == 0:
            return NAN
        below = np.cumsum(bad) - bad  # bad weight strictly below each rank
        return float((good * (below + 0.5 * bad)).sum() / (n_good * n_bad))


def _good_bad_means(scores, labels, group: Callable[[int, int], Any], groups: Sequence[Any]) -> dict[Any, dict[str, float]]:
    """Number and mean score of good and of bad steps in each group; `group(i, n)` names the group of step i
    of an item of n steps. Unsupervised and 0.5 steps are left out, as in AUROC."""
    good: dict[Any, list[float]] = {g: [] for g in groups}
    bad: dict[Any, list[float]] = {g: [] for g in groups}
    for ss, ls in zip(scores, labels):
        for i, (s, lab) in enumerate(zip(ss, ls or [])):
            if lab is None or lab == 0.5:
                continue
            (good if lab > 0.5 else bad)[group(i, len(ss))].append(float(s))
    return {k: {"n_good": len(good[k]), "n_bad": len(bad[k]), "mean_good": float(np.mean(good[k])) if good[k] else NAN,
                "mean_bad": float(np.mean(bad[k])) if bad[k] else NAN} for k in groups}


def position_profile(scores, labels, last: int = 8) -> list[dict[str, float]]:
    """Mean score of good and of bad steps at each step position (0-based; positions >= `last` pooled into
    one row). One threshold serves every position, so a student whose good steps score lower the later
    they come (the position bias an LLM judge is known for) must choose it low and miss errors it ranks
    right within a position; this shows that drift. Unsupervised and 0.5 steps are left out, as in AUROC."""
    rows = _good_bad_means(scores, labels, lambda i, n: min(i, last), range(last + 1))
    return [{"position": k, **row} for k, row in rows.items()]


def final_step_profile(scores, labels) -> dict[str, dict[str, float]]:
    """Mean score of good and of bad steps, split into each item's final step and its earlier steps. Every
    solution ends in an answer step, so a student that cannot tell a right final answer from a wrong one (its
    training data label answer steps 0 about as often as 1) scores every final step low, and one threshold
    must then be chosen low enough to pass correct solutions' endings. Each part also gets its own step
    `auroc`: on final steps it says whether right answers outrank wrong ones; on earlier steps it is free of
    data whose first error is mostly the answer (a rule that blames the final step when only the answer is
    wrong), which reward a student for doubting every final step. Unsupervised and 0.5 steps are left out,
    as in AUROC."""
    def part(i: int, n: int) -> str:
        return "final" if i == n - 1 else "earlier"

    rows: dict[str, dict[str, float]] = _good_bad_means(scores, labels, part, ("final", "earlier"))
    for name, row in rows.items():
        only = [None if ls is None else [lab if part(i, len(ss)) == name else None for i, lab in enumerate(ls)]
                for ss, ls in zip(scores, labels)]
        row["auroc"] = step_auroc(scores, only)
    return rows


def step_accuracy(scores, labels, threshold: float = 0.5) -> float:
    """Share of supervised, non-neutral steps where (score >= threshold) == (label > 0.5): the
    student's agreement with the labels at that threshold."""
    p, y = supervised(scores, labels)
    keep = y != 0.5
    if not keep.any():
        return NAN
    return float(np.mean((p[keep] >= threshold) == (y[keep] > 0.5)))


def reliability(scores, labels, n_bins: int = 10) -> list[dict[str, float]]:
    """Per equal-width score bin: its range, number of supervised steps, mean score and mean label."""
    p, y = supervised(scores, labels)
    idx = np.minimum((p * n_bins).astype(int), n_bins - 1)
    out = []
    for b in range(n_bins):
        m = idx == b
        out.append({"lo": b / n_bins, "hi": (b + 1) / n_bins, "n": int(m.sum()),
                    "mean_score": float(p[m].mean()) if m.any() else NAN, "mean_label": float(y[m].mean()) if m.any() else NAN})
    return out


def expected_calibration_error(scores, labels, n_bins: int = 10) -> float:
    """Sum over the reliability bins of (bin share) x |mean score - mean label|."""
    bins = reliability(scores, labels, n_bins)
    total = sum(b["n"] for b in bins)
    if total == 0:
        return NAN
    return float(sum(b["n"] / total * abs(b["mean_score"] - b["mean_label"]) for b in bins if b["n"]))


def first_below(scores: Sequence[float], threshold: float) -> int:
    for i, s in enumerate(scores):
        if s < threshold:
            return i
    return -1


def processbench_f1(scores: Sequence[Sequence[float]], first_errors: Sequence[int], threshold: float) -> dict[str, float]:
    """{'acc_erroneous', 'acc_correct', 'processbench_f1'}; an accuracy is NaN when its class is empty."""
    err_hits, err_n, ok_hits, ok_n = 0, 0, 0, 0
    for ss, fe in zip(scores, first_errors):
        pred = first_below(ss, threshold)
        if fe == -1:
            ok_n += 1
            ok_hits += pred == -1
        else:
            err_n += 1
            err_hits += pred == fe
    acc_err = err_hits / err_n if err_n else NAN
    acc_ok = ok_hits / ok_n if ok_n else NAN
    if math.isnan(acc_err) or math.isnan(acc_ok):
        f1 = NAN
    else:
        f1 = 0.0 if acc_err + acc_ok == 0 else 2 * acc_err * acc_ok / (acc_err + acc_ok)
    return {"acc_erroneous": acc_err, "acc_correct": acc_ok, "processbench_f1": f1}


# Candidate thresholds: fixed, not taken from the scores, so two runs whose scores differ by float
# rounding (bf16 vs fp32, another batch size) weigh the same candidates. Even in logit space from
# sigmoid(-8) to sigmoid(8): about 0.01 apart near 0.5, finer towards 0 and 1 where a sigmoid head's
# scores crowd.
THRESHOLD_GRID: tuple[float, ...] = tuple(float(1.0 / (1.0 + math.exp(-x))) for x in np.linspace(-8.0, 8.0, 641))
F1_TOLERANCE = 0.005


def _f1_on_grid(scores: Sequence[Sequence[float]], first_errors: Sequence[int], grid: np.ndarray) -> list[float]:
    """processbench_f1 at every threshold of `grid` at once. An item is hit for an interval of
    thresholds: an all-correct item for t <= min(scores); an item whose first error is step k for
    min(scores[:k]) >= t > scores[k] (the first score below t is then step k's)."""
    ok_hit = np.zeros(len(grid))
    err_hit = np.zeros(len(grid))
    ok_n = err_n = 0
    for ss, fe in zip(scores, first_errors):
        if fe == -1:
            ok_n += 1
            if len(ss):
                ok_hit += grid <= min(ss)
            else:
                ok_hit += 1.0
        else:
            err_n += 1
            if 0 <= fe < len(ss):
                upper = min(ss[:fe]) if fe else math.inf
                err_hit += (grid > ss[fe]) & (grid <= upper)
    if not ok_n or not err_n:
        return [NAN] * len(grid)
    a_err, a_ok = err_hit / err_n, ok_hit / ok_n
    denom = a_err + a_ok
    f1 = np.where(denom > 0, 2 * a_err * a_ok / np.where(denom > 0, denom, 1.0), 0.0)
    return [float(x) for x in f1]


def best_threshold(scores: Sequence[Sequence[float]], first_errors: Sequence[int], tolerance: float = F1_TOLERANCE) -> float:
    """The one rule that picks a decision threshold from dev items (eval --dev, training's export,
    benchmarks/quality.py all call it): the middle of the candidates whose ProcessBench F1 is within
    `tolerance` of the best. F1 against the threshold is a staircase with near-ties far apart; the
    arg-max among them moves with float noise (0.178 vs 0.196 on the same files), the middle of the
    near-best plateau does not. 0.5 when F1 is undefined everywhere (a dev split of one class)."""
    if not any(len(ss) for ss in scores):
        return 0.5
    f1s = _f1_on_grid(scores, first_errors, np.asarray(THRESHOLD_GRID))
    valid = [f for f in f1s if not math.isnan(f)]
    if not valid:
        return 0.5
    top = max(valid)
    near = [t for t, f in zip(THRESHOLD_GRID, f1s) if not math.isnan(f) and f >= top - tolerance]
    return near[(len(near) - 1) // 2]


# Fewer records than this in a ProcessBench class (with a first error / all-correct) make a dev split
# "small": its threshold is still chosen, but the build and training warn that it is noisy.
MIN_DEV_PER_CLASS = 10


def dev_split_classes(labels: Sequence[Sequence[float | None] | None], first_errors: Sequence[int]) -> str:
    """The size and classes of a dev split, as the warnings and the threshold source name them."""
    n_err = sum(fe != -1 for fe in first_errors)
    steps = [lab for ls in labels for lab in (ls or []) if lab is not None and lab != 0.5]
    n_good = sum(lab > 0.5 for lab in steps)
    return (f"{len(first_errors)} records: {n_err} with a first error, {len(first_errors) - n_err} all-correct; "
            f"{n_good} good and {len(steps) - n_good} bad labelled steps")


def dev_split_problem(labels: Sequence[Sequence[float | None] | None], first_errors: Sequence[int]) -> str | None:
    """Why a dev split cannot choose a decision threshold (ProcessBench F1 needs records with a first
    error and all-correct ones) or measure step AUROC (good and bad steps); None when it can. Said at
    build and train time, and in the checkpoint's threshold source, instead of a silent NaN."""
    if not first_errors:
        return "no records"
    n_err = sum(fe != -1 for fe in first_errors)
    steps = [lab for ls in labels for lab in (ls or []) if lab is not None and lab != 0.5]
    n_good = sum(lab > 0.5 for lab in steps)
    why = []
    if not n_err or n_err == len(first_errors):
        why.append("ProcessBench F1 needs records with a first error and all-correct ones")
    if not n_good or n_good == len(steps):
        why.append("step AUROC needs good and bad steps")
    return f"{dev_split_classes(labels, first_errors)}: {' and '.join(why)}" if why else None


def dev_split_warning(labels: Sequence[Sequence[float | None] | None], first_errors: Sequence[int]) -> str | None:
    """The warning a dev split deserves (unusable, or small enough to be noisy), or None."""
    problem = dev_split_problem(labels, first_errors)
    if problem is not None:
        return f"dev split unusable ({problem}): no decision threshold can be chosen on it"
    n_err = sum(fe != -1 for fe in first_errors)
    if min(n_err, len(first_errors) - n_err) < MIN_DEV_PER_CLASS:
        return (f"dev split small ({dev_split_classes(labels, first_errors)}): the threshold chosen on it and its "
                f"metrics are noisy (fewer than {MIN_DEV_PER_CLASS} records of a class)")
    return None


def report(
    scores: Sequence[Sequence[float]], labels: Sequence[Sequence[float | None] | None], first_errors: Sequence[int], threshold: float
) -> dict[str, float]:
    """The evaluation report keys shared by `eval`, training and recalibration; every decision
    (step_accuracy, ProcessBench F1) is taken at `threshold`, which the report records."""
    flat = [s for ss in scores for s in ss]
    out = {
        "threshold": float(threshold),
        "auroc": step_auroc(scores, labels),
        "step_accuracy": step_accuracy(scores, labels, threshold),
        "ece": expected_calibration_error(scores, labels),
        "mean_score": float(np.mean(flat)) if flat else NAN,
        "n_items": len(scores),
        "n_steps": len(flat),
    }
    out.update(processbench_f1(scores, first_errors, threshold))
    return out


def fmt(value: Any, digits: int = 3, signed: bool = False) -> str:
    """A number as reports print it: fixed digits (with a sign when `signed`), "n/a" for an undefined
    metric (None, NaN, inf); anything else as str. The one formatter of eval, recalibrate and the demo."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)
