"""The verifier refutes and never confirms: false statements cap a step's score, everything else
keeps the model's score exactly; odd text is "not checkable", never an error."""

from __future__ import annotations

import pytest

from prm_distill.verify import apply_rule, check_step, refuted, rule, validate_rule


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
])
def test_odd_or_unclaimed_text_is_not_checkable_and_never_raises(text):
    assert not refuted(text)


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
