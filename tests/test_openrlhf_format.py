"""`--format openrlhf` / `data.format=openrlhf`: the rows OpenRLHF's removed PRM trainer read in its recipes
(Math-Shepherd's layout: `input` with the placeholder `ки` after each step, `value` with `+` / `-` per placeholder),
so its users train and evaluate on the files they already have (JSONL or Parquet)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prm_distill.cli import main
from prm_distill.records import RecordError, load_records

ROWS = [
    {"input": "Tom has 3 boxes of 4 pens. How many pens? Step 1: 3 boxes x 4 pens = 12 pens. ки\nStep 2: The answer is 12. ки",
     "value": ["+", "+"], "task": "GSM8K"},
    {"input": "What is 10 - 7? Step 1: 10 - 7 = 4. ки\nStep 2: So the difference\nis 4. ки\nStep 3: The answer is 4. ки",
     "value": ["-", "-", "-"]},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rows_become_records_split_at_step_1_and_at_each_placeholder(tmp_path):
    a, b = load_records(_jsonl(tmp_path / "shepherd.jsonl", ROWS), "openrlhf")
    assert (a.id, a.question) == ("shepherd:1", "Tom has 3 boxes of 4 pens. How many pens?")
    assert a.steps == ["Step 1: 3 boxes x 4 pens = 12 pens.", "Step 2: The answer is 12."] and a.labels == [1.0, 1.0]
    assert a.metadata == {"source": "openrlhf", "task": "GSM8K"}
    # a newline inside a step stays in it: only the placeholder ends a step; every label is kept, as OpenRLHF trained
    assert b.steps == ["Step 1: 10 - 7 = 4.", "Step 2: So the difference\nis 4.", "Step 3: The answer is 4."]
    assert b.labels == [0.0, 0.0, 0.0] and b.first_error == 0 and b.id == "shepherd:2"


def test_label_text_numbers_and_parquet_read_as_the_list_form(tmp_path):
    # Math-Shepherd's own `label`: the input with + or - where each placeholder was
    text = {"input": ROWS[1]["input"], "label": ROWS[1]["input"].replace("ки", "+", 1).replace("ки", "-")}
    (rec,) = load_records(_jsonl(tmp_path / "text.jsonl", [text]), "openrlhf")
    assert rec.labels == [1.0, 0.0, 0.0] and rec.steps[1] == "Step 2: So the difference\nis 4."
    soft = {"input": ROWS[0]["input"], "value": [0.75, 0]}  # OpenRLHF's float labels: soft targets, kept as given
    assert load_records(_jsonl(tmp_path / "soft.jsonl", [soft]), "openrlhf")[0].labels == [0.75, 0.0]
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "shepherd.parquet")
    from_parquet = load_records(tmp_path / "shepherd.parquet", "openrlhf")
    assert [r.to_dict() for r in from_parquet] == [r.to_dict() for r in load_records(_jsonl(tmp_path / "shepherd.jsonl", ROWS), "openrlhf")]


@pytest.mark.parametrize("bad,field,why", [
    ({"value": ["+"]}, "input", "missing"),
    ({"input": "q Step 1: a ки"}, "value", "missing: one label per placeholder"),
    ({"input": "q Step 1: a", "value": ["+"]}, "input", "no placeholder 'ки'"),
    ({"input": "q Step 1: a ки and more", "value": ["+"]}, "input", "text after the last placeholder has no label: 'and more'"),
    ({"input": "What is 1 + 1? 1 + 1 = 2. ки", "value": ["+"]}, "input", "no 'Step 1:' before the first placeholder"),
    ({"input": "q Step 1: a ки", "value": ["+", "+"]}, "value", "2 labels for 1 placeholders"),
    ({"input": "q Step 1: a ки", "value": ["?"]}, "value[0]", "must be '+', '-' or a number in [0, 1], got '?'"),
    ({"input": "q Step 1: a ки", "value": [1.5]}, "value[0]", "got 1.5"),
    ({"input": "q Step 1: a ки", "value": "+"}, "value", "the label text differs from the input before placeholder 1"),
    ({"input": "q Step 1: a ки", "label": "q Step 1: b +"}, "label", "the label text differs from the input before placeholder 1"),
    ({"input": "q Step 1: a ки\nStep 2: b ки", "label": "q Step 1: a +\nStep 2: b -!"}, "label", "the label text is longer than the input"),
    ({"input": "q Step 1: a ки.", "label": "q Step 1: a +!"}, "input", "text after the last placeholder has no label: '.'"),
    ({"input": "q Step 1: a ки\n", "label": "q Step 1: a +"}, "label", "the label text differs from the input after the last placeholder"),
    ({"input": "q Step 1: a ки\nStep 2: b ки", "value": ["+", "+"], "id": 5}, "id", "duplicate id '5' (first at 1)"),
    ({"input": "Step 1: a ки", "value": ["+"]}, "question", "must be a non-empty string"),
    ({"input": "q Step 1: a ки ки", "value": ["+", "+"]}, "steps[1]", "must be a non-empty string"),
])
def test_a_malformed_row_names_file_line_field_and_why(tmp_path, bad, field, why):
    path = _jsonl(tmp_path / "bad.jsonl", [{**ROWS[0], "id": 5}, bad])
    with pytest.raises(RecordError) as e:
        load_records(path, "openrlhf")
    assert str(e.value).startswith(f"{path}:2: field '{field}': ") and why in str(e.value)


def test_train_and_eval_read_openrlhf_files(tiny_backbone, train_overrides, tmp_path):
    # a correct and a wrong solution of 12 problems; trained on and evaluated with --format openrlhf
    rows = []
    for a in range(12):
        for got, mark in ((a + 1, "+"), (a + 2, "-")):
            rows.append({"input": f"What is {a} + 1? Step 1: {a} + 1 = {got}. ки\nStep 2: The answer is {got}. ки", "value": [mark, mark]})
    train, dev = _jsonl(tmp_path / "train.jsonl", rows[:16]), _jsonl(tmp_path / "dev.jsonl", rows[16:])
    out = tmp_path / "model"
    assert main(["train", *train_overrides(tiny_backbone, {"train": train, "dev": dev}, out, **{"data.format": "openrlhf", "optim.max_steps": 2})]) == 0
    report = tmp_path / "eval.json"
    assert main(["eval", "--model", str(out), "--data", str(dev), "--format", "openrlhf", "--threshold", "0.5", "--output", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["n_items"] == 8 and rep["n_steps"] == 16 and rep["format"] == "openrlhf"


def test_data_steps_turns_openrlhf_rows_into_records_to_mix_with_other_sources(tmp_path, capsys):
    # 30 problems, a correct and a wrong solution each; `data steps --variants 0` writes them as records with a
    # question-disjoint dev split, dropping the problems of a test file given with --exclude
    rows = []
    for a in range(30):
        for got, mark in ((a + 1, "+"), (a + 2, "-")):
            rows.append({"input": f"What is {a} + 1? Step 1: {a} + 1 = {got}. ки\nStep 2: The answer is {got}. ки", "value": [mark, mark]})
    src = _jsonl(tmp_path / "shepherd.jsonl", rows)
    test = tmp_path / "test.json"
    test.write_text(json.dumps([{"id": "t", "problem": "What is 0 + 1?", "steps": ["0 + 1 = 1."], "label": -1}]))
    out = tmp_path / "records"
    assert main(["data", "steps", "--format", "openrlhf", "--input", str(src), "--output", str(out), "--variants", "0", "--exclude", str(test)]) == 0
    assert "excluded 1 problem(s)" in capsys.readouterr().out
    train, dev = load_records(out / "train.jsonl"), load_records(out / "dev.jsonl")
    recs = train + dev
    assert len(recs) == 58 and "What is 0 + 1?" not in {r.question for r in recs}
    assert not {r.question for r in train} & {r.question for r in dev}
    by_answer = {(r.question, r.steps[-1]): r.labels for r in recs}
    assert by_answer["What is 4 + 1?", "Step 2: The answer is 5."] == [1.0, 1.0]
    assert by_answer["What is 4 + 1?", "Step 2: The answer is 6."] == [0.0, 0.0]
