"""The GSM8K process-data builder: originals all good, first-error variants whose later steps carry
the wrong value forward (unsupervised), counted skips, bad lines named. Expected values are worked
out by hand from the solutions below."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from prm_distill.cli import main
from prm_distill.data.build import BuildConfig, Source, bare_answers_of, read_gsm8k, variants_of
from prm_distill.data.perturb import ANNOTATION, Perturber, evaluate, fmt, mark_statements, num
from prm_distill.records import read_jsonl
from prm_distill.verify import check_step, refuted

NATALIA_Q = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")
NATALIA_A = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
BETTY_Q = "Betty needs $100 for a wallet. She has half of it, her parents give her $15 and her grandparents give her $30. How much more does she need?"
BETTY_A = "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5"


def _lines(answer: str) -> list[str]:
    lines = answer.split("\n")
    return lines[:-1] + ["The answer is " + lines[-1].removeprefix("#### ") + "."]


def test_wrong_operation_changes_the_step_and_carries_the_value_forward():
    p = Perturber(NATALIA_Q, _lines(NATALIA_A), random.Random(0))
    v = p.make("wrong_operation", 1, 0)
    assert v.lines == ["Natalia sold 48/2 = 24 clips in May.", "Natalia sold 48-24 = 24 clips altogether in April and May.", "The answer is 24."]


def test_misread_relation_half_read_as_twice_and_later_steps_follow():
    p = Perturber(NATALIA_Q, _lines(NATALIA_A), random.Random(0))
    v = p.make("misread_relation", 0, 0)
    # "half as many" misread: 48 * 2 = 96, then 48 + 96 = 144 and the answer 144
    assert v.lines == ["Natalia sold 48*2 = 96 clips in May.", "Natalia sold 48+96 = 144 clips altogether in April and May.", "The answer is 144."]


@pytest.mark.parametrize("seed", range(5))
def test_miscalculation_keeps_the_expression_and_later_steps_use_the_wrong_value(seed):
    p = Perturber(NATALIA_Q, _lines(NATALIA_A), random.Random(seed))
    v = p.make("miscalculation", 0, 0)
    wrong = v.lines[0].split("= ")[1].split(" ")[0]
    assert v.lines[0] == f"Natalia sold 48/2 = {wrong} clips in May." and wrong != "24"
    total = fmt(evaluate(f"48+{wrong}"))
    assert v.lines[1] == f"Natalia sold 48+{wrong} = {total} clips altogether in April and May."
    assert v.lines[2] == f"The answer is {total}."


def test_wrong_quantity_copies_a_number_wrongly_from_the_question():
    p = Perturber(BETTY_Q, _lines(BETTY_A), random.Random(1))
    v = p.make("wrong_quantity", 1, 0)
    # one of 100, 50(not in question), 30, 15 replaced in 100 - 50 - 30 - 15, the result recomputed
    step = v.lines[1]
    expr, result = step.removeprefix("Betty needs ").split(" = $")
    assert expr != "100 - 50 - 30 - 15"
    assert fmt(evaluate(expr)) == result.removesuffix(" more.")
    assert v.lines[2] == f"The answer is {result.removesuffix(' more.')}."


def test_dropped_term_leaves_one_condition_out():
    p = Perturber(BETTY_Q, _lines(BETTY_A), random.Random(0))
    v = p.make("dropped_term", 1, 0)
    options = {"100 - 30 - 15 = $55", "100 - 50 - 15 = $35", "100 - 50 - 30 = $20"}
    shown = v.lines[1].removeprefix("Betty needs ").removesuffix(" more.")
    assert shown in options
    assert v.lines[2] == f"The answer is {shown.split('$')[1]}."


def test_a_kind_that_does_not_apply_is_skipped_not_faked():
    lines = ["Tom has three apples and two pears.", "So he has some fruit.", "The answer is 5."]
    p = Perturber("Tom has 3 apples and 2 pears. How many fruits?", lines, random.Random(0))
    for kind in ("miscalculation", "wrong_quantity", "wrong_operation", "misread_relation", "dropped_term"):
        assert p.candidates(kind) == []
    counts: Counter = Counter()
    recs = variants_of(Source("t", "Tom has 3 apples and 2 pears. How many fruits?", lines[:2] + ["#### 5"]), BuildConfig(variants=3), random.Random(0), counts)
    assert [r.id for r in recs] == ["t-orig"] and recs[0].labels == [1.0, 1.0, 1.0]
    assert all(counts[f"{k}.skipped"] == 1 for k in ("miscalculation", "wrong_quantity", "wrong_operation", "misread_relation", "dropped_term"))


def test_variants_are_labelled_first_error_with_later_steps_unsupervised():
    counts: Counter = Counter()
    src = Source("n", NATALIA_Q, NATALIA_A.split("\n"))
    recs = variants_of(src, BuildConfig(variants=5), random.Random(3), counts)
    assert recs[0].labels == [1.0, 1.0, 1.0]
    assert recs[0].steps[:2] == ["Natalia sold 48/2 = 24 clips in May.", "Natalia sold 48+24 = 72 clips altogether in April and May."]
    assert "72" in recs[0].steps[2] and "<<" not in " ".join(recs[0].steps)
    for r in recs[1:]:
        k = r.metadata["error_step"]
        assert r.labels == [1.0] * k + [0.0] + [None] * (2 - k)
        assert r.steps[:k] == recs[0].steps[:k] and r.steps[k] != recs[0].steps[k]
    assert len({tuple(r.steps) for r in recs}) == len(recs)  # no two variants alike
    assert sum(counts[f"{k}.made"] for k in ("miscalculation", "wrong_quantity", "wrong_operation", "misread_relation", "dropped_term")) == len(recs) - 1


def test_plain_steps_get_marks_so_they_vary_too():
    assert mark_statements("So 60 * 7 = 420 seconds.") == "So 60 * 7 = <<60 * 7=420>>420 seconds."
    p = Perturber("How many seconds are in 7 minutes?", [mark_statements("So 60 * 7 = 420 seconds."), "That is 420 seconds."], random.Random(0))
    v = p.make("wrong_operation", 0, 0)
    assert v.lines[0] == "So 60 / 7 = 8.57 seconds." and v.lines[1] == "That is 8.57 seconds."


@pytest.mark.parametrize("step, marked", [
    ("3 x 4 = 12 eggs.", "3 x 4 = <<3 * 4=12>>12 eggs."),
    ("$5 + $7 = $12", "$5 + $7 = $<<5 + 7=12>>12"),
    ("2 + 2 = 5", "2 + 2 = <<2 + 2=5>>5"),  # a wrong statement keeps its written result
    ("It was 12 - 15 = -3 degrees.", "It was 12 - 15 = <<12 - 15=-3>>-3 degrees."),
    ("1,200 + 300 = 1,550 people", "1,200 + 300 = <<1200 + 300=1,550>>1,550 people"),
    ("Total = 3 + 4 = 7", "Total = 3 + 4 = <<3 + 4=7>>7"),
    ("Let us read the problem.", "Let us read the problem."),
    ("24 cups * 1/12 = 2 cups", "24 cups * 1/12 = 2 cups"),  # `1/12 = 2` is not a statement
    ("5 * 4 = 20 + 3 = 23", "5 * 4 = 20 + 3 = 23"),  # a running total claims nothing
])
def test_the_builder_marks_exactly_what_the_verifier_checks(step, marked):
    assert mark_statements(step) == marked
    marks, checks = ANNOTATION.findall(marked), check_step(step)
    assert len(marks) == len(checks)
    assert [evaluate(e) == num(r) for e, r in marks] == [c.holds for c in checks]
    assert refuted(step) == (step in ("2 + 2 = 5", "1,200 + 300 = 1,550 people"))


def test_statements_written_with_x_divide_and_dollars_vary_too():
    eggs = [mark_statements("3 x 4 = 12 eggs."), "The answer is 12."]
    v = Perturber("A box holds 3 rows of 4 eggs. How many eggs?", eggs, random.Random(0)).make("wrong_operation", 0, 0)
    assert v.lines == ["3 / 4 = 0.75 eggs.", "The answer is 0.75."]
    pay = [mark_statements("Each pays 10 ÷ 2 = $5, so both pay 10."), "The answer is 5."]
    v = Perturber("Two share 10 dollars.", pay, random.Random(0)).make("wrong_operation", 0, 0)
    assert v.lines == ["Each pays 10 * 2 = $20, so both pay 10.", "The answer is 20."]  # the comma after $5 kept


def test_bad_gsm8k_lines_are_skipped_and_named(tmp_path):
    path = tmp_path / "g.jsonl"
    rows = [
        {"question": NATALIA_Q, "answer": NATALIA_A},
        {"question": "Q2", "answer": "No final line here."},
        {"question": "Q3", "answer": ""},
        {"question": "Q4", "answer": "x = <<2+2=4>>4\n#### four"},
        {"question": BETTY_Q, "answer": BETTY_A},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sources, skipped = read_gsm8k(path)
    assert [s.question for s in sources] == [NATALIA_Q, BETTY_Q]
    assert skipped == [f"{path}:2: no final '#### <answer>' line", f"{path}:3: empty solution", f"{path}:4: non-numeric final answer 'four'"]


def test_cli_writes_train_dev_and_summary_with_whole_questions_held_out(tmp_path, capsys):
    path = tmp_path / "g.jsonl"
    rows = [{"question": f"{NATALIA_Q} (copy {i})", "answer": NATALIA_A} for i in range(20)] + [{"question": "bad", "answer": "no answer"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["data", "gsm8k", "--input", str(path), "--output", str(out), "--variants", "2", "--dev-fraction", "0.2", "--bare-answers", "1"]) == 0
    train, dev = read_jsonl(out / "train.jsonl"), read_jsonl(out / "dev.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    assert {r.question for r in train}.isdisjoint({r.question for r in dev}) and len({r.question for r in dev}) == 4
    assert summary["solutions"] == 20 and summary["skipped_lines"] == 1 and summary["originals"] == 20
    # per solution: the original, 2 variants, a bare answer and a jump to the answer (Natalia's first line does not state 72)
    assert summary["records"] == len(train) + len(dev) == 20 * 5
    assert sum(v["made"] for v in summary["variants"].values()) == 40
    assert summary["bare_answers"] == {"bare_answer": {"made": 20, "skipped": 0}, "skipped_steps": {"made": 20, "skipped": 0}}
    assert summary["labels"]["bad"] == 40 + 20 + 20
    assert "1 input lines skipped" in capsys.readouterr().out


def test_bare_answer_negatives_label_the_unsupported_answer_step_0():
    src = Source("n", NATALIA_Q, NATALIA_A.split("\n"), metadata={"source": "gsm8k", "answer": "72"})
    counts: Counter = Counter()
    bare, jump = bare_answers_of(src, BuildConfig(bare_answers=1.0), counts)
    assert bare.id == "n-bare_answer" and len(bare.steps) == 1 and "72" in bare.steps[0] and bare.labels == [0.0]
    # Natalia has two reasoning lines: the only cut keeps the first (48/2 = 24, not the answer) and jumps to 72
    assert jump.id == "n-skipped_steps" and jump.steps[0] == "Natalia sold 48/2 = 24 clips in May." and "72" in jump.steps[1]
    assert jump.labels == [1.0, 0.0] and jump.metadata["kind"] == "skipped_steps" and jump.metadata["error_step"] == 1
    assert counts == Counter({"bare_answer.made": 1, "skipped_steps.made": 1})
    # the reference-guided labeler reads both the same way: a right answer no step derives is a guess
    from prm_distill.labeling.judges.reference import label

    assert [label(NATALIA_Q, r.steps, NATALIA_A, "72").labels for r in (bare, jump)] == [[0.0], [1.0, 0.0]]


def test_no_jump_when_every_cut_already_states_the_answer_and_off_means_off():
    lines = ["Betty has 100 / 2 = $<<100/2=50>>50.", "So she needs 100 - 50 = $<<100-50=50>>50 more.", "#### 50"]
    src = Source("b", "Betty needs $100 and has half. How much more?", lines, metadata={"answer": "50"})
    counts: Counter = Counter()
    (bare,) = bare_answers_of(src, BuildConfig(bare_answers=1.0), counts)  # the first line already states 50: a cut derives it
    assert bare.labels == [0.0] and counts["skipped_steps.skipped"] == 1
    assert bare_answers_of(src, BuildConfig(bare_answers=0.0), Counter()) == []
    with pytest.raises(ValueError, match=r"bare_answers must be in \[0, 1\], got 2"):
        BuildConfig(bare_answers=2)


def test_bare_answers_leave_the_variants_unchanged(tmp_path):
    from prm_distill.data.build import build_from_gsm8k

    path = tmp_path / "g.jsonl"
    rows = [{"question": f"{q} ({i})", "answer": a} for i in range(6) for q, a in ((NATALIA_Q, NATALIA_A), (BETTY_Q, BETTY_A))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_from_gsm8k(path, tmp_path / "off", BuildConfig(bare_answers=0.0, dev_fraction=0.0))
    s = build_from_gsm8k(path, tmp_path / "on", BuildConfig(dev_fraction=0.0))  # the default: half of the solutions
    off = read_jsonl(tmp_path / "off" / "train.jsonl")
    on = [r for r in read_jsonl(tmp_path / "on" / "train.jsonl") if r.metadata["kind"] not in ("bare_answer", "skipped_steps")]
    assert [(r.id, r.steps, r.labels) for r in on] == [(r.id, r.steps, r.labels) for r in off]
    made = s["bare_answers"]["bare_answer"]["made"]
    assert 0 < made < 12 and s["records"] == len(off) + made + s["bare_answers"]["skipped_steps"]["made"]


def test_cli_kinds_are_a_comma_separated_list_checked_against_the_known_ones(tmp_path, capsys):
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps({"question": f"{NATALIA_Q} ({i})", "answer": NATALIA_A}) + "\n" for i in range(4)))
    out = tmp_path / "out"
    assert main(["data", "gsm8k", "--input", str(path), "--output", str(out), "--kinds", "miscalculation,wrong_operation",
                 "--variants", "2", "--bare-answers", "0"]) == 0
    made = {k for k, v in json.loads((out / "summary.json").read_text())["variants"].items() if v["made"]}
    assert made and made <= {"miscalculation", "wrong_operation"}
    assert main(["data", "gsm8k", "--input", str(path), "--output", str(tmp_path / "x"), "--kinds", "miscalculation,typo"]) == 2
    assert "unknown error kind(s) ['typo']" in capsys.readouterr().err


def test_a_dev_split_of_one_class_is_a_warning_at_build_time(tmp_path, caplog):
    """No variants, no bare answers: every dev record is all-correct, so no threshold can be chosen on it."""
    from prm_distill.data.build import build_from_gsm8k

    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps({"question": f"{NATALIA_Q} ({i})", "answer": NATALIA_A}) + "\n" for i in range(10)))
    with caplog.at_level("WARNING", logger="prm_distill.data"):
        s = build_from_gsm8k(path, tmp_path / "out", BuildConfig(variants=0, bare_answers=0.0, dev_fraction=0.2))
    n = s["dev_records"]
    assert n == 2 and f"{tmp_path / 'out' / 'dev.jsonl'}: dev split unusable ({n} records: 0 with a first error, {n} all-correct" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="prm_distill.data"):
        build_from_gsm8k(path, tmp_path / "none", BuildConfig(variants=0, bare_answers=0.0, dev_fraction=0.0))
    assert "dev split" not in caplog.text  # no dev split asked for: nothing to warn about
