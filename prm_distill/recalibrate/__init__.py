"""Periodic recalibration: held-out metrics against the last report, drift flags, a checked
calibration, reward-hacking audits, and a schedule a training loop calls every K steps.

`prm-distill recalibrate` runs one round (`run_recalibration`); `RecalibrationSchedule` runs rounds
in the background during training. Heavy imports (torch, matplotlib) happen only inside a round.
"""

from __future__ import annotations

from .config import AuditSettings, CalibrationSettings, DriftSettings, FreshSettings, RecalibrateConfig
from .drift import FLAGS
from .run import HeldoutOverlapError, run_recalibration
from .schedule import RecalibrationSchedule, ScheduledRun

__all__ = [
    "FLAGS",
    "AuditSettings",
    "CalibrationSettings",
    "DriftSettings",
    "FreshSettings",
    "HeldoutOverlapError",
    "RecalibrateConfig",
    "RecalibrationSchedule",
    "ScheduledRun",
    "run_recalibration",
]
