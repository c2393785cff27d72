"""LengthBudgetScorer: reward, observation, validation."""

from __future__ import annotations

import asyncio

import pytest

from prm_distill.scorer import LengthBudgetScorer, PRMMetricObservation


def test_reward_is_one_within_budget_and_zero_beyond(make_turn):
    scorer = LengthBudgetScorer(max_output_tokens=3)
    assert LengthBudgetScorer.name == "length_budget"
    assert asyncio.run(scorer.evaluate(make_turn("at", n_tokens=3), {})) == 1.0  # the budget is inclusive
    assert asyncio.run(scorer.evaluate(make_turn("over", n_tokens=4), {})) == 0.0


def test_result_reports_within_budget(make_turn):
    scorer = LengthBudgetScorer(max_output_tokens=3)
    result = asyncio.run(scorer.evaluate_result(make_turn("over", n_tokens=4), {}))
    assert result.reward == 0.0
    assert result.observations == (
        PRMMetricObservation(
            metric_id="within_budget",
            scope="turn",
            target_id="over",
            value=False,
            value_type="boolean",
            aggregations=("count", "rate"),
        ),
    )


@pytest.mark.parametrize("budget", [0, -1, 1.5, True, "128"])
def test_budget_must_be_a_positive_integer(budget):
    with pytest.raises(ValueError, match="max_output_tokens"):
        LengthBudgetScorer(max_output_tokens=budget)


def test_weight_and_enabled_reach_the_base():
    scorer = LengthBudgetScorer(max_output_tokens=8, weight=0.5, enabled=False)
    assert (scorer.weight, scorer.enabled) == (0.5, False)


def test_default_budget_is_arealss_128(make_turn):
    scorer = LengthBudgetScorer()
    assert scorer.max_output_tokens == 128
    assert asyncio.run(scorer.evaluate(make_turn("at", n_tokens=128), {})) == 1.0
    assert asyncio.run(scorer.evaluate(make_turn("over", n_tokens=129), {})) == 0.0


def test_arealss_example_path_resolves_to_ours(make_turn):
    # A trainer config written from AReaL's documentation runs unchanged here.
    from prm_distill.scorer import PRMConfig, PRMRunner

    config = PRMConfig(
        scorers=[{"path": "examples.prm.scorers.LengthBudgetScorer", "kwargs": {"max_output_tokens": 2}}]
    )
    runner = PRMRunner(config)
    (scorer,) = runner.scorers
    assert type(scorer) is LengthBudgetScorer and scorer.max_output_tokens == 2
    turn = make_turn("t", n_tokens=3)
    asyncio.run(runner.run([turn]))
    assert turn.token_rewards.tolist() == [0.0, 0.0, 0.0]
