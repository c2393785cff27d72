"""Answer anchoring with math-verify and the consensus rules."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify")

from prm_distill.labeling.anchor import anchor, final_answer_correct  # noqa: E402
from prm_distill.labeling.config import AnchorConfig  # noqa: E402
from prm_distill.records import Trajectory  # noqa: E402


def _rec(last: str, labels, answer="14") -> Trajectory:
    return Trajectory(id="a", question="q", steps=["3 + 4 = 7.", "7 x 2 = 14.", last], labels=labels, metadata={"answer": answer})


def test_final_answers_are_compared_mathematically():
    assert final_answer_correct(["The answer is 14."], "14") is True
    assert final_answer_correct(["So the answer is \\boxed{\\frac{1}{2}}."], "0.5") is True
    assert final_answer_correct(["The answer is 15."], "14") is False
    assert final_answer_correct(["We are done."], "14") is None


def test_wrong_answer_with_every_step_judged_good_is_dropped():
    r, ok = anchor(_rec("The answer is 15.", [1.0, 1.0, 1.0]), AnchorConfig())
    assert r is None and ok is False
    unjudged, _ = anchor(_rec("The answer is 15.", [1.0, 1.0, None]), AnchorConfig())
    assert unjudged is None  # unsupervised steps neither save nor sink a record
    kept, ok = anchor(_rec("The answer is 15.", [1.0, 0.0, 1.0]), AnchorConfig())
    assert kept is not None and kept.metadata["answer_correct"] is False and kept.outcome == 0.0


def test_zero_last_step_rule_and_records_without_answers_pass():
    r, _ = anchor(_rec("The answer is 15.", [1.0, 0.5, 1.0]), AnchorConfig(rules=["zero_last_step_if_wrong"]))
    assert r.labels == [1.0, 0.5, 0.0]
    good, ok = anchor(_rec("The answer is 14.", [1.0, 1.0, 1.0]), AnchorConfig(rules=["drop_wrong_all_good", "zero_last_step_if_wrong"]))
    assert ok is True and good.labels == [1.0, 1.0, 1.0] and good.outcome == 1.0
    bare = Trajectory(id="b", question="q", steps=["x"], labels=[1.0])
    assert anchor(bare, AnchorConfig()) == (bare, None)
