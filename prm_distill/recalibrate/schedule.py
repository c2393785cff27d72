"""Recalibration every K training steps, in the background, never in the training step's way.

A training loop calls `maybe_run(step)` every step. It returns at once: when the step is due (a
multiple of `every_steps`) and no round is in flight it starts one on a background thread; a due
step while a round is still running is skipped and counted (rounds never pile up). A round that
fails is logged and kept in `results` / `last_error`, never raised into the training step.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RecalibrateConfig

log = logging.getLogger("prm_distill.recalibrate.schedule")


@dataclass
class ScheduledRun:
    """One round: when it ran, and its result (a report dict) or its error."""

    step: int
    started_at: float
    finished_at: float | None = None
    ok: bool | None = None  # None while running
    result: Any = None
    error: str | None = None


class RecalibrationSchedule:
    """`maybe_run(step)` every step; `close()` at the end (waits for a round in flight)."""

    def __init__(self, every_steps: int, run: Callable[[int], Any], *, name: str = "recalibration") -> None:
        if isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1:
            raise ValueError(f"every_steps must be an integer >= 1, got {every_steps!r}")
        if not callable(run):
            raise TypeError("run must be a callable taking the training step (see RecalibrationSchedule.for_checkpoint)")
        self.every_steps = every_steps
        self.name = name
        self._run = run
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_step: int | None = None
        self._closed = False
        self.results: list[ScheduledRun] = []
        self.skipped_steps: list[int] = []
        self.last_error: str | None = None

    @property
    def skipped(self) -> int:
        """Due steps skipped because a round was still running."""
        return len(self.skipped_steps)

    @property
    def failures(self) -> int:
        """Rounds that raised."""
        return sum(run.ok is False for run in self.results)

    @classmethod
    def for_checkpoint(
        cls,
        every_steps: int,
        *,
        model: str | os.PathLike,
        heldout: str | os.PathLike,
        history: str | os.PathLike,
        fmt: str = "jsonl",
        fresh: str | os.PathLike | Callable[[int], str | os.PathLike | None] | None = None,
        label_config: str | os.PathLike | None = None,
        adopt: bool = False,
        config: RecalibrateConfig | None = None,
        device: str = "cpu",
    ) -> "RecalibrationSchedule":
        """A schedule whose round at step N writes `history/step-0000000N/` and compares with the
        newest earlier round in `history`. `fresh` may be a callable step -> rollouts file (or None)."""
        from .run import run_recalibration

        def run(step: int) -> dict[str, Any]:
            rollouts = fresh(step) if callable(fresh) else fresh
            return run_recalibration(model, heldout, Path(history) / f"step-{step:08d}", fmt=fmt, fresh=rollouts,
                                     label_config=label_config if rollouts is not None else None, history=history,
                                     adopt=adopt, config=config, device=device)

        return cls(every_steps, run)

    def is_due(self, step: int) -> bool:
        return step > 0 and step % self.every_steps == 0 and step != self._last_step

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def maybe_run(self, step: int) -> bool:
        """Start a round for `step` when due and none is in flight; True when one was started."""
        if not self.is_due(step):
            return False
        with self._lock:
            if self._closed:
                return False
            self._last_step = step
            if self.running:
                self.skipped_steps.append(step)
                log.info("%s due at step %d skipped: the round started at step %d is still running", self.name, step, self.results[-1].step)
                return False
            record = ScheduledRun(step=step, started_at=time.time())
            self.results.append(record)
            self._thread = threading.Thread(target=self._work, args=(record,), name=f"{self.name}-step-{step}", daemon=True)
            self._thread.start()
        return True

    def _work(self, record: ScheduledRun) -> None:
        try:
            record.result = self._run(record.step)
            record.ok = True
        except Exception as e:  # reported, never raised into the training loop
            record.ok = False
            record.error = f"{type(e).__name__}: {e}"
            self.last_error = record.error
            log.exception("%s at step %d failed", self.name, record.step)
        finally:
            record.finished_at = time.time()

    @property
    def last_result(self) -> ScheduledRun | None:
        done = [r for r in self.results if r.ok is not None]
        return done[-1] if done else None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the round in flight; True when none is running afterwards."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.running

    def close(self, timeout: float | None = None) -> bool:
        """No new rounds; wait for the one in flight. True when it finished."""
        with self._lock:
            self._closed = True
        return self.wait(timeout)

    def __enter__(self) -> "RecalibrationSchedule":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
