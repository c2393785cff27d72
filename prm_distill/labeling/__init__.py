"""Label policy rollouts with LLM judges (and an arithmetic verifier): prompts, backends, votes,
resumable jobs, hard negatives, answer anchoring. Stands beside `train` and `serve`, imports neither."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..records import Trajectory
from .cache import ResponseCache
from .config import LabelJobConfig
from .job import run_label_job
from .judges import make_judge
from .labeler import Labeler, rollout_of


def label_records(records: list[Trajectory], cfg: LabelJobConfig, cache_path: str | Path | None = None) -> list[Trajectory]:
    """Label in-memory records (their existing labels move to metadata.input_labels), in order,
    followed by their hard negatives. `cache_path` makes a repeated call replay answers for free."""
    async def run() -> list[Trajectory]:
        judges = [make_judge(j) for j in cfg.all_judges()]
        cache = ResponseCache(cache_path)
        try:
            return await Labeler(cfg, judges, cache).label([rollout_of(r) for r in records], asyncio.Event())
        finally:
            cache.close()
            for j in judges:
                await j.aclose()

    return asyncio.run(run())


__all__ = ["LabelJobConfig", "label_records", "run_label_job"]
