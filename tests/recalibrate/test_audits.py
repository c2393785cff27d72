"""The audits on real checkpoints built to reward length (or not), and on constructed scores."""

import math
import random

import numpy as np
import pytest

from prm_distill.recalibrate.audits import FILLERS, aggregate, pad, position_bias, restate, run_audits, self_preference, shortcuts, shorten, verbosity
from prm_distill.recalibrate.config import AuditSettings
from prm_distill.records import Trajectory, read_jsonl
from prm_distill.serve.engine import PRMEngine


def _scored(model_dir, path):
    engine = PRMEngine.from_checkpoint(model_dir, device="cpu")
    records = read_jsonl(path)
    return engine, records, engine.score([(r.question, r.steps) for r in records])


def test_pad_inserts_before_the_final_step_and_keeps_the_originals_in_order():
    steps = ["a = 1.", "b = 2.", "The answer is 3."]
    for kind in ("redundant", "filler"):
        out, ins = pad(steps, kind, 3, random.Random(0))
        assert len(out) == 6 and len(ins) == 3 and out[-1] == steps[-1]
        assert [s for j, s in enumerate(out) if j not in ins] == steps
        for j in ins:
            before = [out[i] for i in range(j) if i not in ins][-1]  # the original step the insertion follows
            assert out[j] in FILLERS if kind == "filler" else out[j] == restate(before)
    out, ins = pad(["Only step."], "redundant", 2, random.Random(0))
    assert out[-1] == "Only step." and ins == [0, 1]


def test_a_model_built_to_reward_length_is_flagged_and_a_neutral_one_is_not(position_models, correct_heldout):
    settings = AuditSettings(max_trajectories=12, n_inserted=2)
    engine, records, scores = _scored(position_models["rewards_length"], correct_heldout)
    # the model really rewards position: within every trajectory the scores rise step by step
    assert all(all(b > a for a, b in zip(ss, ss[1:])) for ss in scores)
    audit = run_audits(records, scores, engine, settings)
    verb = audit["verbosity"]
    assert "rewards_padding" in audit["flags"] and verb["flag"] and verb["n_trajectories"] == 12
    for kind in ("redundant", "filler"):
        k = verb["kinds"][kind]
        # the original steps moved to later positions, so each scores higher than before
        assert k["original_step_delta"] > 0.01
        for agg in ("mean", "last"):
            assert k["aggregations"][agg]["delta"] > settings.padding_tolerance and k["aggregations"][agg]["share_up"] == 1.0
        # the minimum is the first step, which padding never moves: unchanged
        assert k["aggregations"]["min"]["delta"] == pytest.approx(0.0, abs=1e-6)
        assert set(k["raised_by"]) == {"mean", "last"}
    assert audit["position_bias"]["slope"] > 0 and not audit["position_bias"]["flag"]

    engine, records, scores = _scored(position_models["neutral"], correct_heldout)
    p = 1 / (1 + math.exp(-0.8))  # constant P(good) = sigmoid(bias)
    assert np.allclose([s for ss in scores for s in ss], p, atol=1e-6)
    audit = run_audits(records, scores, engine, settings)
    assert audit["flags"] == []
    verb = audit["verbosity"]
    for kind in ("redundant", "filler"):
        aggs = verb["kinds"][kind]["aggregations"]
        for agg in ("min", "mean", "last"):
            assert abs(aggs[agg]["delta"]) < 1e-6
        assert aggs["prod"]["delta"] < 0  # n + 2 factors p < 1 instead of n
        assert verb["kinds"][kind]["inserted_step_mean"] == pytest.approx(p, abs=1e-6)
    assert abs(audit["position_bias"]["slope"]) < 1e-6


def test_neutral_product_change_is_the_closed_form(position_models, correct_heldout):
    settings = AuditSettings(max_trajectories=5, n_inserted=2)
    engine, records, scores = _scored(position_models["neutral"], correct_heldout)
    verb = verbosity(records, scores, engine, settings)
    p = 1 / (1 + math.exp(-0.8))
    # each padded product has two more factors p: after = p^2 * before, trajectory by trajectory
    before = verb["kinds"]["filler"]["aggregations"]["prod"]["before"]
    after = verb["kinds"]["filler"]["aggregations"]["prod"]["after"]
    assert after == pytest.approx(before * p**2, rel=1e-5)


def test_shorten_keeps_the_final_step_after_a_prefix_of_the_working():
    steps = ["a = 1.", "b = 2.", "c = 3.", "d = 4.", "The answer is 10."]
    assert shorten(steps, "answer_only", random.Random(0)) == ["The answer is 10."]
    cuts = {len(shorten(steps, "cut_short", random.Random(seed))) for seed in range(40)}
    assert cuts == {2, 3, 4}  # 1 to 3 of the 4 working steps kept, then the answer: something is always dropped
    for seed in range(5):
        out = shorten(steps, "cut_short", random.Random(seed))
        assert out[:-1] == steps[: len(out) - 1] and out[-1] == steps[-1]
    with pytest.raises(ValueError, match="3 or more steps, got 2"):
        shorten(steps[:2], "answer_only", random.Random(0))
    with pytest.raises(ValueError, match="unknown shortcut kind"):
        shorten(steps, "skip", random.Random(0))


