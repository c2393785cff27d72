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
import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..records import RecordError, Trajectory, steps_of, write_jsonl
from .cache import ResponseCache
from .config import LabelJobConfig
from .judges import Completion, make_judge
from .labeler import Labeler, rollout_of
from .montecarlo import check_gold
from .prompts import prompt_version
from .summary import summarize

log = logging.getLogger("prm_distill.labeling")
LABELS = "labels.jsonl"


def read_rollouts(path: str, cfg: LabelJobConfig) -> tuple[list[Trajectory], list[dict[str, Any]]]:
    """(valid rollouts, skipped lines as {line, error}). A bad line is reported and skipped, not fatal."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"rollouts file not found: {path!r} (set input=...)")
    good: list[Trajectory] = []
    skipped: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                good.append(_rollout(line, cfg, seen, lineno))
            except RecordError as e:
                log.warning("%s:%d: skipped: %s", path, lineno, e)
                skipped.append({"line": lineno, "error": str(e)})
            if cfg.limit is not None and len(good) >= cfg.limit:
                break
    return good, skipped


def _rollout(line: str, cfg: LabelJobConfig, seen: dict[str, int], lineno: int) -> Trajectory:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordError(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise RecordError("expected a JSON object")
    if obj.get("id") in (None, ""):
        raise RecordError("missing (an id is needed to resume)", field="id")
    steps = steps_of(obj, cfg.split)
    meta = dict(obj.get("metadata") or {}) if isinstance(obj.get("metadata", {}), dict) else None
    if meta is None:
        raise RecordError("must be an object", field="metadata")
    if obj.get("answer") is not None:
        meta["answer"] = obj["answer"]
    r = rollout_of(Trajectory(id=obj["id"], question=obj.get("question"), steps=steps,  # type: ignore[arg-type]  # Trajectory checks it
                              labels=obj.get("labels"), outcome=obj.get("outcome"), metadata=meta))
    if r.id in seen:
        raise RecordError(f"duplicate id {r.id!r} (first on line {seen[r.id]})", field="id")
    seen[r.id] = lineno
    return r


def _done(out: Path) -> dict[str, list[Trajectory]]:
    """Records already written, grouped by source rollout id (a record and its hard negatives)."""
    done: dict[str, list[Trajectory]] = {}
    seen: set[str] = set()
    for path in [out / LABELS, *sorted(out.glob("labels-*.jsonl"))]:
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    r = Trajectory.from_dict(json.loads(line))
                    if r.id not in seen:  # a crash between merge and shard removal leaves copies
                        seen.add(r.id)
                        done.setdefault(r.metadata.get("hard_negative", {}).get("source_id", r.id), []).append(r)
    return done


def _check_job(out: Path, cfg: LabelJobConfig) -> None:
    """Refuse to mix labels of different modes, prompt versions or judges in one output folder."""
    ident = {"mode": cfg.mode, "prompt_version": prompt_version(cfg.mode), "judges": [j.name for j in cfg.all_judges()],
             "votes": cfg.votes, "verifier": cfg.verifier.active}
    mc = {j.name: {"n": j.n, "estimate": j.estimate, "temperature": j.temperature, "max_tokens": j.max_tokens} for j in cfg.all_judges() if j.montecarlo}
    if mc:  # keys only when used: folders labelled before these options existed still resume
        ident["montecarlo"] = mc
    if cfg.consensus.enabled:
        ident["consensus"] = {"rule": cfg.consensus.rule, "threshold": cfg.consensus.threshold, "value": cfg.consensus.value}
    path = out / "job.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old != ident:
            raise ValueError(f"{out} holds labels made with {old}, not {ident}: use a new output folder")
    else:
        write_json(path, ident)


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
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            pass
    try:
        for n, start in enumerate(range(0, len(todo), cfg.shard_size)):
            labelled = await labeler.label(todo[start : start + cfg.shard_size], stop)
            write_jsonl(labelled, out / f"labels-{first_shard + n:05d}.jsonl")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
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
    out.mkdir(parents=True, exist_ok=True)
    _check_job(out, cfg)
    done = _done(out)
    todo = [r for r in rollouts if r.id not in done]
    log.info("%d rollouts (%d skipped lines), %d already labelled, %d to label", len(rollouts), len(skipped), len(rollouts) - len(todo), len(todo))
    cache = ResponseCache(out / "cache" / "responses.jsonl")
    try:
        total = sum((len(r.steps) - 1) * j.n if j.montecarlo else len(r.steps) * cfg.votes for r in todo for j in cfg.all_judges())
        progress = _Progress(total, cfg.progress and bool(todo) and bool(cfg.all_judges()))
        labeler = Labeler(cfg, [make_judge(j) for j in cfg.all_judges()] if todo else [], cache, progress)
        first_shard = 1 + max((int(p.stem.split("-")[1]) for p in out.glob("labels-*.jsonl")), default=-1)
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
    write_jsonl(records, out / LABELS)
    for shard in out.glob("labels-*.jsonl"):
        shard.unlink()
    summary = summarize(records, labeler.stats, skipped, time.perf_counter() - t0)
    write_json(out / "summary.json", summary)
    return summary
