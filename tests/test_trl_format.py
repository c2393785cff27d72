"""`--format trl` / `data.format=trl`: the stepwise-supervision rows TRL's removed PRMTrainer read, so its
users train, evaluate and build data from the files they already have (JSONL or Parquet)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prm_distill.cli import main
from prm_distill.records import RecordError, load_records

ROWS = [
    {"prompt": "What is 2 + 3?", "completions": ["2 + 3 = 5.", "The answer is 5."], "labels": [True, True]},
    {"prompt": "What is 4 * 6?", "completions": ["4 * 6 = 20.", "So 20 + 1 = 21.", "The answer is 21."], "labels": [False, True, False]},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_trl_rows_become_records_with_every_label_kept(tmp_path):
    recs = load_records(_jsonl(tmp_path / "prm_trl.jsonl", ROWS), "trl")
    assert [r.id for r in recs] == ["prm_trl:1", "prm_trl:2"]
    assert recs[0].question == "What is 2 + 3?" and recs[0].steps == ["2 + 3 = 5.", "The answer is 5."]
    assert recs[0].labels == [1.0, 1.0] and recs[0].first_error == -1
    # PRMTrainer trains on every label: the True after the first False stays 1, not unsupervised
    assert recs[1].labels == [0.0, 1.0, 0.0] and recs[1].first_error == 0


def test_parquet_and_jsonl_give_the_same_records(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "prm_trl.parquet")
    from_parquet = load_records(tmp_path / "prm_trl.parquet", "trl")
    from_jsonl = load_records(_jsonl(tmp_path / "prm_trl.jsonl", ROWS), "trl")
    assert [r.to_dict() for r in from_parquet] == [r.to_dict() for r in from_jsonl]


def test_conversational_prompt_gives_its_last_user_message(tmp_path):
    row = {"prompt": [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "What is 7 - 2?"}],
           "completions": ["7 - 2 = 5."], "labels": [True], "id": "c1", "index": 7}
    (rec,) = load_records(_jsonl(tmp_path / "c.jsonl", [row]), "trl")
    assert rec.question == "What is 7 - 2?" and rec.id == "c1" and rec.metadata == {"source": "trl", "index": 7}


@pytest.mark.parametrize("bad, field", [
    ({"prompt": "q", "labels": [True]}, "completions"),
    ({"prompt": "q", "completions": ["a", "b"], "labels": [True]}, "labels"),
    ({"prompt": "q", "completions": ["a"], "labels": ["yes"]}, "labels[0]"),
    ({"prompt": "q", "completions": ["a", " "], "labels": [True, True]}, "steps[1]"),
    ({"prompt": [{"role": "system", "content": "x"}], "completions": ["a"], "labels": [True]}, "prompt"),
    ({"prompt": "q", "completions": ["a"], "labels": True}, "labels"),
])
def test_a_malformed_row_names_file_line_and_field(tmp_path, bad, field):
    path = _jsonl(tmp_path / "bad.jsonl", [ROWS[0], bad])
    with pytest.raises(RecordError) as e:
        load_records(path, "trl")
    assert str(e.value).startswith(f"{path}:2: field '{field}': ")


def test_parquet_errors_name_the_file_row_or_missing_column(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"prompt": "q", "completions": ["a"]}]), tmp_path / "nolabels.parquet")
    with pytest.raises(RecordError, match=r"nolabels.parquet: no column\(s\) labels"):
        load_records(tmp_path / "nolabels.parquet", "trl")
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(RecordError, match="fake.parquet: not a readable Parquet file"):
        load_records(tmp_path / "fake.parquet", "trl")
    pq.write_table(pa.Table.from_pylist([ROWS[0], {"prompt": "q", "completions": ["a", "b"], "labels": [True]}]), tmp_path / "short.parquet")
    with pytest.raises(RecordError, match=r"short.parquet:row 2: field 'labels'"):
        load_records(tmp_path / "short.parquet", "trl")


def test_repeated_ids_are_refused(tmp_path):
    rows = [{**ROWS[0], "id": "a"}, {**ROWS[1], "id": "a"}]
    with pytest.raises(RecordError, match=r"dup.jsonl:2: field 'id': duplicate id 'a' \(first at 1\)"):
        load_records(_jsonl(tmp_path / "dup.jsonl", rows), "trl")


def test_train_and_eval_read_trl_files(tiny_backbone, train_overrides, tmp_path):
    # 24 rows: a correct and a wrong solution of 12 problems; training on them and evaluating them with --format trl
    rows = []
    for a in range(12):
        rows.append({"prompt": f"What is {a} + 1?", "completions": [f"{a} + 1 = {a + 1}.", f"The answer is {a + 1}."], "labels": [True, True]})
        rows.append({"prompt": f"What is {a} + 1?", "completions": [f"{a} + 1 = {a + 2}.", f"The answer is {a + 2}."], "labels": [False, False]})
    train, dev = _jsonl(tmp_path / "train.jsonl", rows[:16]), _jsonl(tmp_path / "dev.jsonl", rows[16:])
    out = tmp_path / "model"
    assert main(["train", *train_overrides(tiny_backbone, {"train": train, "dev": dev}, out, **{"data.format": "trl", "optim.max_steps": 2})]) == 0
    assert (out / "prm_distill.json").is_file()
    report = tmp_path / "eval.json"
    assert main(["eval", "--model", str(out), "--data", str(dev), "--format", "trl", "--threshold", "0.5", "--output", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["n_items"] == 8 and rep["n_steps"] == 16 and rep["format"] == "trl"
