"""The contract's data objects and base classes."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch

from prm_distill.scorer import (
    BaseScorer,
    BaseTrajectoryScorer,
    Interaction,
    ModelResponse,
    PRMMetricObservation,
    PRMScorerResult,
    PRMTurnResult,
)


class Half(BaseScorer):
    name = "half"

    async def evaluate(self, interaction, ctx):
        return 0.5


class Refuses(BaseScorer):
    name = "refuses"

    async def evaluate(self, interaction, ctx):
        return None


def test_interaction_carries_the_contract_fields():
    parent = Interaction(interaction_id="p", model_response=ModelResponse(output_tokens=[5]))
    turn = Interaction(
        interaction_id="t",
        parent=parent,
        messages=[{"role": "user", "content": "2+2?"}],
        output_message_list=[{"role": "assistant", "content": "4"}],
        model_response=ModelResponse(input_tokens=[1, 2, 3], output_tokens=[7, 8]),
        reward=1.0,
        token_rewards=torch.zeros(2),
    )
    assert turn.parent is parent
    assert turn.model_response.input_tokens == [1, 2, 3]
    assert turn.model_response.output_len == 2  # always len(output_tokens)
    assert turn.reward == 1.0 and turn.token_rewards.shape == (2,)
    # Tree nodes compare by identity: equal fields are still two different turns.
    assert Interaction(interaction_id="x") != Interaction(interaction_id="x")


def _obs(**overrides):
    values = {
        "metric_id": "m",
        "scope": "turn",
        "target_id": "t",
        "value": True,
        "value_type": "boolean",
        "aggregations": ("count", "rate"),
    }
    values.update(overrides)
    return PRMMetricObservation(**values)


def test_valid_observations_are_accepted_and_aggregations_become_a_tuple():
    assert _obs().aggregations == ("count", "rate")
    floats = _obs(value=3, value_type="float", aggregations=["sum", "mean"], scope="trajectory")
    assert floats.aggregations == ("sum", "mean") and floats.value == 3


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"aggregations": ("sum",)}, ValueError),  # booleans allow only count and rate
        ({"value": 1}, TypeError),  # booleans must be real bools
        ({"value_type": "float", "value": 1.0, "aggregations": ("rate",)}, ValueError),  # floats: sum, mean
        ({"value_type": "float", "value": True, "aggregations": ("sum",)}, TypeError),
        ({"value_type": "float", "value": float("nan"), "aggregations": ("mean",)}, ValueError),
        ({"value_type": "float", "value": "1", "aggregations": ("mean",)}, TypeError),
        ({"metric_id": ""}, ValueError),
        ({"target_id": "  "}, ValueError),
        ({"aggregations": ()}, ValueError),
        ({"aggregations": ("count", "count")}, ValueError),
        ({"scope": "session"}, ValueError),
        ({"value_type": "int"}, ValueError),
    ],
)
def test_invalid_observations_are_refused(overrides, error):
    with pytest.raises(error):
        _obs(**overrides)


def test_results_are_frozen_and_default_to_no_observations():
    result = PRMScorerResult(reward=0.0)
    assert result.observations == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.reward = 1.0  # type: ignore[misc]
    turn = PRMTurnResult(scorer_name="s", reward=0.5)
    assert turn.observations == ()


def test_scorer_needs_a_name():
    class Nameless(BaseScorer):
        async def evaluate(self, interaction, ctx):
            return 0.0

    with pytest.raises(ValueError, match="name"):
        Nameless()


def test_scorer_constructor_checks_its_arguments():
    scorer = Half(weight=2, enabled=False)
    assert (scorer.weight, scorer.enabled) == (2.0, False)
    with pytest.raises(TypeError, match="max_tokens"):
        Half(max_tokens=3)  # a misspelt kwarg is not silently dropped
    with pytest.raises(ValueError, match="weight"):
        Half(weight=float("inf"))
    with pytest.raises(TypeError, match="enabled"):
        Half(enabled="sometimes")
    with pytest.raises(TypeError, match="weight"):
        Half(weight=True)  # a bool weight is a mistake, not 1.0


def test_scorer_constructor_coerces_as_areal_does():
    # AReaL applies float(weight) and bool(enabled); YAML/CLI overrides arrive as strings or 0/1.
    scorer = Half(weight="0.5", enabled=0)
    assert (scorer.weight, scorer.enabled) == (0.5, False)
    assert Half(enabled="false").enabled is False and Half(enabled=1).enabled is True


def test_score_applies_the_weight_for_callers_outside_the_runner(make_turn):
    turn = make_turn("t")
    assert asyncio.run(Half(weight=3.0).score(turn, {})) == 1.5
    assert asyncio.run(Refuses().score(turn, {})) is None


def test_evaluate_result_wraps_the_unweighted_reward(make_turn):
    turn = make_turn("t")
    result = asyncio.run(Half(weight=3.0).evaluate_result(turn, {}))
    assert result == PRMScorerResult(reward=0.5, observations=())  # weight is the runner's job
    assert asyncio.run(Refuses().evaluate_result(turn, {})) is None
    assert asyncio.run(Half().aclose()) is None  # optional hook, no-op by default


def test_trajectory_scorer_cannot_be_evaluated_per_turn(make_turn):
    class Whole(BaseTrajectoryScorer):
        name = "whole"

    with pytest.raises(RuntimeError, match="whole trajectories"):
        asyncio.run(Whole().evaluate(make_turn("t"), {}))
