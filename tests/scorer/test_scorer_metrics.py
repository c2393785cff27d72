"""Metric names (AReaL's), weighting, `__count` keys, namespaces and merging across workers."""

from __future__ import annotations

import asyncio
import json

import pytest

from prm_distill.scorer import (
    BaseScorer,
    LengthBudgetScorer,
    PRMConfig,
    PRMMetricObservation,
    PRMMetrics,
    PRMRunner,
    PRMScorerResult,
    PRMTurnResult,
    process_metrics,
    record_prm_results,
    score_branches,
)


class Judge(BaseScorer):
    """A scorer with a path-unsafe name reporting a float and a trajectory observation."""

    name = "judge/v2"

    async def evaluate(self, interaction, ctx):
        return 1.0

    def prepare_result(self, interaction, result, ctx):
        steps = interaction.model_response.output_len
        observations = [
            PRMMetricObservation("steps per turn", "turn", interaction.interaction_id, steps, "float", ("sum", "mean"))
        ]
        if interaction.parent is not None:  # one trajectory observation per branch, on its last turn
            observations.append(
                PRMMetricObservation("100% solved", "trajectory", "branch-1", True, "boolean", ("rate",))
            )
        return PRMScorerResult(reward=result, observations=tuple(observations))


def score_branch(runner, turns, **kwargs):
    return asyncio.run(runner.run(turns, **kwargs))


def test_reward_metrics_are_weighted_and_observations_are_not(make_turn):
    runner = PRMRunner(PRMConfig(scorers=[LengthBudgetScorer(max_output_tokens=2, weight=3.0)]))
    score_branch(runner, [make_turn("a", n_tokens=1), make_turn("b", n_tokens=3)])
    # A single run publishes turn metrics only: trajectory rewards come from branch scoring.
    assert runner.metrics.summary() == {
        "rollout/prm_turn_reward/length_budget": 1.5,  # mean of 3.0 and 0.0
        "rollout/prm_turn_reward/length_budget__count": 2,
        "rollout/prm_metric/turn/length_budget/within_budget/observed_count": 2.0,
        "rollout/prm_metric/turn/length_budget/within_budget/count": 1.0,  # turns within budget
        "rollout/prm_metric/turn/length_budget/within_budget/rate": 0.5,  # unweighted
        "rollout/prm_metric/turn/length_budget/within_budget/rate__count": 2,
    }


def test_trajectory_reward_is_per_branch_and_only_from_branch_scoring(make_turn):
    runner = PRMRunner(PRMConfig(scorers=[LengthBudgetScorer(max_output_tokens=2)]))
    root = make_turn("root", n_tokens=1)
    tree = [root, make_turn("a", n_tokens=1, parent=root), make_turn("b", n_tokens=5, parent=root)]
    asyncio.run(score_branches(tree, runner))  # branch a: 1 + 1 = 2; branch b: 1 + 0 = 1
    summary = runner.metrics.summary()
    assert summary["rollout/prm_trajectory_reward/length_budget"] == 1.5  # mean over 2 branches
    assert summary["rollout/prm_trajectory_reward/length_budget__count"] == 2
    assert summary["rollout/prm_turn_reward/length_budget"] == pytest.approx(3 / 4)  # root counted per branch
    assert summary["rollout/prm_turn_reward/length_budget__count"] == 4


def test_reward_keys_keep_the_name_and_observation_segments_are_url_quoted(make_turn):
    runner = PRMRunner(PRMConfig(scorers=[Judge()]))
    root = make_turn("a", n_tokens=2)
    score_branch(runner, [root, make_turn("b", n_tokens=4, parent=root)], is_eval=True)
    summary = runner.metrics.summary()
    turn_base = "eval-rollout/prm_metric/turn/judge%2Fv2/steps%20per%20turn"
    assert summary[f"{turn_base}/sum"] == 6.0
    assert summary[f"{turn_base}/mean"] == 3.0
    assert summary[f"{turn_base}/mean__count"] == 2
    assert summary[f"{turn_base}/observed_count"] == 2.0
    assert f"{turn_base}/sum__count" not in summary  # sums and counts add: no sample count
    assert summary["eval-rollout/prm_metric/trajectory/judge%2Fv2/100%25%20solved/rate"] == 1.0
    assert summary["eval-rollout/prm_turn_reward/judge/v2"] == 1.0  # as AReaL writes it
    assert not any(key.startswith("rollout/") for key in summary)  # evaluation has its own namespace


def test_merged_workers_weight_means_by_observation_count(make_turn):
    def worker(token_counts):
        runner = PRMRunner(PRMConfig(scorers=[LengthBudgetScorer(max_output_tokens=2)]))
        asyncio.run(score_branches([make_turn(f"t{i}", n_tokens=n) for i, n in enumerate(token_counts)], runner))
        # What a worker ships: its summary as JSON; the `__count` keys carry the weights.
        return PRMMetrics.from_summary(json.loads(json.dumps(runner.metrics.summary())))

    merged = worker([1, 2, 9])  # within budget: yes, yes, no
    merged.merge(worker([9]))  # no
    summary = merged.summary()
    base = "rollout/prm_metric/turn/length_budget/within_budget"
    assert summary[f"{base}/rate"] == 0.5  # 2 of 4, not the mean of 2/3 and 0
    assert summary[f"{base}/rate__count"] == 4
    assert summary[f"{base}/count"] == 2.0  # counts add
    assert summary[f"{base}/observed_count"] == 4.0
    assert summary["rollout/prm_turn_reward/length_budget"] == 0.5
    assert summary["rollout/prm_trajectory_reward/length_budget"] == 0.5  # four one-turn branches: 1, 1, 0, 0


def test_nothing_is_recorded_for_failed_or_unrecorded_runs(make_turn):
    runner = PRMRunner(PRMConfig(scorers=[LengthBudgetScorer(max_output_tokens=2)]))
    score_branch(runner, [make_turn("a")], record_metrics=False)
    broken = make_turn("b")
    broken.model_response = None
    with pytest.raises(ValueError):
        score_branch(runner, [make_turn("c"), broken])
    assert runner.metrics.summary() == {}


def test_a_metric_keeps_its_kind_when_merging():
    left = PRMMetrics.from_summary({"rollout/x": 1.0, "rollout/x__count": 1})
    with pytest.raises(ValueError, match="is a mean"):
        left.merge(PRMMetrics.from_summary({"rollout/x": 1.0}))
    with pytest.raises(ValueError, match="no mean"):
        PRMMetrics.from_summary({"rollout/y__count": 3})


def test_record_prm_results_publishes_committed_results_where_asked():
    result = PRMTurnResult(scorer_name="judge", reward=-0.5)
    mine = PRMMetrics()
    record_prm_results([result], is_eval=True, metrics=mine)
    assert mine.summary() == {
        "eval-rollout/prm_turn_reward/judge": -0.5,
        "eval-rollout/prm_turn_reward/judge__count": 1,
    }
    # Without a sink, as AReaL's global tracker: the process-wide metrics.
    before = process_metrics().summary().get("rollout/prm_turn_reward/judge__count", 0)
    record_prm_results([result])
    assert process_metrics().summary()["rollout/prm_turn_reward/judge__count"] == before + 1
