"""The end of a run: the dev report on the scores as the checkpoint will serve them, the exported
checkpoint (merged weights + sidecar + training ids), and mid-run snapshots for learning curves."""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..checkpoint import Sidecar, write_training_ids
from ..encoding import StepEncoder
from ..inference import score_encoded
from ..metrics import best_threshold, dev_split_classes, dev_split_problem, report
from ..records import Trajectory
from ..verify import apply_rule, rule
from .config import TrainJobConfig
from .model import export

log = logging.getLogger("prm_distill.train")


def verifier_rule(cfg: TrainJobConfig) -> dict | None:
    """The verifier rule the checkpoint will carry (None when disabled)."""
    return rule(cfg.verifier.cap) if cfg.verifier.enabled else None


def evaluate(model, encoder: StepEncoder, records: list[Trajectory], pad_id: int, threshold: float | None = None,
             verifier: dict | None = None) -> dict:
    """Dev report on the scores as the checkpoint will serve them (the verifier rule applied); with
    threshold None the best-F1 threshold on these records is chosen."""
    was_training = model.training
    model.eval()
    scores = score_encoded(model, [encoder.encode(r.question, r.steps) for r in records], pad_id)
    model.train(was_training)
    scores = apply_rule(verifier, [(r.question, r.steps) for r in records], scores)
    labels = [r.labels for r in records]
    errors = [r.first_error for r in records]
    if threshold is None:
        threshold = best_threshold(scores, errors)
    return report(scores, labels, errors, threshold)


def threshold_choice(dev: list[Trajectory], rep: dict | None) -> tuple[float | None, str, str | None]:
    """(threshold, its source, why the dev split is unusable or None) for the sidecar: the dev-chosen threshold
    (metrics.best_threshold, the one rule) when the dev split can choose one, else None with the reason in the
    source ("none: dev split unusable (<why>)"), never a silent null."""
    labels, errors = [r.labels for r in dev], [r.first_error for r in dev]
    problem = dev_split_problem(labels, errors)
    if problem is None and (rep is None or math.isnan(rep["processbench_f1"])):
        problem = "ProcessBench F1 is undefined on it"
    if problem is not None:
        return None, f"none: dev split unusable ({problem})", problem
    assert rep is not None
    return rep["threshold"], f"dev ({dev_split_classes(labels, errors)}): best ProcessBench F1", None


def _sidecar(cfg: TrainJobConfig, encoding: Sidecar, dev: list[Trajectory], rep: dict | None, training: dict[str, Any]) -> Sidecar:
    threshold, source, _ = threshold_choice(dev, rep)
    return replace(encoding, threshold=threshold, threshold_source=source, verifier=verifier_rule(cfg), training=training)


def export_final(model, tok, encoder: StepEncoder, dev: list[Trajectory], train_ids: list[str], pad_id: int, cfg: TrainJobConfig,
                 encoding: Sidecar, summary: dict[str, Any]) -> dict[str, Any]:
    """Evaluate on dev, export to cfg.optim.output_dir with the summary in the sidecar; returns the summary
    (with `threshold_source`, and `dev_problem`: why the dev split could choose no threshold, or None)."""
    out = Path(cfg.optim.output_dir)
    rep = evaluate(model, encoder, dev, pad_id, verifier=verifier_rule(cfg)) if dev else None
    summary["dev"] = rep
    _, summary["threshold_source"], summary["dev_problem"] = threshold_choice(dev, rep)
    export(model, tok, str(out), _sidecar(cfg, encoding, dev, rep, summary))
    write_training_ids(out, train_ids)
    return summary


def snapshot(model, tok, encoder: StepEncoder, dev: list[Trajectory], pad_id: int, cfg: TrainJobConfig, encoding: Sidecar, path: Path, at: dict,
             train_ids: list[str], is_copy: bool = False) -> None:
    """Export a merged copy of the model as it is now (training goes on with the original; a
    gathered copy is merged as is), with the run's training ids, as the final export has."""
    rep = evaluate(model, encoder, dev, pad_id, verifier=verifier_rule(cfg)) if dev else None
    export((model if is_copy else copy.deepcopy(model)).eval(), tok, str(path), _sidecar(cfg, encoding, dev, rep, {**at, "dev": rep, "snapshot": True}))
    write_training_ids(path, train_ids)
    log.info("snapshot at step %d -> %s (dev %s)", at["step"], path, rep)
