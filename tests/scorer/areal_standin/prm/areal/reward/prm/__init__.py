"""STAND-IN for AReaL's `areal.reward.prm` package (see ../../../../README.md)."""

from areal.api.cli_args import PRMConfig, PRMScorerConfig
from areal.reward.prm.runner import (
    BaseScorer,
    BaseTrajectoryScorer,
    PRMMetricObservation,
    PRMRunner,
    PRMScorerResult,
    PRMTurnResult,
    record_prm_results,
)

__all__ = [
    "BaseScorer",
    "BaseTrajectoryScorer",
    "PRMConfig",
    "PRMMetricObservation",
    "PRMRunner",
    "PRMScorerConfig",
    "PRMScorerResult",
    "PRMTurnResult",
    "record_prm_results",
]
