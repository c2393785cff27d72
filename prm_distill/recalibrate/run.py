"""One recalibration round: score a fixed held-out set (and judged fresh rollouts), compare with the
newest earlier report, fit and check a calibration, audit for reward hacking, write the report.

The report's AUROC, ECE and mean score are computed from the scores users are served: the raw
model scores passed through the calibration in the sidecar at the time of the run. Decisions
(ProcessBench F1, agreement) use the checkpoint's threshold (or 0.5) passed through the same
calibration, so they are the decisions the served scores make.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import calibration as cal
from ..checkpoint import TRAINING_IDS, read_sidecar
from ..metrics import expected_calibration_error, reliability, report as metrics_report, step_accuracy as agreement, supervised
from ..protocol import Calibrated, StepScorer
from ..records import Trajectory, load_records, write_jsonl
from . import drift
from .adoption import fit_and_check, maybe_adopt
from .audits import run_audits
from .config import RecalibrateConfig
from .plots import draw_all
from .report import KIND, newest_report, previous_entry, write_report
from .stats import histogram, label_distribution, position_profile

log = logging.getLogger("prm_distill.recalibrate")
SHOWN_OVERLAP = 5


class HeldoutOverlapError(ValueError):
    """The held-out set shares trajectory ids with the model's training data."""


def load_heldout(path: str | os.PathLike, fmt: str) -> tuple[list[Trajectory], int]:
    """(labelled records, number dropped for having no supervised step); errors name the problem."""
    records = load_records(path, fmt)
    if not records:
        raise ValueError(f"held-out file {path} has no records; recalibration needs a labelled held-out set")
    labelled = [r for r in records if r.labels and any(lab is not None for lab in r.labels)]
    if not labelled:
        raise ValueError(f"held-out file {path}: none of its {len(records)} records has a step label; "
                         "recalibration needs a labelled held-out set (labels: one per step, P(good) in [0, 1] or null)")
    if len(labelled) < len(records):
        log.warning("held-out %s: %d of %d records have no step label and are left out", path, len(records) - len(labelled), len(records))
    return labelled, len(records) - len(labelled)


def check_not_trained_on(model_dir: str | os.PathLike, records: Sequence[Trajectory], heldout: str | os.PathLike) -> bool:
    """Refuse a held-out set sharing ids with `training_ids.txt`; False when the file is absent."""
    ids_file = Path(model_dir) / TRAINING_IDS
    if not ids_file.is_file():
        log.warning("%s has no %s: cannot check that the held-out set was never trained on", model_dir, TRAINING_IDS)
        return False
    trained = {line.strip() for line in ids_file.read_text(encoding="utf-8").splitlines() if line.strip()}
    shared = sorted({r.id for r in records} & trained)
    if shared:
        shown = ", ".join(repr(i) for i in shared[:SHOWN_OVERLAP]) + (", ..." if len(shared) > SHOWN_OVERLAP else "")
        raise HeldoutOverlapError(
            f"held-out set {heldout} shares {len(shared)} of its {len(records)} ids with the model's training data "
            f"({ids_file}), e.g. {shown}; a held-out set must never have been trained on")
    return True


def _check_model(model_dir: str | os.PathLike) -> None:
    p = Path(model_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"model folder not found: {p}")
    read_sidecar(p)  # a clear CheckpointError when it is not a prm_distill checkpoint


def _fresh_block(fresh: str | Path, label_config: str | Path, out: Path, cfg: RecalibrateConfig,
                 served: StepScorer, threshold: float) -> dict[str, Any]:
    """Label a sample of the fresh rollouts with the judge, score it as served, compare the two."""
    from .fresh import label_fresh

    out.mkdir(parents=True, exist_ok=True)
    judged, info = label_fresh(fresh, label_config, cfg.fresh, out / "fresh_label_cache.jsonl")
    write_jsonl(judged, out / "fresh_labels.jsonl")
    scores = served.score([(r.question, r.steps) for r in judged]) if judged else []
    labels = [r.labels for r in judged]
    flat = [s for ss in scores for s in ss]
    return {**info, "mean_score": float(np.mean(flat)) if flat else float("nan"), "agreement": agreement(scores, labels, threshold),
            "label_distribution": label_distribution(labels), "score_histogram": histogram(scores, cfg.histogram_bins),
            "labels_file": str(out / "fresh_labels.jsonl")}


