"""Aggregation: the mean of {0, 0.5, 1} votes is the soft label; too few valid votes -> unsupervised;
several judges pool their votes and each one's agreement with the ensemble is reported."""

from __future__ import annotations

import pytest

from prm_distill.labeling.votes import aggregate_step, agreement, judge_agreement, majority


def test_soft_label_is_the_mean_and_agreement_the_share_of_the_majority():
    st = aggregate_step({"a": [1.0, 1.0, 0.5]}, min_valid=2)
    assert st.label == pytest.approx(2.5 / 3)
    assert st.majority == 1.0 and st.agreement == pytest.approx(2 / 3)
    assert aggregate_step({"a": [0.5, 0.5]}, 2).label == 0.5  # 0.5 stays 0.5


def test_too_few_valid_votes_leave_the_step_unsupervised():
    assert aggregate_step({"a": [1.0]}, min_valid=2).label is None
    assert aggregate_step({"a": [1.0], "b": [0.0]}, min_valid=2).label == 0.5  # judges pool their votes


def test_veto_forces_zero_whatever_the_votes():
    st = aggregate_step({"llm": [1.0, 1.0, 1.0], "arithmetic-verifier": [0.0]}, min_valid=2, veto=True)
    assert st.label == 0.0 and st.vetoed and st.votes == [1.0, 1.0, 1.0, 0.0]


def test_majority_ties_and_empty_votes_have_no_majority():
    assert majority([0.0, 1.0]) is None and majority([]) is None and agreement([]) is None


def test_per_judge_agreement_with_the_ensemble_majority():
    steps = [
        aggregate_step({"big": [1.0, 1.0], "small": [1.0]}, 2),   # ensemble 1; both agree
        aggregate_step({"big": [0.0, 0.0], "small": [1.0]}, 2),   # ensemble 0; small disagrees
        aggregate_step({"big": [0.0, 0.0], "small": [0.0]}, 2),   # ensemble 0; both agree
    ]
    assert judge_agreement(steps) == {"big": 1.0, "small": pytest.approx(2 / 3)}
