import json

import pytest

from prm_distill.records import (
    RecordError,
    Trajectory,
    from_dataset,
    load_records,
    read_jsonl,
    read_prmbench,
    read_processbench,
    to_dataset,
    write_jsonl,
)


def _write_lines(path, objs):
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


GOOD = {"id": "a", "question": "What is 2+3?", "steps": ["2+3=5.", "The answer is 5."], "labels": [1.0, None]}


def test_jsonl_round_trip_keeps_soft_and_missing_labels(tmp_path):
    recs = [
        Trajectory(id="a", question="Q?", steps=["s1", "s2", "s3"], labels=[1.0, 0.5, None], votes=[[1, 1], [0, 1], []], outcome=0.0, metadata={"k": 1}),
        Trajectory(id="b", question="Q2?", steps=["only"]),
    ]
    write_jsonl(recs, tmp_path / "r.jsonl")
    back = read_jsonl(tmp_path / "r.jsonl")
    assert back == recs
    assert back[0].labels[1] == 0.5 and back[0].labels[2] is None


@pytest.mark.parametrize(
    "bad, field",
    [
        ({**GOOD, "labels": [1.0, 1.5]}, "labels[1]"),
        ({**GOOD, "labels": [1.0, -0.1]}, "labels[1]"),
        ({**GOOD, "labels": [1.0]}, "labels"),
        ({**GOOD, "labels": [True, 1.0]}, "labels[0]"),
        ({**GOOD, "steps": ["ok", "  "]}, "steps[1]"),
        ({**GOOD, "steps": []}, "steps"),
        ({**GOOD, "question": ""}, "question"),
        ({k: v for k, v in GOOD.items() if k != "steps"}, "steps"),
        ({**GOOD, "extra": 1}, "extra"),
        ({**GOOD, "votes": [[1.0], [2.0]]}, "votes[1]"),
    ],
)
def test_bad_record_error_names_file_line_and_field(tmp_path, bad, field):
    path = _write_lines(tmp_path / "bad.jsonl", [{**GOOD, "id": "first"}, bad])
    with pytest.raises(RecordError) as err:
        read_jsonl(path)
    assert err.value.line == 2 and err.value.field == field
    assert "bad.jsonl:2" in str(err.value) and field in str(err.value)


def test_invalid_json_and_duplicate_ids_name_their_line(tmp_path):
    path = _write_lines(tmp_path / "x.jsonl", [GOOD, "{not json"])
    with pytest.raises(RecordError, match=r"x.jsonl:2: invalid JSON"):
        read_jsonl(path)
    path = _write_lines(tmp_path / "d.jsonl", [GOOD, "", GOOD])
    with pytest.raises(RecordError, match=r"d.jsonl:3: field 'id': duplicate id 'a' \(first on line 1\)"):
        read_jsonl(path)


def test_datasets_round_trip_keeps_unsupervised_steps():
    recs = [Trajectory(id="a", question="Q?", steps=["x", "y"], labels=[0.5, None], metadata={"m": "v"}), Trajectory(id="b", question="R?", steps=["z"])]
    ds = to_dataset(recs)
    assert ds.num_rows == 2 and ds[0]["labels"] == [0.5, None]
    back = from_dataset(ds)
    assert back[0].labels == [0.5, None] and back[0].metadata == {"m": "v"}
    assert back[1].labels is None


def test_datasets_rows_are_validated():
    import datasets

    ds = datasets.Dataset.from_list([{"id": "a", "question": "Q", "steps": ["s"], "labels": [3.0]}])
    with pytest.raises(RecordError, match=r"dataset:0: field 'labels\[0\]'"):
        from_dataset(ds)


def test_processbench_labels_before_at_and_after_the_first_error(tmp_path):
    items = [
        {"id": "e", "generator": "g", "problem": "P", "steps": ["a", "b", "c", "d"], "final_answer_correct": False, "label": 1},
        {"id": "ok", "generator": "g", "problem": "P", "steps": ["a", "b"], "final_answer_correct": True, "label": -1},
    ]
    (tmp_path / "pb.json").write_text(json.dumps(items))
    recs = read_processbench(tmp_path / "pb.json")
    assert recs[0].labels == [1.0, 0.0, None, None] and recs[0].first_error == 1
    assert recs[1].labels == [1.0, 1.0] and recs[1].first_error == -1
    items[0]["label"] = 4
    (tmp_path / "pb.json").write_text(json.dumps(items))
    with pytest.raises(RecordError, match="item 0: field 'label'"):
        read_processbench(tmp_path / "pb.json")


