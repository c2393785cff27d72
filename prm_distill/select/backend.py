"""Step scores for the select commands, in-process (`--model`) or from a server (`--url`).

Either way the commands get a synchronous `protocol.StepScorer` and map its raw scores with the
calibration in force (`calibrated`), so rerank, pairs and filter rank the numbers eval, serve and
the RL scorer see (the checkpoint's verifier rule is applied inside the engine). The server path
wraps the async `PRMClient` in a private event loop, and turns a failed or unreachable server into
`ScoringUnavailable` (the CLI exits 4; outputs are append-only, so a rerun resumes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from .. import calibration as calib
from ..checkpoint import Sidecar
from ..exits import Unavailable
from ..protocol import Item, StepScorer, current_calibration

T = TypeVar("T")


class ScoringUnavailable(Unavailable):
    """The scoring server failed or could not be reached."""


class SyncClient:
    """A `prm-distill serve` server as a synchronous `StepScorer` (requests of at most `chunk` items)."""

    def __init__(self, url: str, chunk: int = 32) -> None:
        from ..serve.client import ClientConfig, PRMClient

        self.url, self.chunk = url, chunk
        self._runner = asyncio.Runner()
        try:
            self.client = self._run(PRMClient.connect(url, config=ClientConfig(coalesce=False)))
        except BaseException:
            self._runner.close()
            raise

    def _run(self, call: Awaitable[T]) -> T:
        import httpx

        from ..serve.client import PRMServerError

        async def guarded() -> T:
            try:
                return await call
            except (PRMServerError, httpx.HTTPError) as e:
                raise ScoringUnavailable(f"{self.url}: {e or type(e).__name__}") from e

        return self._runner.run(guarded())

    @property
    def sidecar(self) -> Sidecar:
        assert self.client.sidecar is not None  # set by connect()
        return self.client.sidecar

    @property
    def model_id(self) -> str:
        return str(self.client.model_id)

    def calibration(self) -> dict[str, Any] | None:
        return self.client.calibration()

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(items), self.chunk):
            out += self._run(self.client.score_batch(list(items[i:i + self.chunk])))
        return out

    def close(self) -> None:
        try:
            self._runner.run(self.client.aclose())
        finally:
            self._runner.close()


def open_scorer(model: str | None = None, url: str | None = None, *, device: str = "auto") -> StepScorer:
    """The engine over checkpoint folder `model`, or a client of the server at `url` (exactly one)."""
    if (model is None) == (url is None):
        raise ValueError("give exactly one of --model DIR or --url URL")
    if url is not None:
        return SyncClient(url)
    from ..serve.engine import PRMEngine

    return PRMEngine.from_checkpoint(str(model), device=device)


def calibrated(scorer: StepScorer, items: Sequence[Item]) -> list[list[float]]:
    """Calibrated per-step P(good) of each (question, steps); the calibration is read after scoring,
    so a client that just learnt of a new served calibration applies the new one."""
    raw = scorer.score(items)
    return calib.apply_each(raw, current_calibration(scorer))


def describe(scorer: StepScorer) -> str:
    """One line: which model, where, under which calibration."""
    where = f"server {scorer.url}" if isinstance(scorer, SyncClient) else "in-process engine"
    return f"{scorer.model_id} ({where}), calibration: {calib.describe(current_calibration(scorer))}"


def close_scorer(scorer: StepScorer) -> None:
    close = getattr(scorer, "close", None)
    if callable(close):
        close()
