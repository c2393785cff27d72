"""Group filters that keep mixed groups and all-wrong groups with an active process penalty."""

from __future__ import annotations

import pytest
import torch

from prm_distill.scorer import filter_mixed_or_penalized_all_wrong, filter_mixed_or_penalized_all_wrong_mask_no_eos

BOTH = [filter_mixed_or_penalized_all_wrong, filter_mixed_or_penalized_all_wrong_mask_no_eos]
# Two rows of 4 tokens: 1 prompt token, then 2 response tokens, then padding.
MASK = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0]])
ATTENTION = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])  # both ended with EOS before the padding


def group(rewards, token_rewards=None, **extra):
    data = {"rewards": torch.tensor(rewards), "loss_mask": MASK, "attention_mask": ATTENTION, **extra}
    if token_rewards is not None:
        data["token_rewards"] = torch.tensor(token_rewards)
    return data


@pytest.mark.parametrize("keep", BOTH)
def test_mixed_outcomes_are_kept(keep):
    assert keep(group([1.0, 0.0]))
    assert keep(group([0.0, -1.0]))


@pytest.mark.parametrize("keep", BOTH)
def test_all_correct_groups_are_dropped_even_with_penalties(keep):
    assert not keep(group([1.0, 1.0], [[0, -0.5, 0, 0], [0, 0, 0, 0]]))


@pytest.mark.parametrize("keep", BOTH)
def test_all_wrong_groups_need_an_active_negative_process_reward(keep):
    assert not keep(group([0.0, 0.0]))  # no process rewards at all
    assert not keep(group([0.0, 0.0], [[0, 0.5, 0.5, 0], [0, 0, 0, 0]]))  # nothing negative
    assert not keep(group([0.0, 0.0], [[-1.0, 0, 0, 0], [0, 0, 0, -1.0]]))  # prompt and padding only
    assert keep(group([0.0, 0.0], [[0, 0, -0.5, 0], [0, 0, 0, 0]]))


def test_outcome_rewards_before_normalisation_take_precedence():
    normalised_away = group([0.0, 0.0], original_rewards=torch.tensor([1.0, 0.0]))
    assert filter_mixed_or_penalized_all_wrong(normalised_away)


def test_no_eos_variant_ignores_penalties_on_truncated_rows():
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # row 0 fills the row: no EOS
    penalised_truncated = group([0.0, 0.0], [[0, -0.5, 0, 0], [0, 0, 0, 0]], attention_mask=attention)
    assert filter_mixed_or_penalized_all_wrong(penalised_truncated)
    assert not filter_mixed_or_penalized_all_wrong_mask_no_eos(penalised_truncated)
    penalised_complete = group([0.0, 0.0], [[0, 0, 0, 0], [0, -0.5, 0, 0]], attention_mask=attention)
    assert filter_mixed_or_penalized_all_wrong_mask_no_eos(penalised_complete)


def test_no_eos_variant_reads_truncation_from_the_attention_mask_as_areal_does():
    # AReaL's filter decides by attention_mask alone: a flag the mask contradicts does not count.
    flagged = group([0.0, 0.0], [[0, -0.5, 0, 0], [0, 0, 0, 0]], is_truncated=torch.tensor([True, False]))
    assert filter_mixed_or_penalized_all_wrong_mask_no_eos(flagged)  # row 0 ends before the padding: has EOS
    without_mask = {k: v for k, v in flagged.items() if k != "attention_mask"}
    with pytest.raises(ValueError, match="requires attention_mask"):
        filter_mixed_or_penalized_all_wrong_mask_no_eos(without_mask)
    misshapen = group([0.0, 0.0], [[0, -0.5, 0, 0], [0, 0, 0, 0]], attention_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="matching shapes"):
        filter_mixed_or_penalized_all_wrong_mask_no_eos(misshapen)


@pytest.mark.parametrize(
    "data",
    [
        {"loss_mask": MASK},  # no rewards
        group([0.0, 0.0], [[0.0, -1.0, 0.0], [0.0, 0.0, 0.0]]),  # token_rewards do not match loss_mask
        group([float("nan"), 0.0]),
    ],
)
def test_malformed_groups_are_refused(data):
    with pytest.raises(ValueError):
        filter_mixed_or_penalized_all_wrong(data)
