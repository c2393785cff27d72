"""The MATH process-data builder: paragraph/sentence steps never cut inside math, bad lines named,
first-error variants of MATH kinds (labels 1..1, 0, null..null; the wrong value carried on),
exclusion of test problems, whole problems held out. Expected values are worked out by hand from
the small solutions below."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from prm_distill.cli import main
from prm_distill.data.build import BuildConfig, Source, excluded_questions
from prm_distill.data.latex import MATH_KINDS, Editor, MathSplit, boxed_answer, split_solution
from prm_distill.data.math import read_math, variants_of
from prm_distill.records import read_jsonl

# four steps; each kind has the sites named in test_each_kind_changes_one_token_of_one_step
NUMBER_Q = "Three times a number, plus one, equals $10 - 3$. Find the number."
NUMBER_STEPS = ["Let $n$ be the number.", "Then $3n + 1 = 10 - 3 = 7$, so $3n = 6$.", "Dividing, $n = 2$, and $n > 1$.",
                "The answer is $\\boxed{2}$."]
NUMBER_SOLUTION = "\n\n".join(NUMBER_STEPS)
# one site of `miscalculation` (the 12 of 4 * 3); the 12 is written again after an `=` and boxed
APPLES_STEPS = ["We get $4 \\cdot 3 = 12$.", "So $x = 12$, hence $y = x$.", "The answer is $\\boxed{12}$."]


def _row(i: int | str, problem: str = NUMBER_Q, solution: str = NUMBER_SOLUTION) -> dict:
    return {"id": f"train/algebra/{i}", "problem": problem, "level": "Level 2", "type": "Algebra", "solution": solution}


def _write(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_sentences_end_only_outside_math():
    text = ("We have $a = 1. B$ in one span. Then \\[a + b = 2. \\text{ So } c = 3.\\]So $c$ is known (cf. Part A). "
            "Also $$d = 4. E = 5$$ holds. The answer is $\\boxed{5}$.")
    # one sentence per step shows every cut: none inside $...$, \[...\] or $$...$$, none after "cf."; a display
    # whose content ends with a period ends its sentence even without a space ("\]So")
    assert split_solution(text, MathSplit(max_sentences=1)) == [
        "We have $a = 1. B$ in one span.",
        "Then \\[a + b = 2. \\text{ So } c = 3.\\]",
        "So $c$ is known (cf. Part A).",
        "Also $$d = 4. E = 5$$ holds.",
        "The answer is $\\boxed{5}$.",
    ]
    # the default bounds: five sentences, 155 characters -> groups of at most three sentences
    assert split_solution(text) == [text[: text.index("Also") - 1], text[text.index("Also"):]]


def test_paragraphs_are_steps_and_a_bare_display_joins_the_paragraph_it_follows():
    assert split_solution("First paragraph is here.\n\n$$x = 1$$\n\nSecond paragraph.") == ["First paragraph is here.\n\n$$x = 1$$", "Second paragraph."]
    assert split_solution("A one. B two. C three. D four.") == ["A one. B two. C three.", "D four."]  # at most 3 sentences
    assert split_solution("So $5^2 = \\boxed{25}$.") == ["So $5^2 = \\boxed{25}$."]  # one short paragraph: one step
    # a blank line inside a figure or a display is not a paragraph break
    fig = "As shown:\n[asy]\ndraw(A--B);\n\nlabel(\"$A$\", A);\n[/asy]\nThe rest. It is $\\boxed{1}$."
    assert split_solution(fig) == [fig]


@pytest.mark.parametrize("text, answer", [
    ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ("first $\\boxed{3}$, then $\\boxed{\\{1, 2\\}}$", "\\{1, 2\\}"),  # the last box; escaped braces are not braces
    ("our answer is $\\boxed 9$.", "9"),
    ("$\\boxed{\\text{(C)}}$", "\\text{(C)}"),
    ("$\\boxed{\\frac{1}{2}$", None),  # unbalanced
    ("no box here", None),
])
def test_boxed_answer_is_brace_balanced(text, answer):
    assert boxed_answer(text) == answer


def test_bad_lines_are_skipped_and_named(tmp_path):
    path = tmp_path / "m.jsonl"
    _write(path, [
        _row(0),
        "{not json",
        _row(2, problem=""),
        _row(3, solution="The answer is 4."),
        _row(4, solution=""),
        "[1, 2]",
        _row(6, problem="What is $5^2$?", solution="So $5^2 = \\boxed{25}$."),
        _row(0, problem="Another problem?"),  # the id of line 1 again
        _row(9, problem="Which?", solution="So it is $\\boxed{}$."),
    ])
    sources, skipped = read_math(path)
    assert [s.id for s in sources] == ["math-train/algebra/0", "math-train/algebra/6"]
    assert skipped == [
        f"{path}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{path}:3: no 'problem' text",
        f"{path}:4: no \\boxed{{...}} answer in the solution",
        f"{path}:5: no 'solution' text",
        f"{path}:6: not a JSON object",
        f"{path}:8: repeated id 'train/algebra/0'",
        f"{path}:9: an empty \\boxed{{}} answer",
    ]
    first, one_step = sources
    assert first.lines == NUMBER_STEPS and one_step.lines == ["So $5^2 = \\boxed{25}$."]  # a one-step solution is kept
    assert first.metadata == {"source": "math", "answer": "2", "level": "Level 2", "type": "Algebra", "math_id": "train/algebra/0"}


def test_each_kind_changes_one_token_of_one_step():
    def sites(kind):
        e = Editor(NUMBER_STEPS, random.Random(0))
        return [(s.step, NUMBER_STEPS[s.step][s.start : s.end]) for s in e.sites(kind)]

    # `n = 2` has a bare name on the left (not worked out): not a miscalculation site; the box is wrong_answer's
    assert sites("miscalculation") == [(1, "7"), (1, "6")]
    assert sites("sign_error") == [(1, "-")]  # the - of the right side 10 - 3; 3n + 1 is a left side
    assert sites("flipped_relation") == [(2, ">")]
    assert sites("wrong_answer") == [(3, "2")]
    e = Editor(NUMBER_STEPS, random.Random(0))
    sign = e.edit("sign_error")
    assert sign.step == 1 and sign.steps == [NUMBER_STEPS[0], "Then $3n + 1 = 10 + 3 = 7$, so $3n = 6$.", *NUMBER_STEPS[2:]]
    rel = e.edit("flipped_relation")
    assert rel.step == 2 and rel.steps[2] == "Dividing, $n = 2$, and $n < 1$." and rel.steps[:2] + rel.steps[3:] == NUMBER_STEPS[:2] + NUMBER_STEPS[3:]
    ans = e.edit("wrong_answer")
    assert ans.step == 3 and ans.steps[3] in {f"The answer is $\\boxed{{{v}}}$." for v in (0, 1, 3, 4)}  # off by one or two, not negative


@pytest.mark.parametrize("seed", range(4))
def test_variant_labels_are_first_error_and_later_steps_unsupervised(seed):
    counts: Counter = Counter()
    src = Source("q", NUMBER_Q, NUMBER_STEPS, metadata={"source": "math", "answer": "2"})
    recs = variants_of(src, BuildConfig(variants=4), random.Random(seed), counts)
    assert recs[0].steps == NUMBER_STEPS and recs[0].labels == [1.0] * 4 and recs[0].outcome == 1.0
    assert sorted(r.metadata["kind"] for r in recs[1:]) == sorted(MATH_KINDS)  # every kind has a site here
    first_error = {"miscalculation": 1, "sign_error": 1, "flipped_relation": 2, "wrong_answer": 3}
    for r in recs[1:]:
        k = first_error[r.metadata["kind"]]
        assert r.metadata["error_step"] == k and r.labels == [1.0] * k + [0.0] + [None] * (3 - k)
        assert r.steps[:k] == NUMBER_STEPS[:k] and r.steps[k] != NUMBER_STEPS[k]
        assert r.outcome == (0.0 if r.metadata["kind"] == "wrong_answer" else None)  # only a changed final answer is known wrong
    assert counts == Counter({f"{k}.made": 1 for k in MATH_KINDS})
    again = variants_of(src, BuildConfig(variants=4), random.Random(seed), Counter())
    assert [r.steps for r in again] == [r.steps for r in recs]  # deterministic per seed


@pytest.mark.parametrize("seed", range(4))
def test_a_wrong_value_is_carried_where_it_is_written_again(seed):
    src = Source("a", "How many apples are in 4 bags of 3?", APPLES_STEPS, metadata={"source": "math", "answer": "12"})
    _, v = variants_of(src, BuildConfig(kinds=["miscalculation"], variants=1), random.Random(seed), Counter())
    wrong = v.steps[0].removeprefix("We get $4 \\cdot 3 = ").removesuffix("$.")
    assert wrong in {"10", "11", "13", "14", "-12", "21"}  # off by one or two, the other sign, digits swapped
    assert v.steps == [f"We get $4 \\cdot 3 = {wrong}$.", f"So $x = {wrong}$, hence $y = x$.", f"The answer is $\\boxed{{{wrong}}}$."]
    assert v.labels == [0.0, None, None] and v.outcome == 0.0 and v.metadata["detail"] == {"was": "12", "now": wrong}


def test_a_kind_without_a_site_is_skipped_and_counted():
    src = Source("s", "What is $5^2$?", ["So $5^2 = \\boxed{25}$."], metadata={"source": "math", "answer": "25"})
    counts: Counter = Counter()
    recs = variants_of(src, BuildConfig(variants=4), random.Random(0), counts)
    # 5^2 = \boxed{25}: the only number is the answer's, no sign, no relation
    assert [r.metadata["kind"] for r in recs] == ["original", "wrong_answer"] and recs[1].labels == [0.0]
    assert counts == Counter({"wrong_answer.made": 1, "miscalculation.skipped": 1, "sign_error.skipped": 1, "flipped_relation.skipped": 1})


def _twenty(tmp_path):
    path = tmp_path / "m.jsonl"
    _write(path, [_row(i, problem=f"{NUMBER_Q} (copy {i})") for i in range(20)])
    return path


def test_cli_writes_train_dev_and_summary_with_whole_problems_held_out(tmp_path, capsys):
    path, out = _twenty(tmp_path), tmp_path / "out"
    assert main(["data", "math", "--input", str(path), "--output", str(out), "--variants", "2", "--dev-fraction", "0.2"]) == 0
    train, dev = read_jsonl(out / "train.jsonl"), read_jsonl(out / "dev.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    assert {r.question for r in train}.isdisjoint({r.question for r in dev}) and len({r.question for r in dev}) == 4
    # per problem: the original and 2 variants (every kind has a site in this solution)
    assert summary["solutions"] == 20 and summary["records"] == len(train) + len(dev) == 60 and summary["originals"] == 20
    assert sum(v["made"] for v in summary["variants"].values()) == 40 and set(summary["variants"]) == set(MATH_KINDS)
    assert summary["labels"]["bad"] == 40 and summary["steps_per_solution"] == 4.0 and summary["excluded_problems"] == 0
    assert "20 solutions (0 input lines skipped) -> 60 records" in capsys.readouterr().out


def test_exclusion_drops_exactly_the_equal_problems_and_reports_the_count(tmp_path, capsys):
    path, out = _twenty(tmp_path), tmp_path / "out"
    pb = tmp_path / "pb.json"  # ProcessBench: a list of {problem, steps, label}; spaces around the text do not matter
    pb.write_text(json.dumps([{"id": "m-1", "problem": f"  {NUMBER_Q} (copy 3)\n", "steps": ["x"], "label": -1},
                              {"id": "m-2", "problem": f"{NUMBER_Q} (copy 3", "steps": ["x"], "label": 0}]))
    ours = tmp_path / "ours.jsonl"  # our records: {question, steps, ...}
    _write(ours, [{"id": "r", "question": f"{NUMBER_Q} (copy 11)", "steps": ["x"]}])
    assert excluded_questions([pb, ours]) == {f"{NUMBER_Q} (copy 3)", f"{NUMBER_Q} (copy 3", f"{NUMBER_Q} (copy 11)"}
    assert main(["data", "math", "--input", str(path), "--output", str(out), "--exclude", str(pb), "--exclude", str(ours)]) == 0
    questions = {r.question for f in ("train.jsonl", "dev.jsonl") for r in read_jsonl(out / f)}
    assert questions == {f"{NUMBER_Q} (copy {i})" for i in range(20) if i not in (3, 11)}
    assert json.loads((out / "summary.json").read_text())["excluded_problems"] == 2
    assert "excluded 2 problem(s)" in capsys.readouterr().out


def test_cli_bad_input_exits_2(tmp_path, capsys):
    path = _twenty(tmp_path)
    assert main(["data", "math", "--input", str(tmp_path / "absent.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "absent.jsonl" in capsys.readouterr().err
    assert main(["data", "math", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 2  # a folder
    assert main(["data", "math", "--input", str(path), "--output", str(tmp_path / "o"), "--exclude", str(tmp_path / "no.json")]) == 2
    assert "no.json" in capsys.readouterr().err
    assert main(["data", "math", "--input", str(path), "--output", str(tmp_path / "o"), "--kinds", "dropped_term"]) == 2  # a GSM8K kind
    assert "do not apply to this source" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_exactly_one_math_train_problem_is_a_processbench_problem(shared_data):
    sources, skipped = read_math(shared_data("math", "train.jsonl"))
    pb = excluded_questions([shared_data("processbench", "math.json")])
    # two MATH solutions end in an empty box (number_theory/7115 and 7117, lines 5342 and 5344)
    assert len(sources) == 7498 and [x.split(":", 1)[1] for x in skipped] == ["5342: an empty \\boxed{} answer", "5344: an empty \\boxed{} answer"]
    assert sum(s.question.strip() in pb for s in sources) == 1  # the README: MATH's one train/test duplicate
