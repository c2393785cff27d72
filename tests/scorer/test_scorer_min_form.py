"""Min-form credit assignment (PURE): the advantage-shaping mode and the per-step rewrite for summing trainers.

Every expected number is worked by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch

from prm_distill.scorer import (
    PRMAdvantageShapingConfig,
    PRMConfigError,
    check_shaping_mode,
    load_prm_config,
    min_form_returns,
    min_form_step_rewards,
    shape_advantages,
    shape_advantages_prerolled,
)


def test_strict_min_form_return_is_the_weakest_future_reward():
    process = torch.tensor([[0.9, 0.2, 0.7, 0.5]])
    active = torch.ones_like(process, dtype=torch.bool)
    # suffix minima: min(.9,.2,.7,.5)=.2, min(.2,.7,.5)=.2, min(.7,.5)=.5, .5
    assert min_form_returns(process, active).tolist() == [[pytest.approx(0.2), pytest.approx(0.2), 0.5, 0.5]]


def test_inactive_positions_never_count_and_a_position_with_no_future_gets_zero():
    process = torch.tensor([[0.3, -5.0, 0.6, 0.0]])
    active = torch.tensor([[1, 0, 1, 0]]).bool()
    # the -5 and the trailing 0 are inactive: suffix minima over {0.3, 0.6} and {0.6}, nothing after index 2.
    assert min_form_returns(process, active).tolist() == [[pytest.approx(0.3), pytest.approx(0.6), pytest.approx(0.6), 0.0]]


def test_softmax_min_form_matches_the_hand_computed_weighted_mean():
    process = torch.tensor([[0.5, -0.5, 0.0]], dtype=torch.float64)
    active = torch.ones_like(process, dtype=torch.bool)
    out = min_form_returns(process, active, temperature=1.0)[0]
    # T = 1, weights exp(-P): position 2: only P=0 -> 0.
    # position 1: (e^0.5 * -0.5 + e^0 * 0) / (e^0.5 + 1) = -0.82436 / 2.64872 = -0.31123
    # position 0: (e^-0.5 * 0.5 + e^0.5 * -0.5 + 0) / (e^-0.5 + e^0.5 + 1) = -0.52109 / 3.25525 = -0.16008
    e = math.exp
    assert out[2].item() == 0.0
    assert out[1].item() == pytest.approx(-0.5 * e(0.5) / (e(0.5) + 1))
    assert out[0].item() == pytest.approx((0.5 * e(-0.5) - 0.5 * e(0.5)) / (e(-0.5) + e(0.5) + 1))
    assert out[1].item() == pytest.approx(-0.31123, abs=1e-5) and out[0].item() == pytest.approx(-0.16008, abs=1e-5)


def test_temperature_limits_are_the_minimum_and_the_mean():
    process = torch.tensor([[0.9, 0.2, 0.7, 0.5]])
    active = torch.ones_like(process, dtype=torch.bool)
    cold = min_form_returns(process, active, temperature=1e-4)
    assert cold[0].tolist() == pytest.approx(min_form_returns(process, active)[0].tolist(), abs=1e-6)
    hot = min_form_returns(process, active, temperature=1e6)[0]
    # suffix means: (.9+.2+.7+.5)/4 = .575, (.2+.7+.5)/3 = .4667, .6, .5
    assert hot.tolist() == pytest.approx([0.575, 1.4 / 3, 0.6, 0.5], abs=1e-5)


def test_step_rewrite_makes_every_suffix_sum_the_min_form_return():
    values = [0.9, 0.2, 0.7, 0.5]
    # returns m = [.2, .2, .5, .5] (suffix minima); d_k = m_k - m_{k+1}: [0, -.3, 0, .5]
    d = min_form_step_rewards(values)
    assert d.tolist() == pytest.approx([0.0, -0.3, 0.0, 0.5])
    assert d.sum().item() == pytest.approx(0.2)  # a summing estimator sees the weakest step
    # Farming: appending three more 0.9 steps raises a sum-form total by 2.7, the min-form total not at all.
    assert min_form_step_rewards(values + [0.9, 0.9, 0.9]).sum().item() == pytest.approx(0.2)


def test_min_form_shaping_adds_the_rolled_future_minimum_to_each_active_advantage():
    # token rewards on the tokens, as the runner writes them; rolled by -1 onto the predicting positions.
    loss_mask = torch.tensor([[0, 1, 1, 1, 0]])  # already rolled, as the actor holds it
    token_rewards = torch.tensor([[0.0, 0.8, 0.2, 0.6, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0]])
    shaped = shape_advantages(advantages, token_rewards, loss_mask, mode="min_form")
    # P = roll(-1) * mask = [0, 0.2, 0.6, 0, 0]: active positions 1..3 hold 0.2, 0.6, 0.0.
    # future minima at 1, 2, 3: min(.2,.6,0)=0, min(.6,0)=0, 0 -> shaped = A + 0 there; inactive keep A.
    assert shaped.tolist() == [[1.0, 1.0, 1.0, 1.0, 1.0]]
    token_rewards = torch.tensor([[0.0, 0.8, 0.2, 0.6, 0.4]])
    # P = [0, 0.2, 0.6, 0.4, 0] on positions 1..3: minima 0.2, 0.4, 0.4.
    shaped = shape_advantages(advantages, token_rewards, loss_mask, mode="min_form")
    assert shaped[0].tolist() == pytest.approx([1.0, 1.2, 1.4, 1.4, 1.0])
    prerolled = shape_advantages_prerolled(advantages, torch.tensor([[0.0, 0.2, 0.6, 0.4, 0.0]]), loss_mask, mode="min_form")
    assert prerolled.tolist() == shaped.tolist()


def test_min_form_needs_direct_process_advantages_and_a_valid_temperature():
    with pytest.raises(ValueError, match="token_rewards_as_adv=True"):
        check_shaping_mode("min_form", token_rewards_as_adv=False, mask_no_eos_with_zero=False)
    check_shaping_mode("min_form", token_rewards_as_adv=True, mask_no_eos_with_zero=True)
    with pytest.raises(ValueError, match="min_form_temperature"):
        shape_advantages(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), mode="min_form", min_form_temperature=0.0)


def test_min_form_is_configured_from_the_same_yaml():
    config = load_prm_config({"rollout": {"agent": {"prm": {
        "advantage_shaping": {"mode": "min_form", "min_form_temperature": 0.1}, "scorers": []}}}})
    assert config.advantage_shaping.mode == "min_form" and config.advantage_shaping.min_form_temperature == 0.1
    assert PRMAdvantageShapingConfig(mode="min_form").min_form_temperature is None  # null: the strict minimum
    with pytest.raises(PRMConfigError, match=r"advantage_shaping\.min_form_temperature: must be null"):
        load_prm_config({"rollout": {"agent": {"prm": {"advantage_shaping": {"mode": "min_form", "min_form_temperature": -1}}}}})
    with pytest.raises(PRMConfigError, match="advantage_shaping.mode"):
        load_prm_config({"rollout": {"agent": {"prm": {"advantage_shaping": {"mode": "min_form"}}}}, "actor": {"token_rewards_as_adv": False}})


def test_the_distilled_scorer_defaults_to_signed_spread_values_for_min_form(tiny_checkpoint):
    from prm_distill.scorer import DistilledPRMScorer, PRMConfig, PRMRunner

    scorer = DistilledPRMScorer(model=str(tiny_checkpoint), policy_tokenizer=str(tiny_checkpoint), device="cpu",
                                for_shaping_mode="min_form")
    assert (scorer.transform, scorer.placement) == ("signed", "spread")
    PRMRunner(PRMConfig(advantage_shaping={"mode": "min_form"}, scorers=[scorer]))  # accepted
    step_end = DistilledPRMScorer(engine=scorer._backend, policy_tokenizer=scorer.tokenizer, for_shaping_mode="additive")
    with pytest.raises(ValueError, match="min_form takes a minimum over tokens"):
        PRMRunner(PRMConfig(advantage_shaping={"mode": "min_form"}, scorers=[step_end]))
