"""Verdict parsing: JSON or "Score: x"; anything missing or off the {0, 0.5, 1} scale is invalid
(None), never rounded into a score. The last block checks recorded real outputs of
SmolLM2-135M-Instruct (tests/labeling/data/smollm2_outputs.jsonl), malformed ones included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_distill.labeling.parse import parse_first_error, parse_score, parse_trajectory

DATA = Path(__file__).with_name("data") / "smollm2_outputs.jsonl"


@pytest.mark.parametrize("text,expected", [
    ("The step adds correctly.\nScore: 1", 1.0),
    ("Right idea, wrong sum.\nScore: 0.5", 0.5),
    ("**Score:** 0", 0.0),
    ("Reason: fine\nscore = 1.0.", 1.0),
    ('{"reason": "copies the wrong number", "score": 0}', 0.0),
    ('Here: {"reason": "ok", "score": "0.5"}', 0.5),
    ("First I said Score: 0\nOn reflection it is right.\nScore: 1", 1.0),  # the final verdict counts
])
def test_scores_are_read_from_json_or_score_lines(text, expected):
    assert parse_score(text) == expected


@pytest.mark.parametrize("text", [
    "I think this step is correct.",           # no score at all
    "Score: 0.7",                              # off the scale: not rounded to 0.5 or 1
    "Score: 5",                                # a 1-5 scale answer
    "Score: 0, 0.5 or 1",                      # the instructions echoed back
    '{"reason": "ok", "score": true}',         # a boolean is not a score
    '{"reason": "ok", "score": 2}',
    "",
])
def test_missing_or_off_scale_scores_are_invalid(text):
    assert parse_score(text) is None


def test_trajectory_answers_give_one_vote_per_step_and_none_where_unusable():
    full = json.dumps([{"step": 1, "reason": "a", "score": 1}, {"step": 2, "reason": "b", "score": 0.5}, {"step": 3, "reason": "c", "score": 0}])
    assert parse_trajectory(full, 3) == [1.0, 0.5, 0.0]
    truncated = '[{"step": 1, "reason": "a", "score": 1}, {"step": 2, "reason": "b", "sc'
    assert parse_trajectory(truncated, 3) == [1.0, None, None]
    conflicting = '[{"step": 1, "score": 1}, {"step": 1, "score": 0}, {"step": 2, "score": 9}]'
    assert parse_trajectory(conflicting, 2) == [None, None]
    lines = "Step 1: starts right. Score: 1\nStep 2: wrong product. Score: 0"
    assert parse_trajectory(lines, 3) == [1.0, 0.0, None]
    assert parse_trajectory("no verdicts here", 2) == [None, None]
    echoed = 'for example:\n[{"step": 1, "reason": "...", "score": 1}, {"step": 2, "reason": "...", "score": 0.5}]'
    assert parse_trajectory(echoed, 2) == [None, None]  # the prompt's example copied back is no verdict


@pytest.mark.parametrize("text,expected", [
    ("Step 2 multiplies instead of adding.\nFirst error: step 2", 1),
    ("All fine.\nFirst error: none", -1),
    ('{"first_error": 3}', 2),
    ('{"first_error": null}', -1),
    ("The first error is in step 4. The correct answer is 216.", 3),
    ("The first error is step K.", None),   # the template's placeholder echoed back
    ("First error: step 9", None),   # out of range
    ("The third step looks off.", None),
])
def test_first_error_answers(text, expected):
    assert parse_first_error(text, 4) == expected


def _recorded() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_recorded_smollm2_outputs_parse_to_their_reviewed_verdicts():
    """Each output was generated once by SmolLM2-135M-Instruct with these prompts and reviewed by
    hand; `expected` is what a careful reader takes from it (null: no usable verdict)."""
    rows = _recorded()
    assert {r["mode"] for r in rows} == {"prefix", "trajectory", "first_error"}
    for r in rows:
        if r["mode"] == "prefix":
            got = parse_score(r["output"])
        elif r["mode"] == "trajectory":
            got = parse_trajectory(r["output"], r["n_steps"])
        else:
            got = parse_first_error(r["output"], r["n_steps"])
        assert got == r["expected"], r["output"]


def test_recorded_outputs_include_malformed_ones_that_stay_invalid():
    rows = _recorded()
    invalid = [r for r in rows if r["expected"] is None or (isinstance(r["expected"], list) and None in r["expected"])]
    assert len(invalid) >= 2