def run_recalibration(
    model: str | os.PathLike,
    heldout: str | os.PathLike,
    output: str | os.PathLike,
    *,
    fmt: str = "jsonl",
    fresh: str | os.PathLike | None = None,
    label_config: str | os.PathLike | None = None,
    history: str | os.PathLike | None = None,
    adopt: bool = False,
    config: RecalibrateConfig | None = None,
    engine: StepScorer | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
    """Run one round and write report.json, report.md and the plots into `output`; returns the report.

    `engine` (any `protocol.StepScorer`: the in-process engine, vLLM, ...) saves loading the model
    again when the caller has one. The report's `drift` lists the raised drift flags and
    `drift_verdict` says whether there was anything to compare with; `floor` holds the absolute
    floors (checked every round); `redistill_advised` is true when a drift flag or a floor is
    raised, and `verdict` says it all in words.
    """
    t0 = time.time()
    cfg = config or RecalibrateConfig()
    out = Path(output)
    _check_model(model)
    if fresh is not None and label_config is None:
        raise ValueError("--fresh needs --label-config (the judge that labels a sample of the rollouts)")
    if label_config is not None and fresh is None:
        raise ValueError("--label-config is only used with --fresh ROLLOUTS.jsonl")
    if fresh is not None and not Path(fresh).is_file():
        raise FileNotFoundError(f"fresh rollouts file not found: {fresh}")
    records, n_unlabelled = load_heldout(heldout, fmt)
    ids_checked = check_not_trained_on(model, records, heldout)
    found = newest_report(history, exclude=out)
    previous = found[1] if found else None

    if engine is None:
        from ..serve.engine import PRMEngine

        engine = PRMEngine.from_checkpoint(Path(model), device=device)
    sidecar = read_sidecar(model)  # now, not at engine load: the calibration served at this moment
    current = sidecar.calibration
    raw_threshold = cal.decision_threshold(sidecar.threshold, None)
    threshold = cal.decision_threshold(sidecar.threshold, current)

    serve = Calibrated(engine, current)  # what users are served now
    raw = engine.score([(r.question, r.steps) for r in records])
    served = cal.apply_each(raw, current)
    labels = [r.labels for r in records]
    metrics = metrics_report(served, labels, [r.first_error for r in records], threshold)
    metrics["ece"] = expected_calibration_error(served, labels, cfg.calibration.n_bins)
    heldout_agreement = agreement(served, labels, threshold)

    rep: dict[str, Any] = {
        "kind": KIND, "report_version": 1,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "model": str(model), "heldout": str(heldout), "format": fmt,
        "scores_source": f"served scores: raw model P(good) through the sidecar calibration at run time ({cal.describe(current)})",
        "sidecar_calibration_version": cal.version_of(sidecar.calibration),
        "threshold": threshold, "threshold_raw": raw_threshold,
        "threshold_source": "checkpoint" if sidecar.threshold is not None else "default 0.5",
        **{k: metrics[k] for k in ("auroc", "ece", "mean_score", "processbench_f1", "acc_erroneous", "acc_correct", "n_items", "n_steps")},
        "n_supervised_steps": int(supervised(served, labels)[0].size),
        "n_items_without_labels": n_unlabelled,
        "training_ids_checked": ids_checked,
        "agreement_heldout": heldout_agreement,
        "agreement": heldout_agreement, "agreement_source": "heldout",
        "label_distribution": label_distribution(labels),
        "score_histogram": histogram(served, cfg.histogram_bins),
        "reliability": reliability(served, labels, cfg.calibration.n_bins),
        "position": position_profile(served, cfg.audit.position_bins),
    }

    if fresh is not None and label_config is not None:  # both or neither (checked above)
        rep["fresh"] = _fresh_block(Path(fresh), Path(label_config), out, cfg, serve, threshold)
        rep["agreement"], rep["agreement_source"] = rep["fresh"]["agreement"], "fresh"

    rep["calibration"] = fit_and_check(records, raw, current, cfg.calibration)
    if cfg.audit.enabled:
        rep["audits"] = run_audits(records, served, serve, cfg.audit)
    if found:
        rep["previous"] = previous_entry(found[0], found[1], rep)
    else:
        rep["previous"] = None
    flags, details = drift.evaluate(rep, previous, cfg.drift)
    if cfg.drift.include_audit_flags and rep.get("audits"):
        flags += [f for f in rep["audits"]["flags"] if f not in flags]
    rep["drift"], rep["drift_details"] = flags, details
    below, floor_details = drift.floors(rep, cfg.floor)
    rep["floor"] = {"flags": below, "details": floor_details}
    rep["drift_verdict"] = drift.drift_verdict(rep)
    rep["redistill_advised"] = bool(flags or below)
    rep["verdict"] = drift.verdict(rep)
    rep["calibration"] = maybe_adopt(model, rep["calibration"], adopt)
    rep["config"] = asdict(cfg)
    out.mkdir(parents=True, exist_ok=True)
    rep["plots"] = draw_all(out, rep, previous)
    rep["elapsed_s"] = round(time.time() - t0, 2)
    write_report(out, rep)
    log.info("recalibration: drift %s, floor %s, calibration %s -> %s", flags or rep["drift_verdict"], below or "met",
             rep["calibration"].get("reason"), out / "report.json")
    return rep


__all__ = ["HeldoutOverlapError", "check_not_trained_on", "load_heldout", "run_recalibration"]
