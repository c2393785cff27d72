"""The contract classes every scorer of this package builds on.

When an AReaL with `areal.reward.prm` is installed, these are AReaL's own classes, so our scorers
are true subclasses of its `BaseScorer` and run unchanged inside AReaL's runner; otherwise they are
this package's implementation of the same contract. Import them from here, never from `base` or
`types` directly, or a scorer would subclass the wrong base when AReaL is present.

An AReaL without the module (e.g. 1.0.4 from PyPI) falls back silently. An AReaL whose module
exists but does not import (a broken install, a missing CUDA library, an older layout without
one of the names) falls back with a warning: importing this package never crashes on AReaL.
"""

import warnings


def _import_areal() -> tuple | None:
    try:
        from areal.reward.prm import (  # type: ignore[import-not-found]
            BaseScorer,
            BaseTrajectoryScorer,
            PRMMetricObservation,
            PRMScorerResult,
            PRMTurnResult,
        )
    except ModuleNotFoundError as error:
        if error.name in ("areal", "areal.reward", "areal.reward.prm"):
            return None  # no AReaL PRM at all: ours, silently
        _warn_fallback(error)
        return None
    except Exception as error:  # noqa: BLE001 - any failure inside AReaL must not break this package
        _warn_fallback(error)
        return None
    return BaseScorer, BaseTrajectoryScorer, PRMMetricObservation, PRMScorerResult, PRMTurnResult


def _warn_fallback(error: BaseException) -> None:
    warnings.warn(
        f"areal.reward.prm is installed but failed to import ({type(error).__name__}: {error}); "
        "prm_distill.scorer uses its own contract classes, so its scorers are not AReaL BaseScorer subclasses",
        RuntimeWarning,
        stacklevel=3,
    )


_areal = _import_areal()
if _areal is not None:
    BaseScorer, BaseTrajectoryScorer, PRMMetricObservation, PRMScorerResult, PRMTurnResult = _areal
    USING_AREAL = True
else:
    from prm_distill.scorer.base import BaseScorer, BaseTrajectoryScorer  # type: ignore[assignment]
    from prm_distill.scorer.types import (  # type: ignore[assignment]
        PRMMetricObservation,
        PRMScorerResult,
        PRMTurnResult,
    )

    USING_AREAL = False

__all__ = [
    "USING_AREAL",
    "BaseScorer",
    "BaseTrajectoryScorer",
    "PRMMetricObservation",
    "PRMScorerResult",
    "PRMTurnResult",
]
