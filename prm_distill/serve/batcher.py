"""An asyncio front for a synchronous scoring engine: dynamic batching without blocking the loop.

Many coroutines (RL sessions, HTTP requests) each ask for one trajectory's step scores. Scoring
them one by one wastes the model; blocking the event loop on a forward pass stalls every other
session. `ScoreBatcher` queues requests, gathers those that arrive within `max_wait_ms` of the
oldest one (up to about `max_batch_tokens`), and runs them as one `engine.score` call in its own
worker thread, one call at a time. The window is only waited under load (the previous call held
more than one request): a lone request on an idle batcher is scored at once, so batching costs
a single client no latency; requests arriving while a call runs are gathered in any case.

The engine is either synchronous (`score(items)`, run in the worker thread: `PRMEngine`) or
asynchronous (`async score_batch(items)`, awaited on the loop: `PRMClient`, which thereby sends
the trajectories of many concurrent sessions as one HTTP request). `max_in_flight` calls may run
at once (1 for a model; a few for a remote server, so requests overlap the network). Results equal unbatched scoring: a request's scores never
depend on what it was batched with, and a request the engine rejects fails alone.

Fairness (`max_request_tokens`): the trajectories of one caller's request (one `score_batch` call,
or the items sharing a `group` key: one HTTP request of the server) add at most that many tokens to
any one engine call (always at least one trajectory). A 100-trajectory request is thereby scored
over several calls, and a small request arriving meanwhile joins the next call instead of waiting
behind all of it: without the cap a 1-step request waited 50 s behind one 100 x 20-step request on
CPU. The engine scores trajectories independently, so how a request is split across calls changes
no score beyond float rounding (1e-6 in fp32, tested).
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..protocol import Item, current_calibration

if TYPE_CHECKING:
    from ..checkpoint import Sidecar


class SyncScoringEngine(Protocol):
    """What the batcher drives: a `protocol.StepScorer` (`PRMEngine`), or anything scoring
    (question, steps) items in one call (its sidecar and calibration, when it has them, pass through)."""

    def score(self, items: Sequence[Item]) -> list[list[float]]: ...


class AsyncScoringEngine(Protocol):
    """A remote engine: scores a list of (question, steps) items in one awaited call."""

    async def score_batch(self, items: Sequence[Item]) -> list[list[float]]: ...


def _is_async(engine: object) -> bool:
    return inspect.iscoroutinefunction(getattr(engine, "score_batch", None))


def _item_fault(error: BaseException) -> bool:
    """A remote refusal caused by an item (4xx other than 429), not by the server or the network."""
    status = getattr(error, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status != 429


class BatcherFullError(RuntimeError):
    """Too many requests are waiting: the caller should shed load rather than queue without bound."""


class BatcherClosedError(RuntimeError):
    """The batcher was closed before (or while) the request could be scored."""


def estimate_tokens(question: str, steps: Sequence[str]) -> int:
    """Cheap size of a request (about 4 characters per BPE token, plus one tag per step).

    Exact counts would tokenise every request twice (here and in the engine); the engine re-buckets
    exactly under its own token budget, so this estimate only bounds how much one call gathers.
    """
    return (len(question) + sum(len(step) for step in steps)) // 4 + len(steps) + 1


@dataclass(eq=False)  # compared and hashed by identity: a lone trajectory is its own request
class _Request:
    item: Item
    cost: int
    arrived: float
    future: asyncio.Future[list[float]] = field(repr=False)
    group: object = field(default=None, repr=False)  # the caller's request this trajectory belongs to (None: its own)

    @property
    def owner(self) -> object:
        return self if self.group is None else self.group


def _score_isolated(engine: SyncScoringEngine, items: list[Item]) -> list[list[float] | Exception]:
    """Score a batch; if the engine rejects it, score each item alone so only the bad one fails."""
    try:
        results: list[list[float] | Exception] = list(engine.score(items))
        if len(results) != len(items):
            raise RuntimeError(f"the engine returned {len(results)} results for {len(items)} items")
        return results
    except Exception:
        if len(items) == 1:
            raise
    isolated: list[list[float] | Exception] = []
    for item in items:
        try:
            isolated.extend(_score_isolated(engine, [item]))
        except Exception as error:
            isolated.append(error)
    return isolated


async def _score_isolated_async(engine: AsyncScoringEngine, items: list[Item]) -> list[list[float] | Exception]:
    """As `_score_isolated`, for a remote engine: a refusal caused by one item fails that item alone;
    a server or network failure fails the whole call (retrying item by item would only add load)."""
    try:
        results: list[list[float] | Exception] = list(await engine.score_batch(items))
        if len(results) != len(items):
            raise RuntimeError(f"the engine returned {len(results)} results for {len(items)} items")
        return results
    except Exception as error:
        if len(items) == 1 or not _item_fault(error):
            raise
    isolated: list[list[float] | Exception] = []
    for item in items:
        try:
            isolated.extend(await _score_isolated_async(engine, [item]))
        except Exception as error:
            isolated.append(error)
    return isolated


class ScoreBatcher:
    """`await batcher.score(question, steps)` -> per-step scores; `await batcher.aclose()` to stop.

    Bound to one event loop at a time (it restarts on a new loop once the old one has finished).
    The engine is borrowed: closing the batcher stops its worker thread, not the engine.
    """

    def __init__(
        self,
        engine: SyncScoringEngine | AsyncScoringEngine,
        *,
        max_batch_tokens: int = 16384,
        max_wait_ms: float = 5.0,
        max_queue: int = 4096,
        max_items: int | None = None,
        max_in_flight: int = 1,
        max_request_tokens: int | None = None,
    ) -> None:
        """`max_request_tokens`: the most tokens one request (a `score_batch` call or a `group`) adds
        to one engine call, so one large request cannot hold the engine while small ones wait
        (None: no cap, a request's trajectories batch first come, first served)."""
        if (max_batch_tokens < 1 or max_queue < 1 or not max_wait_ms >= 0 or max_in_flight < 1 or (max_items is not None and max_items < 1)
                or (max_request_tokens is not None and max_request_tokens < 1)):
            raise ValueError("ScoreBatcher needs max_batch_tokens, max_queue, max_items, max_in_flight and max_request_tokens >= 1 "
                             "and max_wait_ms >= 0")
        self.engine = engine
        self.max_request_tokens = max_request_tokens
        self.max_items = max_items
        self.max_in_flight = max_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self._pending: deque[_Request] = deque()
        self._pending_cost = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prm-batcher")
        self._worker: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._closed = False
        self._last_batch_size = 0

    @property
    def sidecar(self) -> Sidecar | None:
        """The engine's sidecar (the batcher is an `AsyncStepScorer` over it)."""
        return getattr(self.engine, "sidecar", None)

    @property
    def model_id(self) -> str | None:
        return getattr(self.engine, "model_id", None)

    def calibration(self) -> dict[str, Any] | None:
        """The engine's calibration now."""
        return current_calibration(self.engine)

    async def score_batch(self, items: Sequence[Item]) -> list[list[float]]:
        """Per-step scores of several trajectories (each batched with whatever else is waiting; one
        request for `max_request_tokens`)."""
        group = object()
        return list(await asyncio.gather(*(self.score(question, steps, group=group) for question, steps in items)))

    async def score(self, question: str, steps: Sequence[str], *, group: object = None) -> list[float]:
        """Per-step scores of one trajectory, batched with whatever else is waiting.

        `group`: a key shared by the trajectories of one caller's request (any hashable object, e.g.
        `object()` per HTTP request), which `max_request_tokens` caps together; None: this trajectory alone."""
        if self._closed:
            raise BatcherClosedError("ScoreBatcher is closed")
        if len(self._pending) >= self.max_queue:
            raise BatcherFullError(
                f"ScoreBatcher queue is full ({self.max_queue} requests waiting); "
                "raise max_queue or lower the number of concurrent sessions"
            )
        loop = asyncio.get_running_loop()
        self._ensure_worker(loop)
        request = _Request((question, list(steps)), estimate_tokens(question, steps), loop.time(), loop.create_future(), group)
        self._pending.append(request)
        self._pending_cost += request.cost
        assert self._wakeup is not None
        self._wakeup.set()
        return await request.future

    def _ensure_worker(self, loop: asyncio.AbstractEventLoop) -> None:
        worker = self._worker
        if worker is not None and not worker.done():
            if worker.get_loop() is not loop:
                raise RuntimeError("ScoreBatcher is in use by another running event loop")
            return
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(self.max_in_flight)
        self._worker = loop.create_task(self._run(), name="prm-score-batcher")

    async def _run(self) -> None:
        assert self._wakeup is not None and self._slots is not None
        loop = asyncio.get_running_loop()
        batch: list[_Request] = []
        try:
            while self._pending or not self._closed:
                if not self._pending:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                await self._slots.acquire()  # with one slot: the previous call has finished
                await self._gather(loop)
                batch = self._take()
                if not batch:
                    self._slots.release()
                    continue
                task = loop.create_task(self._score(loop, batch))
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)
                task.add_done_callback(lambda _: self._slots.release())  # type: ignore[union-attr]
                batch = []
            await asyncio.gather(*self._in_flight)
        finally:
            # Loop shutdown or a bug: nobody is left to answer these requests.
            for request in [*batch, *self._pending]:
                if not request.future.done():
                    request.future.set_exception(BatcherClosedError("ScoreBatcher stopped before scoring"))
            self._pending.clear()
            self._pending_cost = 0

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Under load, wait until the oldest request is max_wait_ms old or the token budget is reached."""
        assert self._wakeup is not None
        if self._last_batch_size <= 1 and len(self._pending) == 1:
            return  # idle: nobody to wait for
        deadline = self._pending[0].arrived + self.max_wait_s
        while self._ready_cost() < self.max_batch_tokens and not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                return

    def _ready_cost(self) -> int:
        """Tokens the next call could take: all that wait, less what `max_request_tokens` holds back."""
        cap = self.max_request_tokens
        if cap is None:
            return self._pending_cost
        per_owner: dict[object, int] = {}
        for request in self._pending:
            per_owner[request.owner] = per_owner.get(request.owner, 0) + request.cost
        return sum(min(cost, cap) for cost in per_owner.values())

    def _take(self) -> list[_Request]:
        """The oldest requests that fit the budget (always at least one); abandoned ones are dropped.

        With `max_request_tokens`, a request that has had its share of this call is passed over (its
        later trajectories keep their place for the next call) and those behind it move up."""
        batch: list[_Request] = []
        cost = 0
        cap = self.max_request_tokens
        taken: dict[object, int] = {}  # tokens each request has in this batch
        passed: deque[_Request] = deque()
        while self._pending:
            request = self._pending[0]
            if request.future.done():  # the caller gave up (cancelled or timed out)
                self._pending.popleft()
                self._pending_cost -= request.cost
                continue
            share = taken.get(request.owner)
            if cap is not None and share is not None and share + request.cost > cap:
                passed.append(self._pending.popleft())
                continue
            if batch and (cost + request.cost > self.max_batch_tokens or len(batch) == self.max_items):
                break
            self._pending.popleft()
            self._pending_cost -= request.cost
            taken[request.owner] = (share or 0) + request.cost
            batch.append(request)
            cost += request.cost
        if passed:
            passed.extend(self._pending)
            self._pending = passed
        return batch

    async def _score(self, loop: asyncio.AbstractEventLoop, batch: list[_Request]) -> None:
        self._last_batch_size = len(batch)
        items = [request.item for request in batch]
        try:
            if _is_async(self.engine):
                results = await _score_isolated_async(self.engine, items)  # type: ignore[arg-type]
            else:
                results = await loop.run_in_executor(self._executor, _score_isolated, cast(SyncScoringEngine, self.engine), items)
        except Exception as error:
            results = [error] * len(batch)
        for request, result in zip(batch, results, strict=True):
            if request.future.done():
                continue
            if isinstance(result, Exception):
                request.future.set_exception(result)
            else:
                request.future.set_result(list(result))

    async def aclose(self) -> None:
        """Refuse new requests, finish the queued ones, then stop the worker thread."""
        self._closed = True
        worker = self._worker
        if worker is not None and not worker.done() and worker.get_loop() is asyncio.get_running_loop():
            assert self._wakeup is not None
            self._wakeup.set()
            await asyncio.shield(worker)
        self._executor.shutdown(wait=False)
