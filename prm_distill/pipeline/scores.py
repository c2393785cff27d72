"""The one engine an iteration's scoring stages share: a memo in front of the loaded checkpoint, so
the recalibration round reuses the evaluation's held-out scores instead of scoring them again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..checkpoint import Sidecar
from ..protocol import Item, StepScorer


class CachedScores:
    """A `StepScorer` memoising another's scores, so the recalibration round reuses the evaluation's
    test-split scores instead of scoring them again (a trajectory's scores do not depend on its batch)."""

    def __init__(self, engine: StepScorer) -> None:
        self.engine = engine
        self._memo: dict[tuple[str, tuple[str, ...]], list[float]] = {}

    @property
    def sidecar(self) -> Sidecar:
        return self.engine.sidecar

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def calibration(self) -> dict[str, Any] | None:
        return self.engine.calibration()

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        keys = [(q, tuple(steps)) for q, steps in items]
        todo = [k for k in dict.fromkeys(keys) if k not in self._memo]
        if todo:
            self._memo.update(zip(todo, self.engine.score([(q, list(steps)) for q, steps in todo])))
        return [list(self._memo[k]) for k in keys]
