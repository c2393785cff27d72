"""Runner lifecycle: ownership, close order, at-most-once, shared clean-up, rollback, cancellation."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from prm_distill.scorer import BaseScorer, PRMConfig, PRMRunner, PRMScorerConfig


class Resource(BaseScorer):
    """A scorer holding a resource; records construction and clean-up in `events`."""

    name = "resource"
    events: ClassVar[list[str]] = []
    instances: ClassVar[list[Resource]] = []
    hold_close: ClassVar[dict[str, asyncio.Event]] = {}  # label -> released when set

    def __init__(self, label: str, fail_construct=False, fail_validate=False, fail_close=False, **kwargs) -> None:
        if fail_construct:
            raise ValueError(f"cannot construct {label}")
        super().__init__(**kwargs)
        self.label, self.fail_validate, self.fail_close = label, fail_validate, fail_close
        self.close_calls = 0
        self.close_started = asyncio.Event()
        self.close_interrupted = False
        self.instances.append(self)

    def validate_prm_config(self, config, *, training_enabled):
        if self.fail_validate:
            raise ValueError(f"{self.label} rejects the config")

    async def evaluate(self, interaction, ctx):
        return 1.0

    async def aclose(self):
        self.close_calls += 1
        self.events.append(f"close:{self.label}")
        self.close_started.set()
        held = self.hold_close.get(self.label)
        try:
            if held is not None:
                await held.wait()
        except asyncio.CancelledError:
            self.close_interrupted = True
            raise
        if self.fail_close:
            raise OSError(f"cannot flush {self.label}")


@pytest.fixture(autouse=True)
def _fresh_resources():
    Resource.events, Resource.instances, Resource.hold_close = [], [], {}


def spec(label: str, *, enabled: bool = True, **kwargs) -> PRMScorerConfig:
    return PRMScorerConfig(path=f"{__name__}.Resource", enabled=enabled, kwargs={"label": label, **kwargs})


def by_label(label: str) -> Resource:
    return next(s for s in Resource.instances if s.label == label)


def test_owned_scorers_close_in_reverse_order_and_borrowed_ones_stay_open():
    async def go():
        borrowed = Resource("borrowed")
        runner = await PRMRunner.create(
            PRMConfig(scorers=[spec("first"), borrowed, spec("disabled", enabled=False), spec("last")])
        )
        await runner.aclose()
        return borrowed

    borrowed = asyncio.run(go())
    assert Resource.events == ["close:last", "close:disabled", "close:first"]
    assert borrowed.close_calls == 0


def test_each_owned_scorer_is_closed_at_most_once():
    async def go():
        runner = await PRMRunner.create(PRMConfig(scorers=[spec("a"), spec("b")]))
        await runner.aclose()
        await runner.aclose()

    asyncio.run(go())
    assert [s.close_calls for s in Resource.instances] == [1, 1]


def test_concurrent_callers_wait_for_the_same_clean_up():
    async def go():
        Resource.hold_close["a"] = asyncio.Event()
        runner = await PRMRunner.create(PRMConfig(scorers=[spec("a")]))
        first, second = asyncio.create_task(runner.aclose()), asyncio.create_task(runner.aclose())
        await by_label("a").close_started.wait()
        await asyncio.sleep(0)
        assert not first.done() and not second.done()  # both wait for the flush
        Resource.hold_close["a"].set()
        await asyncio.gather(first, second)

    asyncio.run(go())
    assert by_label("a").close_calls == 1


def test_failed_clean_ups_are_raised_together_after_every_scorer_was_tried():
    async def go():
        runner = await PRMRunner.create(
            PRMConfig(scorers=[spec("good"), spec("bad1", fail_close=True), spec("bad2", fail_close=True)])
        )
        with pytest.raises(ExceptionGroup, match="PRM scorer cleanup failed") as caught:
            await runner.aclose()
        assert [str(e) for e in caught.value.exceptions] == ["cannot flush bad2", "cannot flush bad1"]
        await runner.aclose()  # not retried: failures were reported once

    asyncio.run(go())
    assert Resource.events == ["close:bad2", "close:bad1", "close:good"]
    assert [s.close_calls for s in Resource.instances] == [1, 1, 1]


def test_run_is_refused_once_closing_started(make_turn):
    async def go():
        runner = await PRMRunner.create(PRMConfig(scorers=[spec("a")]))
        await runner.aclose()
        turn = make_turn("t")
        with pytest.raises(RuntimeError, match="closed"):
            await runner.run([turn])
        return turn

    assert asyncio.run(go()).token_rewards is None


@pytest.mark.parametrize(
    ("bad", "message"),
    [({"fail_construct": True}, "cannot construct bad"), ({"fail_validate": True}, "bad rejects the config")],
)
def test_create_closes_what_it_built_and_reraises_the_original_error(bad, message):
    async def go():
        borrowed = Resource("borrowed")
        scorers = [spec("first"), borrowed, spec("second"), spec("bad", **bad)]
        with pytest.raises(ValueError, match=message) as caught:
            await PRMRunner.create(PRMConfig(scorers=scorers))
        return borrowed, caught.value

    borrowed, error = asyncio.run(go())
    built = [s.label for s in Resource.instances if s.label != "borrowed"]
    assert Resource.events == [f"close:{label}" for label in reversed(built)]
    assert borrowed.close_calls == 0
    assert not getattr(error, "__notes__", [])


def test_create_attaches_clean_up_failures_to_the_original_error_as_notes():
    async def go():
        scorers = [spec("leaky", fail_close=True), spec("bad", fail_validate=True)]
        with pytest.raises(ValueError, match="bad rejects the config") as caught:
            await PRMRunner.create(PRMConfig(scorers=scorers))
        return caught.value

    error = asyncio.run(go())
    assert len(error.__notes__) == 1
    assert "scorer cleanup failed" in error.__notes__[0] and "cannot flush leaky" in error.__notes__[0]
    assert Resource.events == ["close:bad", "close:leaky"]


class CancelledInConstructor(Resource):
    """Construction interrupted by cancellation (e.g. it awaited a loop-bound client that was cancelled)."""

    def __init__(self, label: str, **kwargs) -> None:
        raise asyncio.CancelledError


@pytest.mark.parametrize("interrupt", [asyncio.CancelledError, KeyboardInterrupt])
def test_create_rolls_back_on_cancellation_and_other_base_exceptions(interrupt, monkeypatch):
    # Not only ordinary errors: an interrupted start-up must not leak the scorers already built.
    def interrupted(self, label, **kwargs):
        raise interrupt

    monkeypatch.setattr(CancelledInConstructor, "__init__", interrupted)

    async def go():
        scorers = [spec("first"), PRMScorerConfig(path=f"{__name__}.CancelledInConstructor", kwargs={"label": "x"})]
        with pytest.raises(interrupt):
            await PRMRunner.create(PRMConfig(scorers=scorers))

    asyncio.run(go())
    assert Resource.events == ["close:first"]


def test_runner_announces_that_it_calls_validate_prm_config():
    # AReaL's hosts check this flag before relying on scorers validating the config.
    assert PRMRunner.supports_scorer_config_validation is True


def test_synchronous_constructor_builds_a_working_runner(make_turn):
    async def go():
        runner = PRMRunner(PRMConfig(scorers=[spec("a")]))
        turn = make_turn("t", n_tokens=1)
        await runner.run([turn])
        await runner.aclose()
        return turn

    assert asyncio.run(go()).token_rewards.tolist() == [1.0]
    assert Resource.events == ["close:a"]


def test_cancelled_close_propagates_and_is_not_retried():
    async def go():
        Resource.hold_close["second"] = asyncio.Event()
        runner = await PRMRunner.create(PRMConfig(scorers=[spec("first"), spec("second")]))
        closing = asyncio.create_task(runner.aclose())
        await by_label("second").close_started.wait()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert by_label("second").close_interrupted
        assert by_label("first").close_calls == 0  # not reached before the cancellation
        await runner.aclose()  # a later call closes what was not reached, never the interrupted one

    asyncio.run(go())
    assert [by_label("second").close_calls, by_label("first").close_calls] == [1, 1]


def test_cancellation_during_create_rollback_propagates():
    async def go():
        Resource.hold_close["first"] = asyncio.Event()
        creating = asyncio.create_task(
            PRMRunner.create(PRMConfig(scorers=[spec("first"), spec("bad", fail_validate=True)]))
        )
        while not Resource.instances or not by_label("first").close_started.is_set():
            await asyncio.sleep(0)
        creating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creating

    asyncio.run(go())
    assert by_label("first").close_interrupted


def test_cancelled_run_propagates_and_changes_nothing(make_turn):
    class Slow(BaseScorer):
        name = "slow"

        async def evaluate(self, interaction, ctx):
            await asyncio.sleep(3600)
            return 1.0

    async def go():
        runner = PRMRunner(PRMConfig(scorers=[Slow()]))
        turn = make_turn("t")
        scoring = asyncio.create_task(runner.run([turn]))
        await asyncio.sleep(0.01)
        scoring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await scoring
        return turn

    assert asyncio.run(go()).token_rewards is None
