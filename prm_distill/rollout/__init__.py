"""Fresh rollouts of the current policy for a problems file: k samples per problem, split into
steps, final answers checked against the gold ones, resumable. Feeds `prm-distill label`."""

from __future__ import annotations

from .config import RolloutConfig
from .job import run_rollout
from .problems import Problem, load_problems

__all__ = ["Problem", "RolloutConfig", "load_problems", "run_rollout"]
