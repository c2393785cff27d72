"""The one seam for "something that scores (question, steps)".

Everything that needs step scores (evaluation, recalibration and its audits, the RL scorer, the
demo) depends on this protocol, never on a concrete backend, so any of them runs against the
in-process engine, the batcher, the HTTP client or vLLM:

| implementation                       | form  | where                          |
|--------------------------------------|-------|--------------------------------|
| `PRMEngine`                          | sync  | `serve/engine.py`              |
| `VLLMOfflineEngine`                  | sync  | `serve/vllm_backend.py`        |
| `ScoreBatcher` (over a sync scorer)  | async | `serve/batcher.py`             |
| `PRMClient` (`prm-distill serve`)    | async | `serve/client.py`              |
| `VLLMPoolingClient` (`vllm serve`)   | async | `serve/vllm_backend.py`        |

Both forms have the same members: `score(items)` gives raw P(good) per step (`score_batch(items)`
in the async form, whose `score(question, steps)` is one trajectory), `sidecar` the checkpoint's
sidecar (step tag, threshold, training summary), and `calibration()` the calibration in force
now: a calibration adopted while a backend runs (`recalibrate --adopt`) reaches every backend.
Scores stay raw; callers map them with `calibration.apply` (or `Calibrated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from . import calibration as calib
from .checkpoint import Sidecar

Item = tuple[str, Sequence[str]]
"""One trajectory to score: (question, steps)."""


@runtime_checkable
class StepScorer(Protocol):
    """Synchronous: `score(items)` -> per-step raw P(good) of each item, in order."""

    @property
    def sidecar(self) -> Sidecar: ...

    @property
    def model_id(self) -> str: ...

    def calibration(self) -> dict[str, Any] | None: ...

    def score(self, items: Sequence[Item]) -> list[list[float]]: ...


@runtime_checkable
class AsyncStepScorer(Protocol):
    """Asynchronous: `await score_batch(items)`, or `await score(question, steps)` for one item.

    `sidecar` is None only for a client that has not fetched it yet (`PRMClient()` before `connect`).
    """

    @property
    def sidecar(self) -> Sidecar | None: ...

    def calibration(self) -> dict[str, Any] | None: ...

    async def score_batch(self, items: Sequence[Item]) -> list[list[float]]: ...

    async def score(self, question: str, steps: Sequence[str]) -> list[float]: ...


def current_calibration(scorer: Any) -> dict[str, Any] | None:
    """`scorer.calibration()` where it has one, else its sidecar's (a test double, an older backend)."""
    read = getattr(scorer, "calibration", None)
    if callable(read):
        return read()
    sidecar = getattr(scorer, "sidecar", None)
    return sidecar.calibration if sidecar is not None else None


class Calibrated:
    """A `StepScorer` whose scores are `scorer`'s passed through one fixed calibration (the scores a
    user is served), e.g. for audits that must see what the RL trainer sees. Its scores are final:
    `calibration()` is None, so nothing maps them twice."""

    def __init__(self, scorer: StepScorer, calibration: dict[str, Any] | None) -> None:
        calib.validate(calibration)
        self.scorer, self._calibration = scorer, calibration

    @property
    def sidecar(self) -> Sidecar:
        return self.scorer.sidecar

    @property
    def model_id(self) -> str:
        return self.scorer.model_id

    def calibration(self) -> dict[str, Any] | None:
        return None

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        return calib.apply_each(self.scorer.score(items), self._calibration)


__all__ = ["AsyncStepScorer", "Calibrated", "Item", "StepScorer", "current_calibration"]
