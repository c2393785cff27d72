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

Without a previous report there is no drift verdict at all (`drift_verdict` "no_verdict", said so
in words by `verdict`), never "none". The floors (`floors`) need no history: every round,
`auroc_floor` is raised when AUROC < `floor.min_auroc` (0.6) and `f1_floor` when ProcessBench F1 <
`floor.min_f1` (0.05); a floor set to null, or a metric undefined on the held-out set, is not
evaluated. A raised floor advises re-distillation (exit 3) as a drift flag does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config import DriftSettings, FloorSettings

EPS = 1e-9
FLAGS = ("score_inflation", "auroc_drop", "ece_rise", "label_shift")
FLOORS = {"auroc_floor": ("auroc", "min_auroc"), "f1_floor": ("processbench_f1", "min_f1")}  # flag: (report metric, FloorSettings field)
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


def floors(current: Mapping[str, Any], settings: FloorSettings | None = None) -> tuple[list[str], dict[str, Any]]:
    """(names of the raised floor flags, per-floor details): absolute, so the first round has them too."""
    s = settings or FloorSettings()
    details: dict[str, Any] = {}
    for flag, (metric, setting) in FLOORS.items():
        bound = getattr(s, setting)
        if bound is None:
            details[flag] = _not_evaluated(f"{metric} < floor.{setting}", f"floor.{setting} is null (off)")
            continue
        rule = f"{metric} < {bound:g} (floor.{setting})"
        value = num(current, metric)
        if value is None:
            details[flag] = _not_evaluated(rule, f"{metric} is undefined on the held-out set")
            continue
        details[flag] = _result(value < bound - EPS, rule, {metric: value, setting: bound})
    return [flag for flag in FLOORS if details[flag]["raised"]], details


def drift_verdict(report: Mapping[str, Any]) -> str:
    """'flagged' (a drift flag), 'none' (compared with an earlier report, nothing raised) or
    'no_verdict' (no earlier report, or no rule could be evaluated against it)."""
    if report.get("drift"):
        return "flagged"
    evaluated = any("note" not in det for det in (report.get("drift_details") or {}).values())
    return "none" if report.get("previous") is not None and evaluated else "no_verdict"


def verdict(report: Mapping[str, Any]) -> str:
    """The round's conclusion in three lines (printed by the command, written to report.md): the
    drift verdict, the floors with their numbers, and what follows (exit 3 when anything is raised)."""
    state = drift_verdict(report)
    if state == "flagged":
        drift_line = "drift: " + ", ".join(report.get("drift") or [])
    elif state == "none":
        drift_line = "drift: none since the previous report"
    elif report.get("previous") is None:
        drift_line = "drift: no verdict: first round, nothing to compare with (--history: a folder of earlier reports)"
    else:
        drift_line = "drift: no verdict: no rule could be evaluated against the previous report (see drift_details)"
    floor = report.get("floor") or {}
    below = list(floor.get("flags") or [])
    parts = []
    for flag, det in (floor.get("details") or {}).items():
        metric, setting = FLOORS[flag]
        if "note" not in det:
            op = "<" if det["raised"] else ">="
            parts.append(f"{metric} {det['values'][metric]:.4f} {op} floor.{setting} {det['values'][setting]:g}")
        elif "undefined" in det["note"]:
            parts.append(f"{metric} undefined (floor.{setting} not checked)")
    floor_line = ("below the floor: " if below else "floor: met: ") + "; ".join(parts) if parts else "floor: off (floor.min_auroc and floor.min_f1 are null)"
    if state == "flagged" or below:
        end = "re-distillation advised (exit 3)"
    elif state == "none":
        end = "no re-distillation needed"
    else:
        end = "nothing flagged, but no drift verdict either: a verdict needs an earlier report"
    return f"{drift_line}\n{floor_line}\n-> {end}"


__all__ = [
    "EPS", "FLAGS", "FLOORS", "LABEL_CLASSES", "RULES", "auroc_drop", "drift_verdict", "ece_rise", "evaluate", "floors", "inflation_basis",
    "label_shift", "score_inflation", "total_variation", "verdict",
]
