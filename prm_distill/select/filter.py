"""SFT data filtering: keep the solutions whose steps the PRM calls good.

`by="step"` keeps a solution when every step's calibrated score clears `min_step` (the weakest step
decides); `by=<aggregation>` compares that aggregate with it instead. Kept records are written as
they came, plus `step_scores` and `prm_score` (the deciding score); dropped ones go to a side file
with the same fields and a `reason`. Where records carry gold answers (or `outcome`) or step labels,
the summary gives the precision of what was kept next to the base rate of the whole input, the
number that says whether filtering helped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..aggregate import AGGREGATIONS, aggregate
from ..atomic import write_json
from ..jobfiles import AppendLog, check_job
from ..protocol import StepScorer
from ..steps import SplitConfig
from .backend import calibrated
from .inputs import Sample, parse_record, read_samples
from .plots import score_histogram

BY = ("step", *AGGREGATIONS)


@dataclass
class FilterConfig:
    """What `prm-distill filter` keeps."""

    min_step: float = field(default=0.5, metadata={"help": "Threshold on calibrated P(good): every step (by=step) or the aggregate must reach it."})
    by: str = field(default="step", metadata={"help": f"step (every step must clear the threshold) or an aggregation ({'|'.join(AGGREGATIONS)})."})
    gamma: float = field(default=0.9, metadata={"help": "Discount of the `discounted` aggregation."})
    batch_size: int = field(default=16, metadata={"help": "Records scored (and written) together; a rerun redoes at most one unfinished batch."})

    def __post_init__(self) -> None:
        if self.by not in BY:
            raise ValueError(f"--by must be one of {'|'.join(BY)}, got {self.by!r}")
        if not 0 <= self.min_step <= 1:
            raise ValueError(f"--min-step must lie in [0, 1], got {self.min_step}")
        if self.batch_size < 1:
            raise ValueError("--batch-size must be >= 1")


def decide(step_scores: list[float], cfg: FilterConfig) -> tuple[float, str | None]:
    """(deciding score, None when kept else the reason it was dropped)."""
    if cfg.by == "step":
        worst = min(range(len(step_scores)), key=lambda i: step_scores[i])
        score = step_scores[worst]
        reason = f"step {worst + 1} of {len(step_scores)} scored {score:.4f} < {cfg.min_step:g}"
    else:
        score = aggregate(step_scores, cfg.by, gamma=cfg.gamma)
        reason = f"{cfg.by} aggregate {score:.4f} < {cfg.min_step:g}"
    return score, (reason if score < cfg.min_step else None)


def _precision(rows: list[tuple[bool, bool | None]]) -> dict[str, Any] | None:
    """{kept precision, base rate, counts} over rows (kept, truth) whose truth is known; None if none is."""
    known = [(k, t) for k, t in rows if t is not None]
    if not known:
        return None
    kept = [t for k, t in known if k]
    return {"records": len(known), "kept": len(kept), "base_rate": sum(t for _, t in known) / len(known),
            "kept_precision": sum(kept) / len(kept) if kept else None}


def run_filter(scorer: StepScorer, input_path: str | Path, output: str | Path, cfg: FilterConfig,
               dropped: str | Path | None = None, splitter: SplitConfig | None = None, progress: bool = True) -> dict[str, Any]:
    """Keep or drop every record not yet in `output` or the dropped file; a summary and a histogram beside them."""
    output = Path(output)
    dropped = Path(dropped) if dropped else output.with_name(output.stem + ".dropped.jsonl")
    samples, invalid = read_samples(input_path, splitter)
    check_job(output.with_name(output.stem + ".job.json"), {"command": "filter", "model": scorer.model_id,
                                                              **{k: v for k, v in asdict(cfg).items() if k != "batch_size"}})
    with AppendLog(output) as kept_log, AppendLog(dropped) as dropped_log:
        done = {r["id"] for r in kept_log.rows + dropped_log.rows}
        todo = [s for s in samples if s.id not in done]
        bar = tqdm(total=len(todo), desc="filter", unit="record", disable=not progress)
        for i in range(0, len(todo), cfg.batch_size):
            batch = todo[i:i + cfg.batch_size]
            scores = calibrated(scorer, [(s.question, s.steps) for s in batch])
            keep: list[dict[str, Any]] = []
            drop: list[dict[str, Any]] = []
            for s, sc in zip(batch, scores, strict=True):
                score, reason = decide(sc, cfg)
                row = {**s.record, "id": s.id, "step_scores": sc, "prm_score": score}
                (keep if reason is None else drop).append(row if reason is None else {**row, "reason": reason})
            kept_log.append(keep)
            dropped_log.append(drop)
            bar.update(len(batch))
        bar.close()
        wanted = {s.id for s in samples}
        kept_rows = [r for r in kept_log.rows if r["id"] in wanted]
        dropped_rows = [r for r in dropped_log.rows if r["id"] in wanted]
    judged = [(True, r) for r in kept_rows] + [(False, r) for r in dropped_rows]
    truth = [(k, _sample(r)) for k, r in judged]
    total = len(judged)
    summary = {
        "config": asdict(cfg), "input": str(input_path), "output": str(output), "dropped_file": str(dropped),
        "invalid_records": invalid, "records": total, "kept": len(kept_rows), "dropped": len(dropped_rows),
        "kept_fraction": len(kept_rows) / total if total else None,
        "precision": {"answers": _precision([(k, s.correct()) for k, s in truth]),
                      "labels": _precision([(k, s.labels_good()) for k, s in truth])},
        "this_run": {"records_scored": len(todo), "records_already_done": len(samples) - len(todo)},
    }
    if total:
        label = "min step score" if cfg.by == "step" else f"{cfg.by} aggregate"
        summary["histogram"] = str(score_histogram(output.with_name(output.stem + ".scores.png"),
                                                   [r["prm_score"] for r in kept_rows], [r["prm_score"] for r in dropped_rows], cfg.min_step, label))
    write_json(output.with_name(output.stem + ".summary.json"), summary)
    return summary


def _sample(row: dict[str, Any]) -> Sample:
    """The input record inside an output row, read back for its answer and labels."""
    record = {k: v for k, v in row.items() if k not in ("step_scores", "prm_score", "reason")}
    return parse_record(record, 0)
