"""`prm-distill eval`: score labelled files with a checkpoint and report the field's metrics.

The decision threshold (for ProcessBench F1 and step_accuracy alike) is never tuned on the evaluated items (that flatters
even a random head): it is given, chosen on a separate dev file, or the one the checkpoint chose
on its training dev split, else 0.5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .calibration import decision_threshold
from .metrics import best_threshold, final_step_profile, fmt, paired_auroc_difference, position_profile, report, step_auroc
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
    against: StepScorer | None = None,
    n_boot: int = 1000,
) -> dict:
    """Overall report at the top level, plus one per file under 'files'. `engine` is any
    `protocol.StepScorer` (in-process engine, vLLM, ...); its raw scores are evaluated. Every
    decision (step_accuracy, ProcessBench F1) is taken at the one chosen threshold. `limit`: a seeded sample of
    whole questions per file (records.sample_questions), not the first items (a file may be sorted by label).
    `against`: a second scorer on the same items; 'against' then holds, overall and per file, its step AUROC and
    the difference engine minus it (`against_difference`)."""
    thr, source = choose_threshold(engine, threshold, dev_files, fmt, dev_format, dev_limit)
    all_scores, all_other, all_records, per_file, per_file_vs = [], [], [], {}, {}
    for path in files:
        records = sample_questions(load_records(path, fmt), limit)
        scores = _score(engine, records)
        per_file[str(path)] = report(scores, [r.labels for r in records], [r.first_error for r in records], thr)
        if against is not None:
            other = _score(against, records)
            per_file_vs[str(path)] = against_difference(scores, other, records, n_boot)
            all_other += other
        all_scores += scores
        all_records += records
    overall = report(all_scores, [r.labels for r in all_records], [r.first_error for r in all_records], thr)
    verifier = getattr(engine, "verifier_rule", None)
    rep = {**overall, "threshold_source": source, "model": engine.model_id, "format": fmt, "verifier": verifier, "files": per_file,
           "position_profile": position_profile(all_scores, [r.labels for r in all_records]),
           "final_step": final_step_profile(all_scores, [r.labels for r in all_records])}
    if against is not None:
        rep["against"] = {"model": against.model_id, "verifier": getattr(against, "verifier_rule", None),
                          **against_difference(all_scores, all_other, all_records, n_boot), "files": per_file_vs}
    return rep


def against_difference(scores: list[list[float]], other: list[list[float]], records: Sequence[Trajectory], n_boot: int = 1000) -> dict:
    """The other scorer's step AUROC and the difference (ours minus it) with a 95% paired bootstrap interval
    that resamples whole problems (records grouped by question text): a dev split holds several solutions per
    problem, and resampling records alone gives an interval narrower than the problems support. Threshold-free,
    so two checkpoints are compared without either one's threshold choice in the way."""
    labels = [r.labels for r in records]
    d = paired_auroc_difference(scores, other, labels, groups=[r.question for r in records], n_boot=n_boot)
    return {"auroc": step_auroc(other, labels), **d}


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
    vs = rep.get("against")
    if vs:
        lines.append(f"against {vs['model']}: step AUROC, this model minus that one, {vs['level']:.0%} paired bootstrap over problems")
        for name, d in [("overall", vs)] + ([(Path(k).name, v) for k, v in vs["files"].items()] if len(files) > 1 else []):
            lines.append(f"  {name[:16].ljust(16)} its auroc {fmt(d['auroc'])}  difference {_signed(d['difference'])} "
                         f"[{_signed(d['low'])}, {_signed(d['high'])}] over {d['n_groups']} problems")
    return "\n".join(lines)


def _signed(x: float) -> str:
    return "n/a" if x != x else f"{x:+.3f}"
