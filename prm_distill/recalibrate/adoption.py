"""Fit a calibration on one part of the held-out set and adopt it only if it helps on the other.

A calibration fitted and judged on the same steps always looks better; judged on a separate split
(by trajectory) it can be worse, e.g. when the held-out set is small or already calibrated. The
rule: adopted only when adoption was asked for AND its ECE on the evaluation split is strictly
below the ECE of what is served now (the sidecar's current calibration, or raw scores).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import calibration as cal
from ..checkpoint import write_calibration
from ..metrics import expected_calibration_error, reliability, supervised
from ..records import Trajectory
from .config import CalibrationSettings
from .stats import split_ids

ADOPTION_RULE = "adopted only with --adopt and when ece_after < ece_before (strictly) on the evaluation split"


def fit_and_check(records: Sequence[Trajectory], raw_scores: Sequence[Sequence[float]], current: Mapping[str, Any] | None,
                  settings: CalibrationSettings) -> dict[str, Any]:
    """Fit `settings.method` on the fit split's raw scores; ECE before (served now) and after on the
    evaluation split. Returns the report's `calibration` entry plus `candidate` (the fitted dict)."""
    fit_ids, eval_ids = split_ids((r.id for r in records), settings.fit_fraction, settings.seed)
    fit = [(s, r.labels) for r, s in zip(records, raw_scores) if r.id in fit_ids]
    ev = [(s, r.labels) for r, s in zip(records, raw_scores) if r.id in eval_ids]
    p_fit, y_fit = supervised([s for s, _ in fit], [lab for _, lab in fit])
    ev_scores, ev_labels = [s for s, _ in ev], [lab for _, lab in ev]
    n_eval = int(supervised(ev_scores, ev_labels)[0].size)
    out: dict[str, Any] = {
        "method": settings.method, "params": None, "ece_raw": None, "ece_before": None, "ece_after": None,
        "improved": False, "adopted": False, "adopt_requested": False, "version": None, "rule": ADOPTION_RULE,
        "current": cal.describe(current), "split": {"fit_fraction": settings.fit_fraction, "seed": settings.seed,
        "fit_items": len(fit), "eval_items": len(ev), "fit_steps": int(p_fit.size), "eval_steps": n_eval},
    }
    if n_eval == 0:
        out["error"] = "the evaluation split has no supervised steps"
        return out
    out["ece_raw"] = expected_calibration_error(ev_scores, ev_labels, settings.n_bins)
    out["ece_before"] = expected_calibration_error(cal.apply_each(ev_scores, current), ev_labels, settings.n_bins)
    try:
        candidate = cal.fit(settings.method, p_fit.tolist(), y_fit.tolist())
    except cal.CalibrationError as e:
        out["error"] = str(e)
        return out
    out["params"] = candidate["params"]
    after = cal.apply_each(ev_scores, candidate)
    out["ece_after"] = expected_calibration_error(after, ev_labels, settings.n_bins)
    out["reliability_after"] = reliability(after, ev_labels, settings.n_bins)
    out["improved"] = bool(out["ece_after"] < out["ece_before"])
    out["candidate"] = candidate
    return out


def maybe_adopt(model_dir: str | os.PathLike, result: dict[str, Any], adopt: bool) -> dict[str, Any]:
    """Write the candidate into the sidecar (atomically, next version) when asked and it improved;
    otherwise leave the sidecar untouched. Updates and returns `result` without the candidate."""
    candidate = result.pop("candidate", None)
    result["adopt_requested"] = bool(adopt)
    if adopt and candidate is not None and result["improved"]:
        stored = write_calibration(model_dir, {**candidate, "ece_before": result["ece_before"], "ece_after": result["ece_after"]})
        result["adopted"], result["version"] = True, stored["version"] if stored else None
        result["reason"] = f"adopted as version {result['version']}: ECE {result['ece_before']:.4f} -> {result['ece_after']:.4f} on the evaluation split"
    elif candidate is None:
        result["reason"] = f"not adopted: {result.get('error', 'no calibration was fitted')}"
    elif not result["improved"]:
        result["reason"] = f"not adopted: ECE would not improve on the evaluation split ({result['ece_before']:.4f} -> {result['ece_after']:.4f})"
    else:
        result["reason"] = "not adopted: improves ECE on the evaluation split; rerun with --adopt to write it into the sidecar"
    return result
