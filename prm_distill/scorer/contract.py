"""The contract classes every scorer of this package builds on.

When an AReaL with `areal.reward.prm` is installed, these are AReaL's own classes, so our scorers
are true subclasses of its `BaseScorer` and run unchanged inside AReaL's runner; otherwise they are
this package's implementation of the same contract. Import them from here, never from `base` or
`types` directly, or a scorer would subclass the wrong base when AReaL is present.
"""

try:
    from areal.reward.prm import (
        BaseScorer,
        BaseTrajectoryScorer,
        PRMMetricObservation,
        PRMScorerResult,
        PRMTurnResult,
    )

    USING_AREAL = True
except ImportError:
    from prm_distill.scorer.base import BaseScorer, BaseTrajectoryScorer
    from prm_distill.scorer.types import PRMMetricObservation, PRMScorerResult, PRMTurnResult

    USING_AREAL = False

__all__ = [
    "USING_AREAL",
    "BaseScorer",
    "BaseTrajectoryScorer",
    "PRMMetricObservation",
    "PRMScorerResult",
    "PRMTurnResult",
]
