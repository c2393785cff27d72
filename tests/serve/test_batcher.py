"""ScoreBatcher: concurrent requests become few engine calls, without changing any result."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from prm_distill.serve import PRMEngine
from prm_distill.serve.batcher import BatcherClosedError, BatcherFullError, ScoreBatcher, estimate_tokens


class RecordingEngine:
    """Scores a step as len(step) / 100; records every call; can block, sleep or refuse an item."""

    def __init__(self, *, delay: float = 0.0, refuse: str | None = None, gate: threading.Event | None = None, probe=None):
        self.delay, self.refuse, self.gate, self.probe = delay, refuse, gate, probe
        self.calls: list[list[str]] = []  # the questions of each call
        self.started = threading.Event()
        self.active = self.max_active = 0
        self._lock = threading.Lock()

    def score(self, items):
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.started.set()
            if self.probe is not None:
                self.probe()
            if self.gate is not None:
                self.gate.wait(5)
            time.sleep(self.delay)
            self.calls.append([question for question, _ in items])
            if any(question == self.refuse for question, _ in items):
                raise ValueError("refused item")
            return [[len(step) / 100 for step in steps] for _, steps in items]
        finally:
            with self._lock:
                self.active -= 1


def test_concurrent_requests_share_one_engine_call():
    engine = RecordingEngine()

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=100)
        results = await asyncio.gather(*(batcher.score(f"q{i}", ["ab" * (i + 1), "abc"]) for i in range(8)))
        await batcher.aclose()
        return results

    results = asyncio.run(main())
    assert engine.calls == [[f"q{i}" for i in range(8)]]
    assert results == [[2 * (i + 1) / 100, 0.03] for i in range(8)]


def test_batched_scores_equal_unbatched_scores_of_the_real_engine(tiny_checkpoint):
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")
    items = [
        ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
        ("Tom has 4 apples and buys 3 more. How many now?", ["4 + 3 = 7.", "He has 7 apples.", "Answer: 7."]),
        ("Compute 6 * 7.", ["6 * 7 = 42."]),
    ]
    unbatched = [engine.score([item])[0] for item in items]

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=100)
        try:
            return await asyncio.gather(*(batcher.score(q, s) for q, s in items))
        finally:
            await batcher.aclose()

    batched = asyncio.run(main())
    for got, want in zip(batched, unbatched, strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def test_token_budget_caps_what_one_call_gathers():
    engine = RecordingEngine()
    steps = ["x" * 40]
    budget = 2 * estimate_tokens("q0", steps)  # room for exactly two of these requests

    async def main():
        batcher = ScoreBatcher(engine, max_batch_tokens=budget, max_wait_ms=100)
        results = await asyncio.gather(*(batcher.score(f"q{i}", steps) for i in range(5)))
        await batcher.aclose()
        return results

    assert asyncio.run(main()) == [[0.4]] * 5
    assert engine.calls == [["q0", "q1"], ["q2", "q3"], ["q4"]]


def test_one_model_call_at_a_time_and_the_event_loop_keeps_running():
    ticked = threading.Event()
    saw_the_loop: list[bool] = []

    def probe():
        # Inside a model call: wait until the event loop has run the ticker. A call that froze the
        # loop would never see a tick (the wait times out): an ordering, not a timing, assertion.
        ticked.clear()
        saw_the_loop.append(ticked.wait(30))

    engine = RecordingEngine(probe=probe)

    async def main():
        batcher = ScoreBatcher(engine, max_batch_tokens=8, max_wait_ms=0)  # tiny budget: many calls
        done = asyncio.Event()

        async def ticker():
            while not done.is_set():
                ticked.set()
                await asyncio.sleep(0.001)

        ticking = asyncio.create_task(ticker())
        await asyncio.gather(*(batcher.score(f"q{i}", ["some step text"]) for i in range(6)))
        done.set()
        await ticking
        await batcher.aclose()

    asyncio.run(main())
    assert len(engine.calls) == 6 and engine.max_active == 1
    assert saw_the_loop == [True] * 6  # the loop kept running during every model call


def test_a_full_queue_fails_fast_with_a_clear_error():
    gate = threading.Event()
    engine = RecordingEngine(gate=gate)

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=0, max_queue=2)
        in_flight = asyncio.create_task(batcher.score("q0", ["a"]))
        await asyncio.to_thread(engine.started.wait, 5)  # q0 is inside the engine now
        waiting = [asyncio.create_task(batcher.score(f"q{i}", ["a"])) for i in (1, 2)]
        await asyncio.sleep(0)
        with pytest.raises(BatcherFullError, match="queue is full"):
            await batcher.score("q3", ["a"])
        gate.set()
        results = await asyncio.gather(in_flight, *waiting)
        await batcher.aclose()
        return results

    assert asyncio.run(main()) == [[0.01]] * 3


def test_a_request_the_engine_refuses_fails_alone():
    engine = RecordingEngine(refuse="bad")

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=100)
        results = await asyncio.gather(
            batcher.score("good", ["abcd"]), batcher.score("bad", ["a"]), batcher.score("fine", ["ab"]),
            return_exceptions=True,
        )
        await batcher.aclose()
        return results

    good, bad, fine = asyncio.run(main())
    assert good == [0.04] and fine == [0.02]
    assert isinstance(bad, ValueError) and "refused" in str(bad)


def test_aclose_finishes_queued_requests_then_refuses_new_ones():
    engine = RecordingEngine()

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=600_000)  # they would wait ten minutes for company
        tasks = [asyncio.create_task(batcher.score(f"q{i}", ["abc"])) for i in range(3)]
        await asyncio.sleep(0)
        await asyncio.wait_for(batcher.aclose(), 60)  # closing does not wait out max_wait_ms
        results = await asyncio.gather(*tasks)
        with pytest.raises(BatcherClosedError):
            await batcher.score("late", ["abc"])
        return results

    assert asyncio.run(main()) == [[0.03]] * 3


def test_a_request_abandoned_while_queued_is_not_scored():
    gate = threading.Event()
    engine = RecordingEngine(gate=gate)

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=0)
        first = asyncio.create_task(batcher.score("first", ["a"]))
        await asyncio.to_thread(engine.started.wait, 5)
        abandoned = asyncio.create_task(batcher.score("abandoned", ["a"]))
        kept = asyncio.create_task(batcher.score("kept", ["a"]))
        await asyncio.sleep(0)
        abandoned.cancel()
        gate.set()
        results = await asyncio.gather(first, kept)
        await batcher.aclose()
        return results

    assert asyncio.run(main()) == [[0.01], [0.01]]
    assert engine.calls == [["first"], ["kept"]]


def test_the_batcher_serves_one_event_loop_after_another():
    engine = RecordingEngine()
    batcher = ScoreBatcher(engine, max_wait_ms=0)
    assert asyncio.run(batcher.score("a", ["ab"])) == [0.02]
    assert asyncio.run(batcher.score("b", ["abc"])) == [0.03]
    asyncio.run(batcher.aclose())


def test_a_lone_request_on_an_idle_batcher_does_not_wait_but_under_load_requests_gather():
    engine = RecordingEngine()

    pair = 2 * estimate_tokens("a", ["ab"])  # a call is due once two requests wait (or the window ends)

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=600_000, max_batch_tokens=pair)
        # idle: scored at once, not after the ten-minute window (which would time out here)
        await asyncio.wait_for(batcher.score("alone", ["ab"]), 60)
        await asyncio.gather(batcher.score("a", ["ab"]), batcher.score("b", ["ab"]))  # load: one call of two
        # The last call held two requests, so the next lone request waits for a mate arriving later.
        late = asyncio.ensure_future(batcher.score("c", ["ab"]))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not late.done()  # still waiting for company
        await asyncio.wait_for(asyncio.gather(late, batcher.score("d", ["ab"])), 60)
        await batcher.aclose()

    asyncio.run(main())
    assert engine.calls == [["alone"], ["a", "b"], ["c", "d"]]


def test_a_large_request_is_split_across_calls_and_a_small_one_joins_the_next_call():
    gate = threading.Event()
    engine = RecordingEngine(gate=gate)
    steps = ["x" * 40]
    cap = 2 * estimate_tokens("big0", steps)  # each call takes at most two of the large request's trajectories

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=0, max_request_tokens=cap)
        big = asyncio.ensure_future(batcher.score_batch([(f"big{i}", steps) for i in range(6)]))
        await asyncio.to_thread(engine.started.wait, 5)  # the large request's first call is running
        small = asyncio.ensure_future(batcher.score("small", ["ab"]))
        await asyncio.sleep(0)
        gate.set()
        results = await asyncio.gather(big, small)
        await batcher.aclose()
        return results

    big, small = asyncio.run(main())
    assert big == [[0.4]] * 6 and small == [0.02]
    assert engine.calls == [["big0", "big1"], ["big2", "big3", "small"], ["big4", "big5"]]


def test_without_a_cap_a_request_fills_the_call_first_come_first_served():
    gate = threading.Event()
    engine = RecordingEngine(gate=gate)
    budget = 4 * estimate_tokens("big0", ["x" * 40])

    async def main():
        batcher = ScoreBatcher(engine, max_wait_ms=0, max_batch_tokens=budget)
        big = asyncio.ensure_future(batcher.score_batch([(f"big{i}", ["x" * 40]) for i in range(6)]))
        await asyncio.to_thread(engine.started.wait, 5)
        small = asyncio.ensure_future(batcher.score("small", ["ab"]))
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(big, small)
        await batcher.aclose()

    asyncio.run(main())
    assert engine.calls == [["big0", "big1", "big2", "big3"], ["big4", "big5", "small"]]  # behind all of it


def test_the_cap_lets_a_small_request_finish_before_a_large_one_with_the_same_scores(tiny_checkpoint):
    """Real engine: one 24-trajectory x 20-step request, then a 1-step request while it is being
    scored. The small one completes first (order, not timing), and every score equals scoring
    that trajectory alone (batch composition is float rounding only: 1e-6 in fp32)."""
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32")
    big_items = [(f"Problem {i}: what is {i} + {i}?", [f"Step {j}: {i} + {j} = {i + j}." for j in range(20)]) for i in range(24)]
    small_item = ("What is 2 + 3?", ["2 + 3 = 5."])
    alone = [engine.score([item])[0] for item in [*big_items, small_item]]
    started = threading.Event()

    class Watched:
        def score(self, items):
            started.set()
            return engine.score(items)

    cap = 3 * estimate_tokens(*big_items[0])  # three of the large request's trajectories per call

    async def main():
        batcher = ScoreBatcher(Watched(), max_wait_ms=0, max_request_tokens=cap)
        finished: list[str] = []
        big = asyncio.ensure_future(batcher.score_batch(big_items))
        big.add_done_callback(lambda _: finished.append("big"))
        await asyncio.to_thread(started.wait, 30)  # the large request's first call is running
        small = asyncio.ensure_future(batcher.score(*small_item))
        small.add_done_callback(lambda _: finished.append("small"))
        results = await asyncio.gather(big, small)
        await batcher.aclose()
        return finished, results

    finished, (big, small) = asyncio.run(main())
    assert finished == ["small", "big"]
    for got, want in zip([*big, small], alone, strict=True):
        assert got == pytest.approx(want, abs=1e-6)


def test_the_server_caps_each_http_request_by_default_and_zero_switches_the_cap_off(tiny_checkpoint):
    from prm_distill.serve.app import _batcher
    from prm_distill.serve.config import ServerConfig

    engine = RecordingEngine()
    assert _batcher(engine, ServerConfig(model=str(tiny_checkpoint))).max_request_tokens == 2048
    assert _batcher(engine, ServerConfig(model=str(tiny_checkpoint), max_request_tokens=0)).max_request_tokens is None
    with pytest.raises(ValueError, match="max_request_tokens"):
        ServerConfig(model=str(tiny_checkpoint), max_request_tokens=-1)
