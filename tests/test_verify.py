"""The verifier refutes and never confirms: false statements cap a step's score, everything else
keeps the model's score exactly; odd text is "not checkable", never an error."""

from __future__ import annotations

import pytest

from prm_distill.verify import apply_rule, check_step, refuted, rule, statements, validate_rule


@pytest.mark.parametrize("text", [
    "Natalia sold 48/2 = 25 clips.",
    "she earned 0.2 x 50 = $11.",
    "$20 - $10 = $11",
    r"So $\frac{3}{4} \cdot 8 = 7$.",
    r"$2x + 3 = 7 \Rightarrow x = 3$",
    r"$\sqrt{144+81}=\sqrt{225}=16$",
    r"$b^2=a^2-f^2=16-9=25$",
    r"\( 10/3 = 3.4 \)",
    r"$1,000 + 500 = 1,600$",
    "Total = 3 + 4 = 8",                   # a word before `=` starts a statement
    "12 - 15 = 3 degrees",
    "$1,200 x 3 = $3,700",
])
def test_false_statements_are_refuted(text):
    assert refuted(text)


@pytest.mark.parametrize("text", [
    "Natalia sold 48/2 = 24 clips in May.",
    "she earned 0.2 x 50 = $10.",
    r"So $\frac{3}{4} \cdot 8 = 6$.",
    r"$2x + 3 = 7 \Rightarrow x = 2$",
    r"$\sqrt{12^2+9^2}=\sqrt{144+81}=\sqrt{225}=15$",
    r"\[ 10/3 = 3.33 \]",
    r"$2^13=8192$",
    r"$5476/3=1825\frac{1}{3}$",
    "Ben keeps 2/3 of his salary: $2000 / 2/3 = $3000",
    r"$3 \times 4 + 2 = 14$",                # not `4 + 2 = 14`: the expression began at 3
    "12 - 15 = -3 degrees",
    "$1,200 x 3 = $3,600",
])
def test_true_statements_hold(text):
    checks = check_step(text)
    assert checks and all(c.holds for c in checks)


@pytest.mark.parametrize("text", [
    "24 cups * 1/12 = 2 cups",            # `1/12 = 2` is not a statement: the expression began earlier
    r"$x^2 = 4$",                          # an equation to solve claims nothing
    r"$p(0)=-52$",                         # a function value, not p * 0
    r"So, $125^2+120^2=117^2$? No.",       # a question claims nothing
    r"$3 \text{ dozen} = 36$",             # units inside: not checkable
    "She has 20% of 50 = 10",
    "losing 5 thousand dollars a day, over three days 5 * 3 = $15,000.",  # the words carry the scale
    r"$2^{100000} = 5$",                   # too large to evaluate: not checkable, and fast
    r"$\frac{1}{0} = 3$",
    r"$\frac{3{4} = 5$",                   # unbalanced LaTeX
    "The answer is $\\boxed{72}$.",
    "",
    "9" * 5000 + " + 1 = 3",
    "(2 + 3) x 4 + 1 = 21",                # parentheses: not `4 + 1 = 21`
    "5 * 4 = 20 + 3 = 23",                 # a running total: `20 + 3` continues a chain
    "6 * 2 = 10 + 2",                      # the right side is an expression
    "1,2,3 + 4 = 7",                       # not thousands separators: no number to start at
])
def test_odd_or_unclaimed_text_is_not_checkable_and_never_raises(text):
    assert not refuted(text)


@pytest.mark.parametrize("text, found", [
    ("So 60 * 7 = 420 seconds.", [("60 * 7", "420")]),
    ("3 x 4 = 12 and 10 ÷ 2 = 5", [("3 x 4", "12"), ("10 ÷ 2", "5")]),
    ("$5 + $7 = $12", [("$5 + $7", "12")]),
    ("It was 12 - 15 = -3 degrees, then -3 x 2 = -6", [("12 - 15", "-3"), ("-3 x 2", "-6")]),
    ("1,200 + 300 = 1,500 people", [("1,200 + 300", "1,500")]),
    ("Total = 3 + 4 = 8", [("3 + 4", "8")]),
    ("Let us read the problem.", []),
    ("24 cups * 1/12 = 2 cups", []),
    ("5 * 4 = 20 + 3 = 23", []),
    ("6 * 2 = 10 + 2", []),
    ("(2 + 3) x 4 + 1 = 21", []),
    (r"3 \times 4 + 2 = 14", []),
    ("1,2,3 + 4 = 7", []),
    ("Is 3 + 4 = 7?", []),
])
def test_one_reading_of_a_statement(text, found):
    """`statements` is what both the verifier checks and the data builder marks (tests/data)."""
    assert [(s.expr, s.result) for s in statements(text)] == found
    for s in statements(text):
        assert text[s.result_span[0] : s.result_span[1]] == s.result and text[s.span[0] : s.span[1]].endswith(s.result)


def test_a_statement_as_evaluated():
    (s,) = statements("$1,200 x 3 ÷ 2 = $1,800")
    assert s.expression == "1200 * 3 / 2" and s.value == "1800"


def test_rule_caps_refuted_steps_and_leaves_every_other_score_exactly():
    items = [("q", ["2 + 3 = 5.", "2 + 3 = 6.", "Then we are done."]), ("q2", ["4 * 4 = 15", "ok"])]
    scores = [[0.9, 0.8, 0.05], [0.07, 0.333]]
    assert apply_rule(rule(0.1), items, scores) == [[0.9, 0.1, 0.05], [0.07, 0.333]]
    assert apply_rule(None, items, scores) == scores


def test_rule_validation():
    assert rule() == {"kind": "statements", "cap": 0.1}
    validate_rule(None)
    for bad in ({"kind": "other", "cap": 0.1}, {"kind": "statements", "cap": 2}, "on"):
        with pytest.raises(ValueError, match="verifier"):
            validate_rule(bad)
    with pytest.raises(ValueError):
        rule(1.5)
