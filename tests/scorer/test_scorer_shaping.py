"""Advantage shaping in the actor: roll, mask, modes, range check, configuration checks, folding."""

from __future__ import annotations

import pytest
import torch

from prm_distill.scorer import (
    check_shaping_mode,
    fold_turn_rewards,
    no_eos_rows,
    shape_advantages,
    shape_advantages_prerolled,
)

# The spec's worked check. Token loss mask [0,0,1,1,0,1,1,1]: two turns of 2 and 3 tokens. The
# actor holds it rolled by -1, on the positions that predict those tokens.
TOKEN_MASK = torch.tensor([[0, 0, 1, 1, 0, 1, 1, 1]])
ROLLED_MASK = torch.tensor([[0, 1, 1, 0, 1, 1, 1, 0]])
ACTIVE = [1, 2, 4, 5, 6]


def test_worked_check_additive():
    assert torch.equal(torch.roll(TOKEN_MASK, -1, dims=-1), ROLLED_MASK)
    # GAE with discount = lambda = 1, zero values and outcome reward 1 at the last active
    # position: every active advantage is 1, and returns = advantages + values = 1.
    advantages = ROLLED_MASK.float().clone()
    returns = advantages.clone()
    # -0.2 process reward on every token of the last turn, as the runner writes it.
    token_rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, -0.2, -0.2, -0.2]])

    shaped = shape_advantages(advantages, token_rewards, ROLLED_MASK, mode="additive")

    assert shaped[0, ACTIVE].tolist() == pytest.approx([1.0, 1.0, 0.8, 0.8, 0.8])
    assert shaped[0, [0, 3, 7]].tolist() == [0.0, 0.0, 0.0]  # inactive: the input advantages
    assert torch.equal(advantages, returns)  # inputs untouched, so the critic's returns stay 1


def test_additive_on_a_batch_with_dense_rewards():
    advantages = torch.tensor([[0.0, -1.0, -1.0, 7.0], [0.0, 0.5, 0.5, 0.5]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0]])
    token_rewards = torch.tensor([[0.0, 0.0, 0.3, 0.1], [0.0, 0.0, -0.5, 1.0]])
    # Rolled rewards: row 0 [0, 0.3, 0.1, 0], row 1 [0, -0.5, 1.0, 0]; position 3 is inactive.
    shaped = shape_advantages(advantages, token_rewards, mask, mode="additive")
    assert shaped[0].tolist() == pytest.approx([0.0, -0.7, -0.9, 7.0])
    assert shaped[1].tolist() == [0.0, 0.0, 1.5, 0.5]


