"""The one aggregation module: every method against hand-computed numbers, and GRPO delegating to it."""

from __future__ import annotations

import pytest
import torch

from prm_distill.aggregate import AGGREGATIONS, aggregate, aggregate_all
from prm_distill.scorer import aggregate_step_scores

SCORES = [0.9, 0.5, 0.8]


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("min", 0.5),
        ("prod", 0.9 * 0.5 * 0.8),  # 0.36
        ("last", 0.8),
        ("mean", (0.9 + 0.5 + 0.8) / 3),  # 0.7333...
        # weights 1, 0.5, 0.25 (gamma 0.5) normalised by their sum 1.75: (0.9 + 0.25 + 0.2) / 1.75
        ("discounted", 1.35 / 1.75),
    ],
)
def test_each_method_by_hand(method, expected):
    assert aggregate(SCORES, method, gamma=0.5) == pytest.approx(expected)


def test_discounted_is_normalised_so_padding_with_good_steps_does_not_pay():
    # Unnormalised, a long trajectory of 0.8s beats a short one of 0.9s; normalised it cannot.
    short, padded = [0.9, 0.9], [0.9, 0.9, 0.8, 0.8, 0.8, 0.8]
    assert aggregate(padded, "discounted", gamma=0.9, normalize=False) > aggregate(short, "discounted", gamma=0.9, normalize=False)
    assert aggregate(padded, "discounted", gamma=0.9) < aggregate(short, "discounted", gamma=0.9)
    # gamma = 1 is the mean; a constant trajectory aggregates to that constant whatever its length
    assert aggregate(SCORES, "discounted", gamma=1.0) == pytest.approx(aggregate(SCORES, "mean"))
    assert aggregate([0.7] * 9, "discounted", gamma=0.8) == pytest.approx(0.7)


def test_aggregate_all_and_single_step():
    assert aggregate_all([0.25]) == {m: pytest.approx(0.25) for m in AGGREGATIONS}


@pytest.mark.parametrize(
    ("scores", "kwargs"),
    [([], {}), ([0.5, float("nan")], {}), ([[0.5]], {}), ([0.5], {"method": "max"}), ([0.5], {"gamma": 0.0}), ([0.5], {"gamma": 1.5})],
)
def test_bad_input_is_refused(scores, kwargs):
    with pytest.raises(ValueError):
        aggregate(scores, **kwargs)


def test_grpo_helper_delegates_to_the_one_module():
    t = torch.tensor([1.0, 0.5, 0.0])
    # its decayed_sum is the unnormalised discounted sum: 1 + 0.9 * 0.5
    assert aggregate_step_scores(t) == pytest.approx(1.45) == aggregate(t.numpy(), "discounted", gamma=0.9, normalize=False)
    for method in AGGREGATIONS:
        assert aggregate_step_scores(t, method=method, decay=0.7) == pytest.approx(aggregate([1.0, 0.5, 0.0], method, gamma=0.7))
