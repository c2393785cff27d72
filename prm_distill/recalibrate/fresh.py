"""Fresh policy rollouts labelled by the judge: what the PRM is scoring now, seen by the judge.

A fixed held-out set cannot show that the policy has learnt the PRM's taste; the judge's labels on
a sample of today's rollouts can. The sample goes through the labeling pipeline exactly as
`prm-distill label` would (same config file, same response cache format), so the recalibration
round measures the student against the judge it was distilled from.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ..config import load_config
from ..records import Trajectory
from .config import FreshSettings


def label_fresh(path: str | Path, label_config: str | Path, settings: FreshSettings, cache_path: str | Path | None) -> tuple[list[Trajectory], dict[str, Any]]:
    """(labelled sample, info). The sample is seeded and independent of file order (sorted ids)."""
    from ..labeling import LabelJobConfig, label_records
    from ..labeling.job import read_rollouts

    cfg = load_config(LabelJobConfig, label_config)
    cfg.progress = False
    rollouts, skipped = read_rollouts(str(path), cfg)
    if not rollouts:
        raise ValueError(f"fresh rollouts {path}: no valid rollout in the file ({len(skipped)} bad lines skipped)")
    order = sorted(rollouts, key=lambda r: r.id)
    random.Random(settings.seed).shuffle(order)
    sample = sorted(order[: settings.sample_size], key=lambda r: r.id)
    wanted = {r.id for r in sample}
    labelled = [r for r in label_records(sample, cfg, cache_path=cache_path) if r.id in wanted]
    judges = [j.name for j in cfg.all_judges()] + (["arithmetic-verifier"] if cfg.verifier.active else [])
    info = {"path": str(path), "label_config": str(label_config), "n_rollouts": len(rollouts), "n_skipped_lines": len(skipped),
            "n_sampled": len(sample), "n_labelled": len(labelled), "judges": judges, "mode": cfg.mode}
    return labelled, info
