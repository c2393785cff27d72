"""The PROF-style process-consistency filter: drop correct answers with flawed steps and wrong ones the PRM likes."""

from __future__ import annotations

import pytest
import torch

from prm_distill.scorer import filter_process_consistent, process_consistency_mask


def _group():
    # Four responses: outcome 1, 1, 0, 0; process scores 0.9, 0.3, 0.2, 0.8.
    return {
        "rewards": torch.tensor([1.0, 1.0, 0.0, 0.0]),
        "process_scores": torch.tensor([0.9, 0.3, 0.2, 0.8]),
        "input_ids": torch.arange(8).reshape(4, 2),
        "texts": ["a", "b", "c", "d"],
        "group_id": 7,
    }


def test_correct_low_and_incorrect_high_responses_are_dropped():
    # correct & 0.9 >= 0.5 keep; correct & 0.3 < 0.5 drop; wrong & 0.2 <= 0.5 keep; wrong & 0.8 > 0.5 drop.
    assert process_consistency_mask(_group()).tolist() == [True, False, True, False]


def test_the_kept_rows_are_selected_from_every_per_response_field():
    kept = filter_process_consistent(_group())
    assert kept is not None
    assert kept["rewards"].tolist() == [1.0, 0.0]
    assert kept["input_ids"].tolist() == [[0, 1], [4, 5]]
    assert kept["texts"] == ["a", "c"] and kept["group_id"] == 7


def test_thresholds_are_configurable():
    # correct_min 0.2 keeps the 0.3 correct one; incorrect_max 0.9 keeps the 0.8 wrong one.
    assert process_consistency_mask(_group(), correct_min=0.2, incorrect_max=0.9).tolist() == [True, True, True, True]


def test_process_scores_default_to_the_weakest_active_token_reward():
    group = {
        "rewards": torch.tensor([1.0, 0.0]),
        "token_rewards": torch.tensor([[0.9, 0.4, 0.0], [0.1, 0.2, 0.95]]),
        "loss_mask": torch.tensor([[1, 1, 0], [1, 1, 0]]),
    }
    # active minima: row 0 min(0.9, 0.4) = 0.4 -> a correct answer below 0.5: dropped;
    # row 1 min(0.1, 0.2) = 0.1 (the inactive 0.95 does not count): wrong and low, kept.
    assert process_consistency_mask(group).tolist() == [False, True]
    # mean instead: row 0 (0.9 + 0.4) / 2 = 0.65 kept.
    assert process_consistency_mask(group, agg="mean").tolist() == [True, True]


def test_a_group_left_without_outcome_variance_is_dropped_whole():
    group = _group()
    group["process_scores"] = torch.tensor([0.9, 0.8, 0.9, 0.8])  # both wrong answers look good: dropped
    assert filter_process_consistent(group) is None  # two correct ones left: no advantage to learn from


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"process_scores": torch.tensor([0.5, 0.5])}, "one per response"),
        ({"process_scores": None}, "needs 'process_scores'"),
        ({"rewards": torch.tensor([1.0, float("nan"), 0.0, 0.0])}, "finite"),
    ],
)
def test_bad_groups_get_a_clear_error(change, match):
    group = {**_group(), **change}
    with pytest.raises(ValueError, match=match):
        process_consistency_mask(group)