def test_prmbench_original_all_good_modified_first_error_and_error_steps(tmp_path, caplog):
    item = {
        "original_question": "Q", "modified_question": "Q", "question": "Q", "idx": "p0", "classification": "circular",
        "original_process": ["o1", "o2", "o3"], "modified_process": ["m1", "m2", "m3", "m4", "m5"], "error_steps": [2, 4],
    }
    path = _write_lines(tmp_path / "pm.jsonl", [item])
    orig, mod = read_prmbench(path)
    assert orig.labels == [1.0, 1.0, 1.0]
    assert mod.labels == [1.0, 0.0, None, 0.0, None]
    assert orig.id != mod.id
    # real items sometimes cite steps past the end: those are dropped, and with none left only the original remains
    (mod2,) = read_prmbench(_write_lines(tmp_path / "pm2.jsonl", [{**item, "error_steps": [3, 9]}]))[1:]
    assert mod2.labels == [1.0, 1.0, 0.0, None, None] and mod2.metadata["dropped_error_steps"] == [9]
    assert len(read_prmbench(_write_lines(tmp_path / "pm3.jsonl", [{**item, "error_steps": [9]}]))) == 1
    # an item whose steps are invalid (a real one has empty steps) is skipped with a warning, the rest kept
    recs = read_prmbench(_write_lines(tmp_path / "pm5.jsonl", [{**item, "original_process": ["o1", ""]}, {**item, "idx": "p1"}]))
    assert [r.id for r in recs] == ["p1-circular-orig", "p1-circular-mod"]
    # a truly invalid item (or a broken line) is skipped and named; the file's other items are read
    path = _write_lines(tmp_path / "pm4.jsonl", [{**item, "error_steps": "2"}, {**item, "idx": "p2"}])
    path.write_text(path.read_text() + "{not json\n")
    with caplog.at_level("WARNING", logger="prm_distill.records"):
        assert [r.id for r in read_prmbench(path)] == ["p2-circular-orig", "p2-circular-mod"]
    assert "pm4.jsonl:1: item skipped: field 'error_steps'" in caplog.text and "pm4.jsonl:3: invalid JSON" in caplog.text
    assert "2 invalid items skipped (lines 1, 3)" in caplog.text
    # a file with no valid item at all is an error, not an empty evaluation
    with pytest.raises(RecordError, match=r"pm6.jsonl: no valid item \(1 invalid, first on line 1\)"):
        read_prmbench(_write_lines(tmp_path / "pm6.jsonl", [{**item, "error_steps": "2"}]))


def test_prmbench_multi_solutions_items_are_two_correct_processes(tmp_path):
    """PRMBench's evaluation files hold `multi_solutions` items: no error step, the modified process
    another correct solution. Both processes are all good; nothing stops on them."""
    item = {
        "original_question": "Q", "modified_question": "Q", "idx": "p0", "classification": "multi_solutions",
        "original_process": ["o1", "o2"], "modified_process": ["m1", "m2", "m3"], "error_steps": [], "modified_steps": [],
    }
    err_item = {**item, "idx": "p1", "classification": "circular", "error_steps": [2], "modified_steps": [2]}
    recs = read_prmbench(_write_lines(tmp_path / "multi.jsonl", [item, err_item]))
    assert [(r.id, r.labels) for r in recs] == [
        ("p0-multi_solutions-orig", [1.0, 1.0]), ("p0-multi_solutions-mod", [1.0, 1.0, 1.0]),
        ("p1-circular-orig", [1.0, 1.0]), ("p1-circular-mod", [1.0, 0.0, None]),
    ]
    assert all(r.first_error == -1 for r in recs[:2])


