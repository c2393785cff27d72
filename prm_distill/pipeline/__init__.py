"""The main job: `prm-distill pipeline [--config YAML] [--iteration K]` (alias `prm-distill demo`, `make demo`).

Rollout -> label -> train -> eval -> serve check -> RL scoring -> recalibrate, each stage in
`<root>/<name>/iter-K/<stage>/`, recorded with hashes in `iter-K/manifest.json` so an unchanged
stage is skipped and an interrupted run resumes; iteration K+1 distils on from iteration K's
checkpoint and is recalibrated against the same held-out set with iteration K's report as history.

- `defaults.yaml` the embedded defaults of the main job (package data; configs/pipeline.yaml links to it)
- `config.py`    the settings (each stage's own job config as a section)
- `stages.py`    what each stage reads, is hashed by and does
- `manifest.py`  hashes, skip decisions, the manifest file
- `run.py`       the loop over the stages, exit codes
- `report.py`    report.md and the one-screen summary
- `scores.py`    the memoised engine the scoring stages share
- `serving.py`   the serve check (the engine behind the HTTP server, scored by the client)
- `rl.py`        the RL stage (`trainer_prm.yaml`, package data: PRMRunner, shaped advantages per mode)
"""

from __future__ import annotations

from .config import PipelineConfig, load_pipeline_config
from .run import PipelineResult, main, run_pipeline

__all__ = ["PipelineConfig", "load_pipeline_config", "PipelineResult", "main", "run_pipeline"]
