"""The reference-guided first-error rule (`judge.backend=reference`): every expected label is worked
out by hand from GSM8K *train* solutions (calculator annotations as GSM8K writes them)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from prm_distill.config import load_config
from prm_distill.labeling import LabelJobConfig, run_label_job
from prm_distill.labeling.judges.reference import ReferenceMissing, label, supported_values
from prm_distill.records import read_jsonl

NATALIA_Q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")
NATALIA_R = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
BETTY_Q = ("Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. Her parents decided "
           "to give her $15 for that purpose, and her grandparents twice as much as her parents. How much more money does Betty need to buy the wallet?")
BETTY_R = ("In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty's grandparents gave her 15 * 2 = $<<15*2=30>>30.\n"
           "This means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5")
WENG_Q = "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
WENG_R = "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"


def test_the_gold_chain_licenses_question_numbers_words_and_intermediate_values():
    vals = supported_values(NATALIA_Q, NATALIA_R, "72")
    assert {48, 24, 72, 2} <= vals  # 2: "half" in the question (and 48/2 in the solution)
    assert 96 not in vals and 144 not in vals
    assert {100, 50, 15, 30, 5} <= supported_values(BETTY_Q, BETTY_R, "5")
    assert Fraction(1, 5) in supported_values(WENG_Q, WENG_R, "10")  # 12/60 = 0.2 in the gold chain


def test_wrong_answer_first_unsupported_value_is_the_error_later_steps_unsupervised():
    # half read as twice: 96 is on no gold chain, so step 0 is the first error
    v = label(NATALIA_Q, ["In May she sold 48 * 2 = 96 clips.", "Altogether 48 + 96 = 144 clips.", "The answer is 144."], NATALIA_R, "72")
    assert v.labels == [0.0, None, None] and v.verdict == "wrong" and v.first_error == 0 and v.reason == "unsupported value 96"
    # a wrong operation two steps in: 100 - 50 - 30 + 15 = 35 (true arithmetic, but 35 is derived from nothing in the gold chain)
    steps = ["Betty has half of $100, which is 100 / 2 = $50.", "Her grandparents give her 15 * 2 = $30.",
             "She needs 100 - 50 - 30 + 15 = $35 more.", "The answer is 35."]
    v = label(BETTY_Q, steps, BETTY_R, "5")
    assert v.labels == [1.0, 1.0, 0.0, None] and v.reason == "unsupported value 35"
    # a false equation is an error even where its written result is on the chain (0.2 x 50 is not 100; 100 is not on it either)
    v = label(WENG_Q, ["Weng earns 12 / 60 = $0.2 per minute.", "In 50 minutes she earns 0.2 x 50 = $100.", "The answer is 100."], WENG_R, "10")
    assert v.labels == [1.0, 0.0, None] and v.reason == "false statement '0.2 x 50 = 100'"


def test_wrong_answer_with_every_value_on_the_chain_errs_in_its_conclusion():
    v = label(NATALIA_Q, ["Natalia sold 48/2 = 24 clips in May.", "The answer is 24."], NATALIA_R, "72")
    assert v.labels == [1.0, 0.0] and v.first_error == 1 and v.reason == "wrong final answer 24 (gold 72)"


def test_right_answer_all_good_and_step_markers_or_boxed_answers_change_nothing():
    v = label(NATALIA_Q, ["Step 1: In May she sold half of 48, which is 24.", "Step 2: In total 48 + 24 = 72.", "The answer is $\\boxed{72}$."],
              NATALIA_R, "#### 72")
    assert v.labels == [1.0, 1.0, 1.0] and v.verdict == "correct" and v.first_error is None


def test_a_bare_right_answer_is_a_guess_not_a_worked_solution():
    assert label(NATALIA_Q, ["The answer is 72."], NATALIA_R, "72").labels == [0.0]
    # steps that do not derive 72 followed by 72: the answer step is 0, the steps before it are fine
    v = label(NATALIA_Q, ["Natalia sold 48/2 = 24 clips in May.", "The answer is 72."], NATALIA_R, "72")
    assert v.labels == [1.0, 0.0] and v.verdict == "bare_answer"
    # derived as the result of an equation in the same step: a worked answer
    assert label(NATALIA_Q, ["Natalia sold 48/2 = 24 clips in May.", "48 + 24 = 72, so the answer is 72."], NATALIA_R, "72").labels == [1.0, 1.0]


def test_percent_forms_and_rounding_are_supported():
    q = "A shirt costs $40 and is sold at a 25% discount. What is the sale price?"
    r = "The discount is 40 * 25/100 = $<<40*25/100=10>>10.\nThe sale price is 40 - 10 = $<<40-10=30>>30.\n#### 30"
    v = label(q, ["25% is 0.25, so the discount is 40 x 0.25 = $10.", "The sale price is 40 + 10 = $50.", "The answer is 50."], r, "30")
    assert v.labels == [1.0, 0.0, None]  # 0.25 is 25%; 50 is derived from nothing on the chain
    q3 = "Three friends share 100 candies equally and each gives 10 away. How many does each keep?"
    r3 = "Each gets 100/3 = <<100/3=33.33>>33.33 candies.\nEach keeps 33.33 - 10 = <<33.33-10=23.33>>23.33.\n#### 23.33"
    v = label(q3, ["Each friend gets 100 / 3 = 33.3 candies.", "Each keeps 33.3 + 10 = 43.3.", "The answer is 43.3."], r3, "23.33")
    assert v.labels == [1.0, 0.0, None]  # 33.3 is 100/3 to the decimals written; 43.3 is unsupported


def test_enumerators_and_simplified_fractions_are_not_new_values():
    # a real policy's style (Qwen2.5): a numbered plan, LaTeX fractions; 50/60 licenses 5/6, the wrong 20 is the error
    steps = ["Plan: 1. Convert the minutes to hours. 2. Multiply by the hourly rate.",
             "1. **Convert:** \\[ \\frac{50 \\text{ minutes}}{60 \\text{ minutes/hour}} = \\frac{5}{6} \\text{ hours} \\]",
             "2. **Earnings:** \\[ 12 \\times \\frac{5}{6} = 20 \\text{ dollars} \\]", "The answer is \\(\\boxed{20}\\)."]
    v = label(WENG_Q, steps, WENG_R, "10")
    assert v.labels == [1.0, 1.0, 0.0, None] and v.reason == "unsupported value 20"
    # a whole quotient is a computation and stays checked: 48/2 is not licensed by 48 and 2 alone
    assert label(NATALIA_Q, ["She sold 96/2 = 48 in May, so 96 in all.", "The answer is 96."], NATALIA_R, "72").reason == "unsupported value 96"


def test_no_answer_stated_is_left_unlabelled_and_a_gold_answer_without_one_is_an_error():
    v = label(NATALIA_Q, ["Natalia sold 48/2 = 24 clips in May.", "Then she sold more"], NATALIA_R, "72")
    assert v.labels == [None, None] and v.verdict == "no_answer"
    with pytest.raises(ReferenceMissing, match="gold answer 'many' states no answer"):
        label(NATALIA_Q, ["The answer is 72."], NATALIA_R, "many")


def _rows() -> list[dict]:
    return [
        {"id": "right", "question": NATALIA_Q, "steps": ["Natalia sold 48/2 = 24 clips in May.", "Natalia sold 48+24 = 72 clips.", "The answer is 72."],
         "reference": NATALIA_R, "answer": "72"},
        {"id": "twice", "question": NATALIA_Q, "steps": ["In May she sold 48 * 2 = 96 clips.", "Altogether 48 + 96 = 144 clips.", "The answer is 144."],
         "reference": NATALIA_R, "answer": "72"},
        {"id": "bare", "question": NATALIA_Q, "steps": ["The answer is 72."], "reference": NATALIA_R, "answer": "72"},
        {"id": "cut", "question": NATALIA_Q, "steps": ["Natalia sold 48/2 = 24 clips in May.", "Then she"], "reference": NATALIA_R, "answer": "72"},
    ]


def _write(tmp_path, rows):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_label_job_with_the_reference_backend_sends_no_request_and_counts_verdicts(tmp_path):
    path = _write(tmp_path, _rows())
    cfg = load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / 'out'}", "progress=false", "judge.backend=reference"])
    s = run_label_job(cfg)
    recs = {r.id: r for r in read_jsonl(tmp_path / "out" / "labels.jsonl")}
    assert recs["right"].labels == [1.0, 1.0, 1.0] and recs["twice"].labels == [0.0, None, None]
    assert recs["bare"].labels == [0.0] and recs["cut"].labels == [None, None]
    assert recs["twice"].judge["reference"] == {"verdict": "wrong", "first_error": 0, "reason": "unsupported value 96"}
    assert recs["twice"].judge["mode"] == "reference" and recs["twice"].judge["prompt_version"] == "reference.v1"
    assert recs["twice"].judge["by_judge"]["reference"] == [[0.0], [], []]
    assert s["reference"] == {"correct": 1, "bare_answer": 1, "wrong": 1, "no_answer": 1, "no_answer_ids": ["cut"]}
    assert s["labelled_steps"] == 5 and s["this_run"]["requests_sent"] == 0


def test_records_without_reference_are_refused_naming_them(tmp_path, capsys):
    rows = _rows()[:2] + [{"id": "noref", "question": NATALIA_Q, "steps": ["The answer is 72."], "answer": "72"},
                          {"id": "noans", "question": NATALIA_Q, "steps": ["The answer is 72."], "reference": NATALIA_R}]
    path = _write(tmp_path, rows)
    with pytest.raises(ReferenceMissing, match=r"`reference` and a gold `answer` on every rollout; 2 of 4 lack one \(noref, noans\)"):
        run_label_job(load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / 'out'}", "progress=false", "judge.backend=reference"]))
    from prm_distill.cli import main

    assert main(["label", f"input={path}", f"output={tmp_path / 'cli'}", "judge.backend=reference"]) == 2
    assert "noref, noans" in capsys.readouterr().err


def test_the_command_says_there_are_no_votes_to_rate_and_draws_no_empty_bar(tmp_path, capsys):
    """The rule sends nothing and casts no vote that can be invalid: no "invalid-vote rate None", no "0step-vote" bar."""
    from prm_distill.cli import main

    path = _write(tmp_path, _rows())
    assert main(["label", f"input={path}", f"output={tmp_path / 'out'}", "judge.backend=reference"]) == 0
    out, err = capsys.readouterr()
    assert "labelled 4 rollouts" in out and "None" not in out and "invalid-vote rate" not in out
    assert "step-vote" not in err


def test_with_the_verifier_on_a_step_after_the_first_error_with_a_false_equation_is_still_0(tmp_path):
    """docs/labeling.md: the rule leaves steps after its first error null, the verifier's veto (configs/label.yaml turns it on) still applies."""
    rows = [{**_rows()[1], "steps": ["In May she sold 48 * 2 = 96 clips.", "Altogether 48 + 96 = 150 clips.", "The answer is 150."]}]
    path = _write(tmp_path, rows)
    for on, expected in (("false", [0.0, None, None]), ("true", [0.0, 0.0, None])):
        run_label_job(load_config(LabelJobConfig, None, [f"input={path}", f"output={tmp_path / on}", "progress=false", "judge.backend=reference",
                                                         f"verifier.enabled={on}"]))
        assert read_jsonl(tmp_path / on / "labels.jsonl")[0].labels == expected
