"""The GRPO path: step-score aggregation, group normalisation, r_t = r_env + lambda * p."""

from __future__ import annotations

import pytest
import torch

from prm_distill.scorer import aggregate_step_scores, combine_step_rewards, group_normalize, prm_group_advantages


@pytest.mark.parametrize(
    ("method", "expected"),
    [("decayed_sum", 1.0 + 0.9 * 0.5 + 0.81 * 0.0), ("mean", 0.5), ("min", 0.0), ("last", 0.0)],
)
def test_step_scores_aggregate_per_trajectory(method, expected):
    assert aggregate_step_scores([1.0, 0.5, 0.0], method=method) == pytest.approx(expected)


def test_decay_one_is_the_plain_sum_and_decay_damps_long_trajectories():
    assert aggregate_step_scores([1.0, 0.5, 0.5], decay=1.0) == pytest.approx(2.0)
    # Padding with good-looking steps helps less and less: 1 + 0.5 + 0.25 with decay 0.5.
    assert aggregate_step_scores([1.0, 1.0, 1.0], decay=0.5) == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("scores", "kwargs"),
    [([], {}), ([1.0, float("nan")], {}), ([1.0], {"method": "max"}), ([1.0], {"decay": 0.0}), ([1.0], {"decay": 1.5})],
)
def test_bad_aggregation_inputs_are_refused(scores, kwargs):
    with pytest.raises(ValueError):
        aggregate_step_scores(scores, **kwargs)


def test_group_normalisation():
    # mean 2, unbiased std 1.
    assert group_normalize([1.0, 2.0, 3.0], eps=0.0).tolist() == [-1.0, 0.0, 1.0]
    assert group_normalize([1.0, 2.0, 3.0]).tolist() == pytest.approx([-1 / 1.00001, 0.0, 1 / 1.00001])
    assert group_normalize([0.7, 0.7]).tolist() == [0.0, 0.0]  # no spread, no signal
    assert group_normalize([0.7]).tolist() == [0.0]  # a group of one has no baseline


def test_prm_group_advantages_from_step_scores():
    # Means 1, 0, 0.5: mean 0.5, unbiased std sqrt((0.25 + 0.25 + 0) / 2) = 0.5.
    advantages = prm_group_advantages([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]], method="mean", eps=0.0)
    assert advantages.tolist() == [1.0, -1.0, 0.0]


def test_step_reward_adds_weighted_prm_score_with_clipping():
    env = torch.tensor([0.0, 0.0, 1.0])
    prm = torch.tensor([0.8, 2.0, 0.6])
    assert combine_step_rewards(env, prm).tolist() == pytest.approx([0.4, 1.0, 1.3])  # lambda 0.5
    assert combine_step_rewards(env, prm, lam=0.5, prm_clip=(0.0, 1.0)).tolist() == pytest.approx([0.4, 0.5, 1.3])
    assert combine_step_rewards(env, prm, lam=0.0).tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("prm", "kwargs"),
    [
        (torch.zeros(2), {}),
        (torch.zeros(3), {"lam": -0.5}),
        (torch.zeros(3), {"prm_clip": (1.0, 0.0)}),
        (torch.tensor([0.0, float("inf"), 0.0]), {}),
    ],
)
def test_bad_step_reward_inputs_are_refused(prm, kwargs):
    with pytest.raises(ValueError):
        combine_step_rewards(torch.zeros(3), prm, **kwargs)
