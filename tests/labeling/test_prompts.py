"""The judge sees the problem and the steps up to the one under review: never the answer key, the
outcome, later steps or metadata; and every label carries the prompt version it was made with."""

from __future__ import annotations

import json

import pytest

from prm_distill.labeling.prompts import prompt_version, prompts_for, render
from prm_distill.records import Trajectory

ANSWER, LATER, OUTCOME_NOTE = "ANSWERKEY-7391", "LATERSTEP-5524", "OUTCOME-CORRECT-8812"
REC = Trajectory(
    id="r1", question="Tom has 3 apples and buys 4 more. How many apples does he have?",
    steps=["Tom starts with 3 apples.", "He buys 4, so 3 + 4 = 7 apples.", f"{LATER} The answer is 7."],
    outcome=1.0, metadata={"answer": ANSWER, "note": OUTCOME_NOTE},
)


def _text(p) -> str:
    return json.dumps(p.messages)


@pytest.mark.parametrize("mode", ["prefix", "trajectory", "first_error"])
def test_prompt_never_contains_answer_key_outcome_or_metadata(mode):
    for p in prompts_for(mode, REC.question, REC.steps):
        text = _text(p)
        assert ANSWER not in text and OUTCOME_NOTE not in text and "outcome" not in text.lower()
        assert REC.question in text
        assert "unknown" in text  # the judge is told the final result is unknown


def test_prefix_prompt_holds_earlier_steps_and_the_step_but_no_later_step():
    prompts = prompts_for("prefix", REC.question, REC.steps)
    assert [p.step for p in prompts] == [0, 1, 2]
    first, second = prompts[0].user, prompts[1].user
    assert REC.steps[0] in first and REC.steps[1] not in first and LATER not in first
    assert REC.steps[0] in second and REC.steps[1] in second and LATER not in second
    assert "(none: this is the first step)" in first
    assert "earns nothing" in second  # redundancy is not rewarded
    assert LATER in prompts[2].user


def test_trajectory_prompts_are_one_per_solution_with_every_step_numbered():
    (p,) = prompts_for("trajectory", REC.question, REC.steps)
    assert p.step is None
    for k, s in enumerate(REC.steps, 1):
        assert f"Step {k}: {s}" in p.user
    assert "split into 3 steps" in p.user and "JSON list" in p.user


def test_versions_are_named_after_their_template_files():
    assert prompt_version("prefix") == "prefix.v1"
    assert {p.version for m in ("prefix", "trajectory", "first_error") for p in prompts_for(m, REC.question, REC.steps)} == {
        "prefix.v1", "trajectory.v1", "first_error.v1"}


def test_dollar_signs_in_the_problem_are_kept_verbatim():
    p = render("prefix", "A pen costs $3 and a book $x.", ["So $3 + $4 = $7."], 0)
    assert "A pen costs $3 and a book $x." in p.user and "So $3 + $4 = $7." in p.user


def test_prefix_needs_a_valid_step_index():
    with pytest.raises(ValueError, match="step index"):
        render("prefix", "q", ["a"], 1)
