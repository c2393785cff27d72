"""PRMRunner scoring: broadcast, weights, checks, all-or-nothing, rejection, trajectory scorers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from prm_distill.scorer import (
    BaseScorer,
    BaseTrajectoryScorer,
    PRMConfig,
    PRMMetricObservation,
    PRMRejectedError,
    PRMRunner,
    PRMScorerResult,
    PRMTurnResult,
)


class Fn(BaseScorer):
    """Delegates to an async function, so each test states its scorer inline."""

    name = "fn"

    def __init__(self, fn, weight: float = 1.0, enabled: bool = True) -> None:
        super().__init__(weight=weight, enabled=enabled)
        self.fn = fn

    async def evaluate(self, interaction, ctx):
        return await self.fn(interaction, ctx)


class Other(Fn):
    name = "other"


class Constant(BaseScorer):
    """Built from a dotted path by the runner."""

    name = "constant"

    def __init__(self, value: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value

    async def evaluate(self, interaction, ctx):
        return self.value


class SameName(BaseScorer):
    name = "constant"

    async def evaluate(self, interaction, ctx):
        return 1.0


class Observing(BaseScorer):
    """Reports observations chosen by the test through ctx."""

    name = "observing"

    async def evaluate(self, interaction, ctx):
        return 0.0

    def prepare_result(self, interaction, result, ctx):
        return PRMScorerResult(reward=result, observations=tuple(ctx["observations"](interaction)))


class Whole(BaseTrajectoryScorer):
    name = "whole"

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    async def evaluate_trajectory(self, interactions, ctx):
        return await self.fn(interactions, ctx)


def const(value):
    async def fn(interaction, ctx):
        return value

    return fn


def run(scorers, turns, ctx=None, *, config_kwargs=None, **kwargs):
    """Score `turns` with a fresh runner over borrowed scorers."""

    async def go():
        runner = PRMRunner(PRMConfig(scorers=list(scorers), **(config_kwargs or {})))
        return await runner.run(turns, ctx, **kwargs)

    return asyncio.run(go())


def test_scalar_is_broadcast_and_weighted(make_turn):
    turn = make_turn("t", n_tokens=3)
    results = run([Fn(const(0.5), weight=2.0)], [turn])
    assert turn.token_rewards.dtype == torch.float32
    assert turn.token_rewards.tolist() == [1.0, 1.0, 1.0]
    assert results == [PRMTurnResult(scorer_name="fn", reward=1.0, observations=())]


def test_dense_tensor_is_kept_per_token(make_turn):
    turn = make_turn("t", n_tokens=3)
    run([Fn(const(torch.tensor([0.5, 0.25, 2.0], dtype=torch.float64)), weight=-2.0)], [turn])
    assert turn.token_rewards.dtype == torch.float32
    assert turn.token_rewards.tolist() == [-1.0, -0.5, -4.0]


def test_weighted_rewards_add_up_across_scorers_and_onto_existing_rewards(make_turn):
    turn = make_turn("t", n_tokens=3, token_rewards=torch.tensor([1.0, 0.0, 0.0]))
    results = run([Fn(const(0.5)), Other(const(torch.tensor([0.0, 1.0, 2.0])), weight=-1.0)], [turn])
    # [1, 0, 0] + 0.5 + (-1) * [0, 1, 2]
    assert turn.token_rewards.tolist() == [1.5, -0.5, -1.5]
    # Turn reward metric: mean of each scorer's own weighted contribution.
    assert [(r.scorer_name, r.reward) for r in results] == [("fn", 0.5), ("other", -1.0)]


def test_outcome_reward_is_never_changed(make_turn):
    turn = make_turn("t")
    run([Fn(const(-3.0))], [turn])
    assert turn.reward == 1.0


@pytest.mark.parametrize(
    ("reward", "error", "match"),
    [
        (torch.zeros(2), ValueError, r"must return shape \(3,\) for interaction 't', got \(2,\)"),
        (torch.zeros(1, 3), ValueError, r"must return shape \(3,\)"),
        (torch.tensor([0.0, float("nan"), 0.0]), ValueError, "non-finite"),
        (float("inf"), ValueError, "non-finite"),
        ("half", TypeError, "expected a number, a tensor or None"),
        (object(), TypeError, "expected a number, a tensor or None"),
    ],
)
def test_bad_rewards_reject_and_change_nothing(make_turn, reward, error, match):
    turn = make_turn("t", n_tokens=3, token_rewards=torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(error, match=match):
        run([Fn(const(reward))], [turn])
    assert turn.token_rewards.tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(("reward", "expected"), [(True, 1.0), (False, 0.0), ("0.25", 0.25)])
def test_anything_float_accepts_is_a_scalar(make_turn, reward, expected):
    # As AReaL: a non-tensor result is float(result), so bools and numeric strings broadcast.
    turn = make_turn("t", n_tokens=2)
    run([Fn(const(reward))], [turn])
    assert turn.token_rewards.tolist() == [expected, expected]


def test_weight_overflow_is_not_finite(make_turn):
    turn = make_turn("t", n_tokens=1)
    with pytest.raises(ValueError, match="non-finite weighted token rewards"):
        run([Fn(const(1e38), weight=1e10)], [turn])


def _flaky_second_turn():
    failure = KeyError("judge down")

    async def flaky(interaction, ctx):
        if interaction.interaction_id == "second":
            raise failure
        return 1.0

    return failure, flaky


def test_one_bad_turn_rejects_the_scorer_and_keeps_earlier_scorers_by_default(make_turn):
    # AReaL's rule (commit_scope: scorer): a scorer commits once all its turns validated.
    first, second = make_turn("first"), make_turn("second")
    failure, flaky = _flaky_second_turn()
    with pytest.raises(KeyError) as caught:
        run([Fn(const(0.5)), Other(flaky)], [first, second])
    assert caught.value is failure  # the scorer's own error, not a wrapper
    # The failing scorer applied nothing, not even on the turn it scored; "fn" had committed.
    assert first.token_rewards.tolist() == [0.5, 0.5, 0.5]
    assert second.token_rewards.tolist() == [0.5, 0.5, 0.5]


def test_commit_scope_run_applies_nothing_unless_every_scorer_succeeds(make_turn):
    first, second = make_turn("first"), make_turn("second")
    failure, flaky = _flaky_second_turn()
    with pytest.raises(KeyError) as caught:
        run([Fn(const(0.5)), Other(flaky)], [first, second], config_kwargs={"commit_scope": "run"})
    assert caught.value is failure
    assert first.token_rewards is None and second.token_rewards is None


def test_none_rejects_the_trajectory(make_turn):
    turns = [make_turn("a"), make_turn("b")]

    async def refuse_b(interaction, ctx):
        return None if interaction.interaction_id == "b" else 1.0

    with pytest.raises(PRMRejectedError, match="1/2"):
        run([Fn(refuse_b)], turns)
    assert all(turn.token_rewards is None for turn in turns)


def test_every_turn_needs_a_model_response(make_turn):
    calls = []

    async def record(interaction, ctx):
        calls.append(interaction.interaction_id)
        return 0.0

    turn = make_turn("t")
    turn.model_response = None
    with pytest.raises(ValueError, match="no model_response"):
        run([Fn(record)], [make_turn("ok"), turn])
    assert calls == []


def test_a_turn_without_output_tokens_cannot_be_scored(make_turn):
    with pytest.raises(ValueError, match="output_len 0"):
        run([Fn(const(1.0))], [make_turn("t", n_tokens=0)])


def test_existing_token_rewards_must_fit_the_turn(make_turn):
    turn = make_turn("t", n_tokens=3, token_rewards=torch.zeros(4))
    with pytest.raises(ValueError, match=r"Existing token_rewards shape mismatch .*'t': expected \(3,\), got \(4,\)"):
        run([Fn(const(1.0))], [turn])
    turn.token_rewards = torch.tensor([0.0, float("nan"), 0.0])
    with pytest.raises(ValueError, match="Existing token_rewards contain non-finite values"):
        run([Fn(const(1.0))], [turn])


def test_disabled_scoring_changes_nothing(make_turn):
    turn = make_turn("t")
    assert run([Fn(const(1.0))], [turn], config_kwargs={"enabled": False}) == []
    assert run([Fn(const(1.0), enabled=False)], [turn]) == []
    assert run([], [turn]) == []
    assert turn.token_rewards is None


def test_turns_are_scored_concurrently_and_scorers_one_after_another(make_turn):
    turns = [make_turn(name) for name in "abc"]
    log = []

    async def scenario():
        everyone_in = asyncio.Barrier(len(turns))

        async def first(interaction, ctx):
            log.append(("first", interaction.interaction_id))
            await everyone_in.wait()  # deadlocks unless all turns run at once
            return 1.0

        async def second(interaction, ctx):
            log.append(("second", interaction.interaction_id))
            return 1.0

        runner = PRMRunner(PRMConfig(scorers=[Fn(first), Other(second)]))
        await asyncio.wait_for(runner.run(turns), timeout=5)

    asyncio.run(scenario())
    assert [scorer for scorer, _ in log] == ["first"] * 3 + ["second"] * 3


def test_ctx_carries_messages_and_is_eval_and_is_read_only(make_turn):
    seen = []

    async def look(interaction, ctx):
        seen.append(dict(ctx))
        with pytest.raises(TypeError):
            ctx["is_eval"] = False  # type: ignore[index]
        return 0.0

    caller_ctx = {"messages": [{"role": "user", "content": "hi"}]}
    run([Fn(look)], [make_turn("t")], caller_ctx, is_eval=True)
    assert seen == [{"messages": [{"role": "user", "content": "hi"}], "is_eval": True}]
    assert caller_ctx == {"messages": [{"role": "user", "content": "hi"}]}


def test_scorers_are_built_from_dotted_paths_with_weight_and_kwargs(make_turn):
    path = f"{Constant.__module__}.Constant"
    config = PRMConfig(scorers=[{"path": path, "weight": 2.0, "kwargs": {"value": 0.25}}])
    turn = make_turn("t", n_tokens=2)

    async def go():
        runner = PRMRunner(config)
        await runner.run([turn])
        return runner.scorers

    (scorer,) = asyncio.run(go())
    assert isinstance(scorer, Constant) and scorer.value == 0.25 and scorer.weight == 2.0
    assert turn.token_rewards.tolist() == [0.5, 0.5]


@pytest.mark.parametrize(
    ("path", "error", "match"),
    [
        ("no_such_package_xyz.Scorer", ImportError, r"scorers\[0\]\.path: cannot import"),
        (f"{__name__}.Missing", ImportError, "has no attribute 'Missing'"),
        ("Constant", ImportError, "not a dotted path"),
        ("collections.OrderedDict", TypeError, "not a BaseScorer subclass"),
    ],
)
def test_unresolvable_paths_are_reported(path, error, match):
    with pytest.raises(error, match=match):
        PRMRunner(PRMConfig(scorers=[{"path": path}]))


def test_two_classes_may_share_a_name_and_then_share_its_metrics(make_turn):
    # As AReaL: the name is the metric namespace, not an identity; both scorers run and add up.
    turn = make_turn("t", n_tokens=1)
    results = run([Constant(1.0), SameName(weight=0.5)], [turn])
    assert [r.scorer_name for r in results] == ["constant", "constant"]
    assert turn.token_rewards.tolist() == [1.5]


def _trajectory_run(fn, turns):
    return run([Whole(fn)], turns)


def test_trajectory_scorer_sees_parents_first_and_missing_ids_score_zero(make_turn):
    root = make_turn("root", n_tokens=1)
    child = make_turn("child", n_tokens=2, parent=root)
    seen = []

    async def judge(interactions, ctx):
        seen.extend(turn.interaction_id for turn in interactions)
        return {"child": torch.tensor([0.5, 1.0])}

    _trajectory_run(judge, [child, root])
    assert seen == ["root", "child"]
    assert root.token_rewards.tolist() == [0.0]
    assert child.token_rewards.tolist() == [0.5, 1.0]


@pytest.mark.parametrize(
    ("returned", "error", "match"),
    [
        ({"stranger": 1.0}, ValueError, r"unknown interaction IDs: \['stranger'\]"),
        (None, PRMRejectedError, "returned None for 2/2"),
        ({"a": None}, PRMRejectedError, "returned None for 1/2"),
        ([("a", 1.0)], TypeError, "must return a mapping"),
    ],
)
def test_trajectory_scorer_results_are_checked(make_turn, returned, error, match):
    turns = [make_turn("a"), make_turn("b")]

    async def judge(interactions, ctx):
        return returned

    with pytest.raises(error, match=match):
        _trajectory_run(judge, turns)
    assert all(turn.token_rewards is None for turn in turns)


@pytest.mark.parametrize("ids", [("a", "a"), ("a", None)])
def test_turn_ids_must_be_unique_and_present(make_turn, ids):
    turns = [make_turn("x"), make_turn("y")]
    for turn, turn_id in zip(turns, ids, strict=True):
        turn.interaction_id = turn_id

    async def judge(interactions, ctx):
        return {}

    with pytest.raises(ValueError, match="interaction"):
        _trajectory_run(judge, turns)


def _observation(target: str, *, aggregations=("count", "rate"), metric="ok") -> PRMMetricObservation:
    return PRMMetricObservation(
        metric_id=metric, scope="turn", target_id=target, value=True, value_type="boolean", aggregations=aggregations
    )


_per_turn_schema = {"a": ("count",), "b": ("rate",)}


@pytest.mark.parametrize(
    ("observations", "match"),
    [
        (lambda turn: [_observation("someone-else")], "targets 'someone-else'"),
        (lambda turn: [_observation(turn.interaction_id)] * 2, "duplicate structured metric observation"),
        (
            lambda turn: [_observation(turn.interaction_id, aggregations=_per_turn_schema[turn.interaction_id])],
            "inconsistent structured metric schema",
        ),
        (lambda turn: ["ok"], "PRMMetricObservation"),
    ],
)
def test_observations_are_checked(make_turn, observations, match):
    turns = [make_turn("a"), make_turn("b")]
    with pytest.raises((ValueError, TypeError), match=match):
        run([Observing()], turns, {"observations": observations})
    assert all(turn.token_rewards is None for turn in turns)


def test_observation_schema_stays_stable_across_runs(make_turn):
    async def go():
        runner = PRMRunner(PRMConfig(scorers=[Observing()]))
        failing = make_turn("failing", token_rewards=torch.zeros(2))  # wrong shape: run fails
        with pytest.raises(ValueError):
            await runner.run(
                [failing], {"observations": lambda t: [_observation(t.interaction_id, aggregations=("rate",))]}
            )
        # The failed run bound nothing, so this schema becomes the metric's schema.
        await runner.run([make_turn("a")], {"observations": lambda t: [_observation(t.interaction_id)]})
        changed = make_turn("b")
        with pytest.raises(ValueError, match="schema changed across runs"):
            await runner.run(
                [changed], {"observations": lambda t: [_observation(t.interaction_id, aggregations=("count",))]}
            )
        return changed

    assert asyncio.run(go()).token_rewards is None


@pytest.mark.parametrize(("scope", "committed"), [("scorer", [0.0, 0.0, 0.0]), ("run", None)])
def test_same_named_scorers_with_different_schemas_in_one_run_are_an_error(make_turn, scope, committed):
    class Mean(Observing):
        name = "shared"

    class Sum(Observing):
        name = "shared"

        def prepare_result(self, interaction, result, ctx):
            observation = PRMMetricObservation("q", "turn", interaction.interaction_id, 1.0, "float", ("sum",))
            return PRMScorerResult(reward=result, observations=(observation,))

    ctx = {"observations": lambda t: [PRMMetricObservation("q", "turn", t.interaction_id, 1.0, "float", ("mean",))]}
    turn = make_turn("t")
    with pytest.raises(ValueError, match="schema changed across runs for scorer 'shared'"):
        run([Mean(), Sum()], [turn], ctx, config_kwargs={"commit_scope": scope})
    # AReaL's rule keeps the first scorer's commit; `run` keeps nothing.
    assert (turn.token_rewards.tolist() if turn.token_rewards is not None else None) == committed