def test_unknown_format_and_missing_file_are_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        load_records(tmp_path / "x", "csv")
    with pytest.raises(FileNotFoundError, match="data file not found"):
        load_records(tmp_path / "missing.jsonl")


@pytest.mark.data
def test_real_processbench_and_prmbench_files_load(shared_data):
    gsm = read_processbench(shared_data("processbench", "gsm8k.json"))
    assert len(gsm) == 400
    assert sum(r.first_error == -1 for r in gsm) > 0 and sum(r.first_error >= 0 for r in gsm) > 0
    for r in gsm:
        fe = r.first_error
        if fe >= 0:
            assert r.labels[:fe] == [1.0] * fe and r.labels[fe] == 0.0 and all(x is None for x in r.labels[fe + 1 :])
    pm = read_prmbench(shared_data("prmbench", "train_p1_first400_4o_circular.jsonl"))
    assert 790 <= len(pm) <= 802 and len({r.id for r in pm}) == len(pm)
    assert sum(r.id.endswith('-orig') for r in pm) >= 400


def test_sample_questions_keeps_whole_questions_seeded_and_in_order():
    from prm_distill.records import Trajectory, sample_questions

    recs = [Trajectory(id=f"{q}{i}", question=q, steps=["s"], labels=[1.0]) for q, n in [("a", 3), ("b", 1), ("c", 2), ("d", 2)] for i in range(n)]
    one = sample_questions(recs, 3, seed=7)
    assert one == sample_questions(recs, 3, seed=7)  # the same items on every path that samples
    kept = {r.question for r in one}
    assert all((r.question in kept) == (r in one) for r in recs)  # a question is kept whole or not at all
    assert len(one) >= 3 and len(one) < 3 + 3  # stops once the limit is reached (a question holds at most 3)
    assert [r.id for r in one] == [r.id for r in recs if r.question in kept]  # file order
    assert sample_questions(recs, None) == recs and sample_questions(recs, 100) == recs


def test_invalid_json_names_line_and_column_strict_and_skipped(tmp_path):
    from prm_distill.records import read_inputs

    path = _write_lines(tmp_path / "c.jsonl", [GOOD, '{"id": "b", oops}'])
    with pytest.raises(RecordError, match=r"c.jsonl:2: invalid JSON \(Expecting property name enclosed in double quotes at column 13\)"):
        read_jsonl(path)
    skipped: list = []
    read_inputs(path, lambda obj, line: obj, skipped=skipped)
    assert skipped == [{"line": 2, "error": "invalid JSON (Expecting property name enclosed in double quotes at column 13)"}]


def test_jsonl_read_as_processbench_says_did_you_mean_jsonl(tmp_path):
    path = _write_lines(tmp_path / "rows.jsonl", [GOOD, GOOD])
    with pytest.raises(RecordError, match=r"rows.jsonl: invalid JSON \(Extra data at line 2, column 1\); this looks like JSONL .*--format jsonl\?"):
        read_processbench(path)
    one = _write_lines(tmp_path / "one.jsonl", [GOOD])  # a single record parses as one object, not a list
    with pytest.raises(RecordError, match=r"expected a JSON list of items .*--format jsonl"):
        read_processbench(one)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": 1,\n  oops}]')
    with pytest.raises(RecordError, match=r"broken.json: invalid JSON \(Expecting property name .* at line 2, column 3\)$"):
        read_processbench(broken)


def test_a_file_that_is_not_utf8_text_is_named_and_a_parquet_one_is_pointed_at_its_formats(tiny_checkpoint, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prm_distill.cli import main

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2."], "labels": [True]}]), rows)
    for fmt in ("jsonl", "processbench", "prmbench"):
        with pytest.raises(RecordError, match=r"rows.parquet: not UTF-8 text .*; it is a Parquet file: the trl and openrlhf formats read Parquet"):
            load_records(rows, fmt)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps({"id": "a", "question": "Combien coûte", "steps": ["x"]}, ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(RecordError, match=r"latin.jsonl: not UTF-8 text \(it holds the byte 0xfb\)$"):
        load_records(latin)
    # through the CLI: exit 2 and the message, no traceback
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", str(rows), "--threshold", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "it is a Parquet file" in err and "Traceback" not in err
