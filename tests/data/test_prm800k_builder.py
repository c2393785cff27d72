"""`prm-distill data prm800k` on a small PRM800K-shaped Parquet file written here. Every expected record is
worked out by hand from the rows below (row i -> record `prm800k-i`)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prm_distill.cli import main
from prm_distill.records import read_jsonl

A, B, C = "What is 1+1?", "What is 2*3?", "What is 5-2?"
ADD = "We add 1 and 1."
ROWS = [
    # (instruction, responses, next_response, rating, is_human_response, is_solution)
    (A, [], ADD, 1.0, False, False),                                        # 0: a good partial step
    (A, [ADD], "1+1=3.", -1.0, False, False),                               # 1: first error at step 1
    (A, [ADD], "1+1=2.", 0.0, False, False),                                # 2: neutral partial step
    (A, [ADD, "1+1=2."], "The answer is 2.", 1.0, False, True),             # 3: all-correct solution
    (A, [ADD, "1+1=3."], "The answer is 3.", -1.0, False, False),           # 4: after an earlier error
    (A, [ADD, "1+1=2."], "So it is 4.", -1.0, False, False),                # 5: first error at step 2 (after the neutral one)
    (B, [], "", 1.0, False, False),                                         # 6: malformed, empty step
    (B, [], "2*3=5.", -1.0, False, False),                                  # 7: first error at step 0
    (B, [], "2*3 = 5", 2.0, False, False),                                  # 8: malformed rating
    (B, [], "2*3=6.", None, True, False),                                   # 9: a human-written step
    (B, ["2*3=6."], "The answer is 6.", 1.0, False, True),                  # 10: solution after the human step
    (B, [], "Let me think.", None, False, False),                           # 11: unrated model step
    (C, [], "5-2=4.", -1.0, False, False),                                  # 12: first error at 0
    (C, [], "5-2=1.", -1.0, False, False),                                  # 13: first error at 0
    (C, [], "5 minus 2 is 3.", 1.0, False, False),                          # 14
    (C, ["5 minus 2 is 3."], "So 5-2=7.", -1.0, False, False),              # 15: first error at 1
]


def write_parquet(path, rows=ROWS, drop: str | None = None, preferred: frozenset[int] = frozenset()):
    cols = {
        "instruction": [r[0] for r in rows], "responses": [r[1] for r in rows], "next_response": [r[2] for r in rows],
        "answer": [None] * len(rows), "is_human_response": [r[4] for r in rows], "is_solution": [r[5] for r in rows],
        "is_preferred_response": [i in preferred for i in range(len(rows))], "rating": [r[3] for r in rows], "error_reason": [None] * len(rows),
    }
    cols["responses"] = pa.array(cols["responses"], type=pa.list_(pa.string()))
    if drop:
        cols.pop(drop)
    pq.write_table(pa.table(cols), path)
    return path


def build(tmp_path, *extra: str, rows=ROWS, preferred: frozenset[int] = frozenset()):
    src = write_parquet(tmp_path / "p.parquet", rows, preferred=preferred)
    out = tmp_path / "out"
    assert main(["data", "prm800k", "--input", str(src), "--output", str(out), "--dev-fraction", "0", *extra]) == 0
    summary = json.loads((out / "summary.json").read_text())
    return {r.id: r for r in read_jsonl(out / "train.jsonl") + read_jsonl(out / "dev.jsonl")}, summary, out


def test_first_errors_and_solutions_with_earlier_steps_labelled_by_their_own_rows(tmp_path):
    recs, summary, _ = build(tmp_path, "--negatives-per-problem", "0")
    assert sorted(recs) == sorted(f"prm800k-{i}" for i in (1, 3, 5, 7, 10, 12, 13, 15))
    assert recs["prm800k-1"].steps == [ADD, "1+1=3."] and recs["prm800k-1"].labels == [1.0, 0.0]
    assert recs["prm800k-3"].labels == [1.0, 1.0, 1.0] and recs["prm800k-3"].outcome == 1.0  # neutral -> good (the default)
    assert recs["prm800k-5"].labels == [1.0, 1.0, 0.0] and recs["prm800k-5"].metadata["error_step"] == 2
    assert recs["prm800k-7"].labels == [0.0]
    assert recs["prm800k-10"].labels == [1.0, 1.0]  # the human-written step counts as good
    assert summary["malformed_rows"] == 2 and [m.split(": ", 1)[1] for m in summary["malformed"]] == [
        "row 6: empty 'next_response' (the rated step)", "row 8: rating 2.0 is not -1, 0, 1 or null"]
    assert summary["skipped"]["after_an_earlier_error"] == 1 and summary["skipped"]["unrated_rows"] == 1
    assert (summary["first_error"], summary["solutions"]) == (6, 2)


@pytest.mark.parametrize(("neutral", "want"), [("half", 0.5), ("unsupervised", None)])
def test_what_a_neutral_rating_means_is_an_option(tmp_path, neutral, want):
    recs, _, _ = build(tmp_path, "--neutral", neutral)
    assert recs["prm800k-3"].labels == [1.0, want, 1.0]
    assert recs["prm800k-5"].labels == [1.0, want, 0.0]


def test_rated_alternatives_off_the_preferred_path_become_items_of_their_own_when_asked(tmp_path):
    # Rows 0 and 14 on the preferred path: the one alternative left is row 2 (rated 0), after row 0's step.
    recs, summary, _ = build(tmp_path, "--alternatives-per-problem", "8", preferred=frozenset({0, 14}))
    alt = recs["prm800k-2"]
    assert alt.steps == [ADD, "1+1=2."] and alt.labels == [1.0, 1.0] and alt.outcome is None and alt.metadata["kind"] == "alternative"
    assert summary["alternatives"] == 1 and summary["records"] == 9  # the 8 items of the first test, and this one
    half, _, _ = build(tmp_path, "--alternatives-per-problem", "8", "--neutral", "half", preferred=frozenset({0, 14}))
    assert half["prm800k-2"].labels == [1.0, 0.5]
    # Nothing preferred: rows 0, 2 (A) and 14 (C) are alternatives; the human step (9) and the unrated one (11) are not.
    every, _, _ = build(tmp_path, "--alternatives-per-problem", "8")
    assert {i: r.labels for i, r in every.items() if r.metadata["kind"] == "alternative"} == {
        "prm800k-0": [1.0], "prm800k-2": [1.0, 1.0], "prm800k-14": [1.0]}
    # An alternative with the same steps as a solution (an earlier row) gives way to the solution.
    twin, twins, _ = build(tmp_path, "--alternatives-per-problem", "8", rows=[
        (A, [], ADD, 1.0, False, False), (A, [ADD], "1+1=2.", 1.0, False, False), (A, [ADD], "1+1=2.", 1.0, False, True)])
    assert sorted(twin) == ["prm800k-0", "prm800k-2"] and twin["prm800k-2"].metadata["kind"] == "solution"
    assert twins["skipped"]["duplicates"] == 1
    one, capped, _ = build(tmp_path, "--alternatives-per-problem", "1")
    assert sorted(r.question for r in one.values() if r.metadata["kind"] == "alternative") == [A, C]
    assert capped["skipped"]["alternatives_capped"] == 1


def test_the_cap_keeps_distinct_first_error_positions_first(tmp_path):
    recs, summary, _ = build(tmp_path, "--negatives-per-problem", "2")
    c = [r for r in recs.values() if r.question == C]
    assert sorted(r.metadata["error_step"] for r in c) == [0, 1]  # one of rows 12/13 (position 0) and row 15 (position 1)
    assert summary["skipped"]["negatives_capped"] == 1
    recs1, _, _ = build(tmp_path, "--negatives-per-problem", "1")
    assert sum(r.metadata["kind"] == "first_error" for r in recs1.values()) == 3  # one per problem


def test_exclusion_sides_and_dedup_against_another_source(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps([{"id": "x", "problem": C + "  ", "steps": ["s"], "label": -1}]))
    other_dev = tmp_path / "other_dev.jsonl"
    other_dev.write_text(json.dumps({"id": "d1", "question": A, "steps": ["a step"], "labels": [1.0]}) + "\n")
    other_train = tmp_path / "other_train.jsonl"
    other_train.write_text(json.dumps({"id": "t1", "question": B, "steps": ["2*3=6.", "The answer is 6."], "labels": [1.0, 1.0]}) + "\n")
    src = write_parquet(tmp_path / "p.parquet")
    out = tmp_path / "out"
    assert main(["data", "prm800k", "--input", str(src), "--output", str(out), "--dev-fraction", "0.99", "--exclude", str(bench),
                 "--dev-with", str(other_dev), "--train-with", str(other_train)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    train, dev = read_jsonl(out / "train.jsonl"), read_jsonl(out / "dev.jsonl")
    assert summary["excluded_problems"] == 1 and all(r.question != C for r in train + dev)
    assert {r.question for r in dev} == {A} and {r.question for r in train} == {B}  # sides kept, whatever the fraction
    assert summary["skipped"]["in_another_source"] == 1 and [r.id for r in train] == ["prm800k-7"]


def test_a_file_that_is_not_parquet_is_exit_2_naming_it(tmp_path, capsys):
    bad = tmp_path / "rows.parquet"
    bad.write_text("not parquet at all\n")
    assert main(["data", "prm800k", "--input", str(bad), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a readable Parquet file" in err and "Traceback" not in err
    no_rating = write_parquet(tmp_path / "nr.parquet", drop="rating")
    assert main(["data", "prm800k", "--input", str(no_rating), "--output", str(tmp_path / "o")]) == 2
    assert "no column(s) rating" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written
