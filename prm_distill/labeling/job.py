"""`prm-distill label`: a resumable labeling job over a rollouts file.

Never loses or duplicates work. Finished records go to append-only shards `labels-NNNNN.jsonl`,
each written atomically once all its records are labelled; every judge answer is in the response
cache the moment it arrives. A rerun skips the ids already in shards (or in labels.jsonl) and
replays cached answers, so it asks the judge only for what was never answered. When every record
is done the shards are merged into `labels.jsonl` (one record per rollout id) and the summary is
written to `summary.json`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from .. import stop as stopping
from ..atomic import write_json
from ..jobfiles import Shards, check_job
from ..records import RecordError, Trajectory, read_inputs, steps_of, write_jsonl
from .cache import ResponseCache
from .config import LabelJobConfig
from .judges import Completion, make_judge
from .judges.reference import check_reference
from .labeler import Labeler, rollout_of
from .montecarlo import check_gold, requests_per_record
from .prompts import prompt_version
from .summary import summarize

log = logging.getLogger("prm_distill.labeling")
LABELS = "labels.jsonl"
SHARD_STEM = "labels"  # shards labels-NNNNN.jsonl, merged into labels.jsonl (`jobfiles.Shards`)


def read_rollouts(path: str, cfg: LabelJobConfig) -> tuple[list[Trajectory], list[dict[str, Any]]]:
    """(valid rollouts, skipped lines as {line, error}). A bad line is reported and skipped, not fatal
    (`records.read_inputs`' policy); a rollout needs an id, the key a rerun resumes by."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"rollouts file not found: {path!r} (set input=...)")
    skipped: list[dict[str, Any]] = []
    good = read_inputs(path, lambda obj, line: _rollout(obj, cfg), key=lambda r: r.id, skipped=skipped, limit=cfg.limit)
    return good, skipped


def _rollout(obj: dict[str, Any], cfg: LabelJobConfig) -> Trajectory:
    if obj.get("id") in (None, ""):
        raise RecordError("missing (an id is needed to resume)", field="id")
    steps = steps_of(obj, cfg.splitter)
    meta = dict(obj.get("metadata") or {}) if isinstance(obj.get("metadata", {}), dict) else None
    if meta is None:
        raise RecordError("must be an object", field="metadata")
    if obj.get("answer") is not None:
        meta["answer"] = obj["answer"]
    if obj.get("reference") is not None:  # the gold worked solution (judge.backend=reference)
        meta["reference"] = obj["reference"]
    return rollout_of(Trajectory(id=obj["id"], question=obj.get("question"), steps=steps,  # type: ignore[arg-type]  # Trajectory checks it
                                 labels=obj.get("labels"), outcome=obj.get("outcome"), metadata=meta))


def _done(out: Path) -> dict[str, list[Trajectory]]:
    """Records already written, grouped by source rollout id (a record and its hard negatives)."""
    done: dict[str, list[Trajectory]] = {}
    for row in Shards(out, SHARD_STEM).rows(key=lambda d: d["id"]):
        r = Trajectory.from_dict(row)
        done.setdefault(r.metadata.get("hard_negative", {}).get("source_id", r.id), []).append(r)
    return done


def _check_job(out: Path, cfg: LabelJobConfig) -> None:
    """Refuse to mix labels of different modes, prompt versions or judges in one output folder."""
    ident = {"mode": cfg.mode, "prompt_version": prompt_version(cfg.mode), "judges": [j.name for j in cfg.all_judges()],
             "votes": cfg.votes, "verifier": cfg.verifier.active}
    mc = {j.name: {"n": j.n, "estimate": j.estimate, "temperature": j.temperature, "max_tokens": j.max_tokens,
                   **({"search": j.mc_search} if j.mc_search != "all" else {})} for j in cfg.all_judges() if j.montecarlo}
    if mc:  # keys only when used: folders labelled before these options existed still resume
        ident["montecarlo"] = mc
    if cfg.consensus.enabled:
        ident["consensus"] = {"rule": cfg.consensus.rule, "threshold": cfg.consensus.threshold, "value": cfg.consensus.value}
    check_job(out / "job.json", ident)


class _Progress:
    def __init__(self, total: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="step-vote", disable=not enabled, dynamic_ncols=True, smoothing=0.1)
        self.tin = self.tout = 0

    def __call__(self, steps: int, c: Completion) -> None:
        self.tin += c.tokens_in
        self.tout += c.tokens_out
        self.bar.set_postfix_str(f"tok in {self.tin} out {self.tout}", refresh=False)
        self.bar.update(steps)


async def _label_all(cfg: LabelJobConfig, todo: list[Trajectory], out: Path, first_shard: int, labeler: Labeler) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:  # SIGTERM/SIGINT (`prm_distill.stop`): the judges send nothing new, answers in flight are cached, then Interrupted
        with stopping.cooperative(lambda: loop.call_soon_threadsafe(stop.set)):
            for n, start in enumerate(range(0, len(todo), cfg.shard_size)):
                labelled = await labeler.label(todo[start : start + cfg.shard_size], stop)
                write_jsonl(labelled, out / f"labels-{first_shard + n:05d}.jsonl")
                stopping.check("between shards")
    finally:
        for j in labeler.judges:
            await j.aclose()


def run_label_job(cfg: LabelJobConfig) -> dict[str, Any]:
    """Label cfg.input into cfg.output; returns the summary. Raises JudgeUnavailable / Interrupted
    (completed shards and cached answers stay) so a rerun resumes."""
    t0 = time.perf_counter()
    out = Path(cfg.output)
    rollouts, skipped = read_rollouts(cfg.input, cfg)
    if any(j.montecarlo for j in cfg.all_judges()):
        check_gold(rollouts)  # before any work: a job must not stop halfway on a record without an answer
    if any(j.reference for j in cfg.all_judges()):
        check_reference(rollouts)
    out.mkdir(parents=True, exist_ok=True)
    _check_job(out, cfg)
    done = _done(out)
    todo = [r for r in rollouts if r.id not in done]
    log.info("%d rollouts (%d skipped lines), %d already labelled, %d to label", len(rollouts), len(skipped), len(rollouts) - len(todo), len(todo))
    cache = ResponseCache(out / "cache" / "responses.jsonl")
    try:
        total = sum(requests_per_record(len(r.steps), j, cfg.votes) for r in todo for j in cfg.all_judges())
        progress = _Progress(total, cfg.progress and total > 0)  # a rule (reference) sends nothing: no bar of 0 step-votes
        labeler = Labeler(cfg, [make_judge(j) for j in cfg.all_judges()] if todo else [], cache, progress)
        first_shard = Shards(out, SHARD_STEM).next_index()
        try:
            if todo:
                asyncio.run(_label_all(cfg, todo, out, first_shard, labeler))
        finally:
            progress.bar.close()
    finally:
        cache.close()
    done = _done(out)
    order = {r.id: i for i, r in enumerate(rollouts)}
    records = [r for rid in sorted(done, key=lambda i: order.get(i, len(order))) for r in done[rid]]
    Shards(out, SHARD_STEM).merge(r.to_dict() for r in records)
    summary = summarize(records, labeler.stats, skipped, time.perf_counter() - t0)
    write_json(out / "summary.json", summary)
    return summary