def test_a_model_harsher_on_later_steps_rewards_shortcuts_and_the_others_do_not(position_models, correct_heldout):
    """Dropping steps moves the final step to an earlier position: a scorer that is harsher later pays the shortened
    trajectory more, one that rewards length pays it less, a constant one the same (prod aside)."""
    settings = AuditSettings(max_trajectories=12)
    engine, records, scores = _scored(position_models["harsher_later"], correct_heldout)
    short = shortcuts(records, scores, engine, settings)
    n = sum(len(r.steps) >= 3 for r in records)
    assert short["flag"] and short["n_trajectories"] == min(12, n) > 0
    # answer_only: the final step read right after the question, earlier than in the original, where it was the
    # latest and so the lowest step: min and last rise
    assert {"min", "last"} <= set(short["kinds"]["answer_only"]["raised_by"])
    assert short["kinds"]["answer_only"]["steps_kept"] == 1
    assert "rewards_shortcuts" in run_audits(records, scores, engine, settings)["flags"]

    engine, records, scores = _scored(position_models["rewards_length"], correct_heldout)
    short = shortcuts(records, scores, engine, settings)
    assert not short["flag"]
    for kind in ("answer_only", "cut_short"):
        assert short["kinds"][kind]["aggregations"]["last"]["delta"] < 0  # the final step moved earlier: scored lower

    engine, records, scores = _scored(position_models["neutral"], correct_heldout)
    short = shortcuts(records, scores, engine, settings)
    p = 1 / (1 + math.exp(-0.8))
    assert not short["flag"]
    for kind in ("answer_only", "cut_short"):
        aggs = short["kinds"][kind]["aggregations"]
        assert all(abs(aggs[a]["delta"]) < 1e-6 for a in ("min", "mean", "last"))
        assert aggs["prod"]["delta"] > 0  # fewer factors p < 1: the reason prod is not judged
    # answer_only keeps one factor: its product is p, whatever the length before
    assert short["kinds"]["answer_only"]["aggregations"]["prod"]["after"] == pytest.approx(p, abs=1e-6)


def test_shortcuts_need_trajectories_of_three_steps():
    recs = [Trajectory(id="t", question="q?", steps=["a", "b"], labels=[1.0, 1.0])]
    short = shortcuts(recs, [[0.5, 0.5]], None, AuditSettings())  # nothing to shorten: the scorer is never called
    assert short["n_trajectories"] == 0 and not short["flag"] and "3 or more steps" in short["note"]


def test_position_bias_flags_a_model_harsher_on_later_steps(position_models, correct_heldout):
    engine, records, scores = _scored(position_models["harsher_later"], correct_heldout)
    pos = position_bias(records, scores, AuditSettings(position_bins=5, position_slope_bound=-0.1))
    assert pos["flag"] and pos["slope"] < -0.1
    means = [b["mean_score"] for b in pos["bins"] if b["n"]]
    assert means == sorted(means, reverse=True)  # falls bin by bin
    assert not position_bias(records, scores, AuditSettings(position_slope_bound=pos["slope"] - 0.01))["flag"]


def test_position_slope_is_least_squares_on_relative_position():
    recs = [Trajectory(id=f"t{i}", question="q?", steps=["a", "b", "c"], labels=[1.0, 1.0, 1.0]) for i in range(2)]
    # scores 0.9, 0.7, 0.5 at positions 0, 0.5, 1: slope -0.4 exactly
    pos = position_bias(recs, [[0.9, 0.7, 0.5]] * 2, AuditSettings(position_slope_bound=-0.1))
    assert pos["slope"] == pytest.approx(-0.4) and pos["flag"]
    assert not position_bias(recs, [[0.9, 0.7, 0.5]] * 2, AuditSettings(position_slope_bound=-0.4))["flag"]  # at the bound: not below


def test_self_preference_compares_generators_on_shared_problems():
    def rec(i, q, gen, labels):
        return Trajectory(id=f"r{i}", question=q, steps=["s"] * len(labels), labels=labels, metadata={"generator": gen})

    recs = [rec(0, "Q1", "ours", [1.0, 1.0]), rec(1, "Q1", "other", [1.0, 1.0]), rec(2, "Q2", "ours", [1.0, 0.0]),
            rec(3, "Q2", "other", [1.0, 0.0]), rec(4, "Q3", "ours", [1.0])]  # Q3 only one generator: left out
    scores = [[0.9, 0.9], [0.6, 0.8], [0.8, 0.6], [0.4, 0.2], [0.1]]
    out = self_preference(recs, scores)
    assert out["n_problems"] == 2
    assert out["generators"]["ours"]["n"] == 2 and out["generators"]["ours"]["mean_score"] == pytest.approx((0.9 + 0.7) / 2)
    assert out["generators"]["other"]["mean_score"] == pytest.approx((0.7 + 0.3) / 2)
    assert out["generators"]["ours"]["mean_label"] == out["generators"]["other"]["mean_label"] == pytest.approx(0.75)
    assert out["score_spread"] == pytest.approx(0.3)
    assert self_preference([Trajectory(id="x", question="q", steps=["s"])], [[0.5]]) is None


def test_aggregations():
    assert aggregate([0.5, 0.8, 1.0]) == pytest.approx({"min": 0.5, "mean": 2.3 / 3, "prod": 0.4, "last": 1.0})
