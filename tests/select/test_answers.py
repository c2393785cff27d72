"""Final-answer extraction and comparison (math-verify, with the plain-number fallback)."""

from __future__ import annotations

import pytest

from prm_distill import answers
from prm_distill.answers import answer_classes, extract_answer, is_correct, same_answer


def test_answers_compare_mathematically_and_gsm8k_gold_counts_after_the_mark():
    pytest.importorskip("math_verify")
    gold = "She sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert extract_answer(gold).text == "72"
    assert is_correct("Altogether she sold 48 + 24 = 72 clips. The answer is 72.", gold) is True
    assert is_correct("The answer is 71.", gold) is False
    assert is_correct("So the answer is \\boxed{\\frac{1}{2}}.", "0.5") is True
    assert is_correct("She has $1,234 left.", "#### 1234") is True


def test_a_solution_without_an_answer_is_wrong_and_no_gold_is_unknown():
    assert is_correct("We are done.", "#### 3") is False
    assert is_correct("The answer is 3.", None) is None
    assert is_correct("The answer is 3.", "no number here") is None
    assert extract_answer("") is None and extract_answer(None) is None


def test_equal_answers_share_a_class_for_majority_voting():
    pytest.importorskip("math_verify")
    found = [extract_answer(t) for t in ["1/2", "The answer is 0.5.", "7", "nothing", "7.0", "3 apples"]]
    assert answer_classes(found) == [0, 0, 1, None, 1, 2]


def test_plain_number_fallback_without_math_verify(monkeypatch):
    # Test double: math-verify made absent, as on an install without the `label` extra.
    monkeypatch.setattr(answers, "_math_verify", lambda: None)
    a = extract_answer("First 3 + 4 = 7, then 7 * 1,000 = 7,000.")
    assert a.text == "7000" and a.number == 7000.0
    assert same_answer(extract_answer("#### 7000"), a)
    assert not same_answer(extract_answer("2.5"), extract_answer("2.6"))
    assert is_correct("it is -2.50", "-2.5") is True
