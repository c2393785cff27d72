"""`prm-distill eval`: score labelled files with a checkpoint and report the field's metrics.

The decision threshold (for ProcessBench F1 and step_accuracy alike) is never tuned on the evaluated items (that flatters
even a random head): it is given, chosen on a separate dev file, or the one the checkpoint chose
on its training dev split, else 0.5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .calibration import decision_threshold
from .metrics import best_threshold, final_step_profile, fmt, position_profile, report
from .protocol import StepScorer
from .records import Trajectory, load_records, sample_questions

# Dev records a threshold is chosen on: a seeded sample of whole questions (records.sample_questions), the same
# for `prm-distill eval --dev` and benchmarks/quality.py, so both choose the same threshold from the same files.
DEV_LIMIT = 600


def _score(engine: StepScorer, records: Sequence[Trajectory]) -> list[list[float]]:
    return engine.score([(r.question, r.steps) for r in records])


def dev_sample(dev_files: Sequence[str], fmt: str = "jsonl", limit: int | None = DEV_LIMIT, seed: int = 0) -> list[Trajectory]:
    """The dev records a threshold is chosen on (see DEV_LIMIT)."""
    return sample_questions([r for p in dev_files for r in load_records(p, fmt)], limit, seed)


def choose_threshold(engine: StepScorer, threshold: float | None, dev_files: Sequence[str], fmt: str, dev_format: str | None = None,
                     dev_limit: int | None = DEV_LIMIT) -> tuple[float, str]:
    if threshold is not None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"--threshold must be in [0, 1], got {threshold}")
        return threshold, "given"
    if dev_files:
        dev = dev_sample(dev_files, dev_format or fmt, dev_limit)
        return best_threshold(_score(engine, dev), [r.first_error for r in dev]), f"dev ({len(dev)} records): " + ", ".join(dev_files)
    if engine.sidecar.threshold is not None:  # raw scores are evaluated: no calibration maps it
        return decision_threshold(engine.sidecar.threshold, None), "checkpoint (chosen on its training dev split)"
    return decision_threshold(None, None), "default"


def evaluate_files(
    engine: StepScorer,
    files: Sequence[str],
    fmt: str = "jsonl",
    *,
    threshold: float | None = None,
    dev_files: Sequence[str] = (),
    limit: int | None = None,
    dev_format: str | None = None,
    dev_limit: int | None = DEV_LIMIT,
) -> dict:
    """Overall report at the top level, plus one per file under 'files'. `engine` is any
    `protocol.StepScorer` (in-process engine, vLLM, ...); its raw scores are evaluated. Every
    decision (step_accuracy, ProcessBench F1) is taken at the one chosen threshold. `limit`: a seeded sample of
    whole questions per file (records.sample_questions), not the first items (a file may be sorted by label)."""
    thr, source = choose_threshold(engine, threshold, dev_files, fmt, dev_format, dev_limit)
    all_scores, all_records, per_file = [], [], {}
    for path in files:
        records = sample_questions(load_records(path, fmt), limit)
        scores = _score(engine, records)
        per_file[str(path)] = report(scores, [r.labels for r in records], [r.first_error for r in records], thr)
        all_scores += scores
        all_records += records
    overall = report(all_scores, [r.labels for r in all_records], [r.first_error for r in all_records], thr)
    verifier = getattr(engine, "verifier_rule", None)
    return {**overall, "threshold_source": source, "model": engine.model_id, "format": fmt, "verifier": verifier, "files": per_file,
            "position_profile": position_profile(all_scores, [r.labels for r in all_records]),
            "final_step": final_step_profile(all_scores, [r.labels for r in all_records])}


def format_report(rep: dict) -> str:
    keys = ["n_items", "n_steps", "auroc", "step_accuracy", "ece", "mean_score", "threshold", "acc_erroneous", "acc_correct", "processbench_f1"]
    files = rep.get("files", {})
    rows = [("overall", rep)] + ([(Path(k).name, v) for k, v in files.items()] if len(files) > 1 else [])
    lines = ["split".ljust(16) + "".join(k.rjust(16) for k in keys)]
    for name, r in rows:
        lines.append(name[:16].ljust(16) + "".join(fmt(r[k]).rjust(16) for k in keys))
    v = rep.get("verifier")
    lines.append(f"verifier: {'cap ' + fmt(v['cap']) + ' on refuted steps' if v else 'off (the model alone)'}")
    lines.append(f"step_accuracy and processbench_f1 at threshold {fmt(rep.get('threshold'))} (source: {rep.get('threshold_source', '?')})")
    return "\n".join(lines)
