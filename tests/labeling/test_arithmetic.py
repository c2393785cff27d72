"""The arithmetic verifier judge: a false equation is a 0 vote, all-true equations a 1 vote, a step
without checkable arithmetic no vote. On the embedded data (labels known by construction) it must
catch every miscalculation and never call a correct step wrong."""

from __future__ import annotations

from prm_distill.labeling.judges.arithmetic import statements, verify_steps
from prm_distill.synthetic import SyntheticConfig, generate


def test_statements_are_checked_with_exact_arithmetic():
    assert verify_steps(["12 + 5 = 17 apples.", "4 x 6 = 25.", "24 / 6 = 4", "30 - 9 = 21", "Let us read the problem."]) == [1.0, 0.0, 1.0, 1.0, None]
    assert verify_steps(["7 * 8 = 54"]) == [0.0]  # the error SmolLM2 called correct
    assert statements("2 + 3 x 4 = 14") == [("2 + 3 x 4 = 14", True)]  # usual precedence
    assert statements("10 / 3 = 3.33") == [("10 / 3 = 3.33", True)]  # rounded to the digits written
    assert statements("10 / 3 = 3.3") == [("10 / 3 = 3.3", True)]
    assert statements("10 / 3 = 3.4") == [("10 / 3 = 3.4", False)]
    assert statements("1,200 + 300 = 1,500") == [("1200 + 300 = 1500", True)]
    assert statements("5 / 0 = 1") == []  # undefined: nothing to vote on
    assert verify_steps(["3 + 4 = 7 and 2 x 2 = 5"]) == [0.0]  # one false statement sinks the step


def test_on_embedded_data_every_miscalculation_is_caught_and_no_good_step_is_blamed():
    recs = generate(SyntheticConfig(n=300, seed=11))
    caught = missed = blamed = 0
    for r in recs:
        votes = verify_steps(r.steps)
        for k, (lab, v) in enumerate(zip(r.labels, votes)):
            if lab == 1.0 and v == 0.0:
                blamed += 1
            if r.metadata["error_kind"] == "miscalculation" and k == r.metadata["error_step"]:
                caught += v == 0.0
                missed += v != 0.0
    assert blamed == 0
    assert caught > 20 and missed == 0


def test_negative_numbers_are_read_with_their_sign():
    assert verify_steps(["12 - 11 = -1", "12 - 11 = 1", "-1 x 4 = -4", "5 - 7 = 2"]) == [0.0, 1.0, 1.0, 0.0]
