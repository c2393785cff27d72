"""The drift rules: pure functions of (current report, previous report, bounds).

Kept apart from scoring so the rules can be stated, tested on constructed histories and applied to
any two report dicts. Every rule needs a previous report (the newest one in `--history`); without
one, or when a value it needs is undefined (null/NaN), it is "not evaluated" and not raised.
Differences within 1e-9 of a bound count as equal to it (no flag exactly at the bound). When the
sidecar calibration changed between the two reports, the details of score_inflation and ece_rise
say so: served scores then moved with the calibration as well as with the data.

- `auroc_drop`: previous AUROC - current AUROC > `auroc_drop` (0.02). The PRM ranks good and bad
  held-out steps worse than it did.
- `ece_rise`: current ECE - previous ECE > `ece_rise` (0.02). Served probabilities drifted away
  from the held-out labels.
- `score_inflation`: mean score - previous mean score > `inflation_rise` (0.02) AND agreement -
  previous agreement <= `inflation_agreement_max` (0.0). The policy learnt the PRM's taste: scores
  go up while quality, as the judge sees it, does not. When both reports have fresh policy
  rollouts the rule uses the fresh rollouts' mean score and their agreement with the judge;
  otherwise the held-out mean score and the held-out agreement with its labels.
- `label_shift`: total-variation distance between the fresh rollouts' judge-label distributions
  (shares of bad < 0.5, neutral = 0.5, good > 0.5 among supervised steps) of the two reports >
  `label_shift_tv` (0.1). The policy now produces different kinds of steps than the PRM was
  last checked on. Needs fresh rollouts in both reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config import DriftSettings

EPS = 1e-9
FLAGS = ("score_inflation", "auroc_drop", "ece_rise", "label_shift")
LABEL_CLASSES = ("bad", "neutral", "good")


def num(report: Mapping[str, Any] | None, *path: str) -> float | None:
    """A finite number at report[path...], else None."""
    node: Any = report
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, (int, float)) or not math.isfinite(node):
        return None
    return float(node)


def _result(raised: bool, rule: str, values: dict[str, Any], note: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"raised": bool(raised), "rule": rule, "values": values}
    if note:
        out["note"] = note
    return out


def _not_evaluated(rule: str, why: str) -> dict[str, Any]:
    return _result(False, rule, {}, f"not evaluated: {why}")


def auroc_drop(current: Mapping[str, Any], previous: Mapping[str, Any] | None, s: DriftSettings) -> dict[str, Any]:
    rule = f"previous auroc - auroc > {s.auroc_drop}"
    cur, prev = num(current, "auroc"), num(previous, "auroc")
    if previous is None:
        return _not_evaluated(rule, "no previous report")
    if cur is None or prev is None:
        return _not_evaluated(rule, "auroc undefined in one of the reports")
    drop = prev - cur
    return _result(drop > s.auroc_drop + EPS, rule, {"auroc": cur, "previous_auroc": prev, "drop": drop})


def ece_rise(current: Mapping[str, Any], previous: Mapping[str, Any] | None, s: DriftSettings) -> dict[str, Any]:
    rule = f"ece - previous ece > {s.ece_rise}"
    cur, prev = num(current, "ece"), num(previous, "ece")
    if previous is None:
        return _not_evaluated(rule, "no previous report")
    if cur is None or prev is None:
        return _not_evaluated(rule, "ece undefined in one of the reports")
    rise = cur - prev
    return _result(rise > s.ece_rise + EPS, rule, {"ece": cur, "previous_ece": prev, "rise": rise})


def inflation_basis(current: Mapping[str, Any], previous: Mapping[str, Any] | None) -> str:
    """'fresh' when both reports carry fresh-rollout mean score and agreement, else 'heldout'."""
    both = all(num(r, "fresh", "mean_score") is not None and num(r, "fresh", "agreement") is not None for r in (current, previous))
    return "fresh" if previous is not None and both else "heldout"


def score_inflation(current: Mapping[str, Any], previous: Mapping[str, Any] | None, s: DriftSettings) -> dict[str, Any]:
    rule = f"mean score - previous mean score > {s.inflation_rise} and agreement - previous agreement <= {s.inflation_agreement_max}"
    if previous is None:
        return _not_evaluated(rule, "no previous report")
    basis = inflation_basis(current, previous)
    if basis == "fresh":
        cur_s, prev_s = num(current, "fresh", "mean_score"), num(previous, "fresh", "mean_score")
        cur_a, prev_a = num(current, "fresh", "agreement"), num(previous, "fresh", "agreement")
    else:
        cur_s, prev_s = num(current, "mean_score"), num(previous, "mean_score")
        cur_a, prev_a = num(current, "agreement_heldout"), num(previous, "agreement_heldout")
    if None in (cur_s, prev_s, cur_a, prev_a):
        return _not_evaluated(rule, f"mean score or agreement ({basis}) undefined in one of the reports")
    rise, agree_change = cur_s - prev_s, cur_a - prev_a  # type: ignore[operator]
    raised = rise > s.inflation_rise + EPS and agree_change <= s.inflation_agreement_max + EPS
    return _result(raised, rule, {"basis": basis, "mean_score": cur_s, "previous_mean_score": prev_s, "rise": rise,
                                  "agreement": cur_a, "previous_agreement": prev_a, "agreement_change": agree_change})


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """1/2 * sum over classes of |p - q| (0: the same distribution, 1: disjoint)."""
    return 0.5 * sum(abs(float(p.get(k, 0.0)) - float(q.get(k, 0.0))) for k in LABEL_CLASSES)


def _distribution(report: Mapping[str, Any] | None) -> dict[str, float] | None:
    fresh = report.get("fresh") if isinstance(report, Mapping) else None
    dist = fresh.get("label_distribution") if isinstance(fresh, Mapping) else None
    if not isinstance(dist, Mapping) or any(num(dist, k) is None for k in LABEL_CLASSES):
        return None
    return {k: float(dist[k]) for k in LABEL_CLASSES}


def label_shift(current: Mapping[str, Any], previous: Mapping[str, Any] | None, s: DriftSettings) -> dict[str, Any]:
    rule = f"total variation between fresh label distributions (bad/neutral/good) > {s.label_shift_tv}"
    if previous is None:
        return _not_evaluated(rule, "no previous report")
    cur, prev = _distribution(current), _distribution(previous)
    if cur is None or prev is None:
        return _not_evaluated(rule, "needs fresh rollouts labelled by the judge in both reports")
    tv = total_variation(cur, prev)
    return _result(tv > s.label_shift_tv + EPS, rule, {"distribution": cur, "previous_distribution": prev, "total_variation": tv})


RULES = {"score_inflation": score_inflation, "auroc_drop": auroc_drop, "ece_rise": ece_rise, "label_shift": label_shift}


def evaluate(current: Mapping[str, Any], previous: Mapping[str, Any] | None, settings: DriftSettings | None = None) -> tuple[list[str], dict[str, Any]]:
    """(names of the raised flags in FLAGS order, per-rule details)."""
    s = settings or DriftSettings()
    details = {name: rule(current, previous, s) for name, rule in RULES.items()}
    versions = [num(r, "sidecar_calibration_version") for r in (previous, current)]
    if None not in versions and versions[0] != versions[1]:  # served scores moved with the calibration too
        for name in ("score_inflation", "ece_rise"):
            details[name]["calibration_changed"] = {"previous_version": versions[0], "version": versions[1]}
    return [name for name in FLAGS if details[name]["raised"]], details


__all__ = [
    "EPS", "FLAGS", "LABEL_CLASSES", "RULES", "auroc_drop", "ece_rise", "evaluate", "inflation_basis", "label_shift", "score_inflation",
    "total_variation",
]