def test_gvpo_piecewise_table():
    eps = 0.1
    advantages = torch.tensor([[-2.0, -eps, 0.0, eps, 2.0, 3.0, 4.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    # Rolled by -1 this is P = [-1, -1, -1, -1, -1, 0, -1, 0].
    token_rewards = torch.tensor([[0.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0, -1.0]])
    shaped = shape_advantages(
        advantages, token_rewards, mask, mode="gvpo", negative_scale=0.2, zero_penalty=0.4, zero_eps=eps
    )
    # A < -eps: A * 1.2; |A| <= eps: -0.4; A > eps: 0; P = 0: A; inactive: A.
    assert shaped[0].tolist() == pytest.approx([-2.4, -0.4, -0.4, -0.4, 0.0, 3.0, 4.0, 5.0])


def test_gvpo_defaults():
    advantages = torch.tensor([[-1.0, 0.0]])
    shaped = shape_advantages(advantages, torch.tensor([[-1.0, -1.0]]), torch.tensor([[1, 1]]), mode="gvpo")
    assert shaped[0].tolist() == pytest.approx([-1.2, -0.4])


def test_process_weighted_piecewise_table():
    advantages = torch.tensor([[-2.0, -1.0, 0.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    # Rolled by -1 this is P = [0, 0.25, 0.5, 0.25, 1, 2]; the 2 sits on an inactive position.
    token_rewards = torch.tensor([[2.0, 0.0, 0.25, 0.5, 0.25, 1.0]])
    shaped = shape_advantages(advantages, token_rewards, mask, mode="process_weighted")
    # A < 0 and P = 0: A; A < 0 and P > 0: P; A >= 0: A * P; inactive: A.
    assert shaped[0].tolist() == [-2.0, 0.25, 0.0, 0.5, 3.0, 4.0]


@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_process_weighted_needs_active_rewards_in_unit_interval(value):
    with pytest.raises(RuntimeError, match=r"\[0, 1\]"):
        shape_advantages(
            torch.ones(1, 2), torch.tensor([[0.0, value]]), torch.tensor([[1, 0]]), mode="process_weighted"
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "multiplicative"}, "unknown mode 'multiplicative'"),
        ({"mode": "gvpo", "negative_scale": -0.1}, "negative_scale"),
        ({"mode": "gvpo", "zero_eps": float("inf")}, "zero_eps"),
    ],
)
def test_bad_shaping_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        shape_advantages(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), **kwargs)


def test_tensors_must_be_aligned_and_finite():
    with pytest.raises(ValueError, match="shapes"):
        shape_advantages(torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3), mode="additive")
    with pytest.raises(ValueError, match="shapes"):
        shape_advantages(torch.zeros(3), torch.zeros(3), torch.ones(3), mode="additive")
    with pytest.raises(ValueError, match="finite"):
        shape_advantages(torch.zeros(1, 2), torch.tensor([[0.0, float("nan")]]), torch.ones(1, 2), mode="additive")


@pytest.mark.parametrize("mode", ["gvpo", "process_weighted"])
def test_piecewise_modes_need_direct_process_advantages(mode):
    with pytest.raises(ValueError, match="token_rewards_as_adv"):
        check_shaping_mode(mode, token_rewards_as_adv=False, mask_no_eos_with_zero=False)


def test_process_weighted_is_incompatible_with_mask_no_eos_with_zero():
    with pytest.raises(ValueError, match="mask_no_eos_with_zero"):
        check_shaping_mode("process_weighted", token_rewards_as_adv=True, mask_no_eos_with_zero=True)
    check_shaping_mode("gvpo", token_rewards_as_adv=True, mask_no_eos_with_zero=True)
    check_shaping_mode("additive", token_rewards_as_adv=False, mask_no_eos_with_zero=True)


def test_folded_rewards_count_once_at_each_turn_end():
    token_rewards = torch.tensor([[0.0, 0.0, 0.3, 0.3, 0.0, -0.2, -0.2, -0.2]])
    # Turns end at predicting positions 2 and 6.
    assert fold_turn_rewards(token_rewards, ROLLED_MASK).tolist() == [
        [0.0, 0.0, pytest.approx(0.3), 0.0, 0.0, 0.0, pytest.approx(-0.2), 0.0]
    ]


def test_folded_rewards_split_adjacent_turns_by_turn_id():
    # Token mask [0,1,1,1,1] and turn ids [-1,0,0,1,1], both rolled: two adjacent turns.
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    turn_ids = torch.tensor([[0, 0, 1, 1, -1]])
    token_rewards = torch.tensor([[0.0, 0.2, 0.2, 0.4, 0.4]])
    assert fold_turn_rewards(token_rewards, mask, turn_ids).tolist() == [
        [0.0, pytest.approx(0.2), 0.0, pytest.approx(0.4), 0.0]
    ]


def test_folding_refuses_a_reward_that_varies_within_a_turn():
    token_rewards = torch.tensor([[0.0, 0.0, 0.3, 0.3, 0.0, -0.2, -0.3, -0.2]])
    with pytest.raises(RuntimeError, match="uniform"):
        fold_turn_rewards(token_rewards, ROLLED_MASK)


def test_prerolled_helper_takes_arealss_token_advantages_and_agrees_with_ours():
    # The worked check again, through the helper that expects rewards ALREADY rolled and masked.
    advantages = ROLLED_MASK.float().clone()
    token_rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, -0.2, -0.2, -0.2]])
    rolled = torch.roll(token_rewards, -1, dims=-1) * ROLLED_MASK  # AReaL's token_advantages
    for mode in ("additive", "gvpo"):
        ours = shape_advantages(advantages, token_rewards, ROLLED_MASK, mode=mode)
        prerolled = shape_advantages_prerolled(advantages, rolled, ROLLED_MASK, mode=mode)
        assert torch.equal(ours, prerolled)
    shaped = shape_advantages_prerolled(advantages, rolled, ROLLED_MASK, mode="additive")
    assert shaped[0, ACTIVE].tolist() == pytest.approx([1.0, 1.0, 0.8, 0.8, 0.8])
    # Handing unrolled rewards to the pre-rolled helper puts the penalty one token late.
    late = shape_advantages_prerolled(advantages, token_rewards * ROLLED_MASK, ROLLED_MASK, mode="additive")
    assert late[0, ACTIVE].tolist() == pytest.approx([1.0, 1.0, 1.0, 0.8, 0.8])


def test_truncated_rows_get_no_process_reward_as_with_mask_no_eos_with_zero():
    advantages = torch.tensor([[0.0, -1.0, -1.0, 0.0], [0.0, -1.0, -1.0, 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0]])
    token_rewards = torch.tensor([[0.0, 0.0, -1.0, -1.0], [0.0, 0.0, -1.0, -1.0]])
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # row 0 fills the row: no EOS
    truncated = no_eos_rows(attention)
    assert truncated.tolist() == [True, False]
    shaped = shape_advantages(advantages, token_rewards, mask, mode="gvpo", truncated_rows=truncated)
    assert shaped[0].tolist() == [0.0, -1.0, -1.0, 0.0]  # truncated: the outcome advantage alone
    assert shaped[1].tolist() == pytest.approx([0.0, -1.2, -1.2, 0.0])  # failed tokens: A * (1 + 0.2)
    folded = fold_turn_rewards(token_rewards, mask, truncated_rows=truncated)
    assert folded.tolist() == [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0]]


def test_no_eos_rows_prefers_recorded_flags_like_the_actor():
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    assert no_eos_rows(attention, torch.tensor([False, True])).tolist() == [False, True]
    with pytest.raises(ValueError, match="one value per trajectory"):
        no_eos_rows(attention, torch.tensor([True]))
    with pytest.raises(ValueError, match=r"truncated_rows must be \[batch=1\]"):
        shape_advantages(
            torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), mode="additive", truncated_rows=torch.ones(2)
        )
