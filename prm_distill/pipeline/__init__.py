"""One config, one command: `prm-distill pipeline --config configs/pipeline.yaml [--iteration K]`.

Rollout -> label -> train -> eval -> serve check -> RL scoring -> recalibrate, each stage in
`<root>/<name>/iter-K/<stage>/`, recorded with hashes in `iter-K/manifest.json` so an unchanged
stage is skipped and an interrupted run resumes; iteration K+1 distils on from iteration K's
checkpoint and is recalibrated against the same held-out set with iteration K's report as history.

- `config.py`    the settings (each stage's own job config as a section)
- `stages.py`    what each stage reads, is hashed by and does
- `manifest.py`  hashes, skip decisions, the manifest file
- `run.py`       the loop over the stages, exit codes
- `report.py`    report.md and the one-screen summary
"""

from __future__ import annotations

from .config import PipelineConfig, load_pipeline_config
from .run import PipelineResult, main, run_pipeline

__all__ = ["PipelineConfig", "load_pipeline_config", "PipelineResult", "main", "run_pipeline"]
