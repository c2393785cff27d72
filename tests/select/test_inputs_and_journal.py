"""Reading select inputs (bad lines named, not fatal) and the append-only outputs that make reruns resume."""

from __future__ import annotations

import json

import pytest

from prm_distill.jobfiles import AppendLog, check_job
from prm_distill.select.inputs import group_by_question, read_samples
from prm_distill.steps import split_steps


def test_bad_records_are_named_by_line_and_good_ones_kept(tmp_path):
    lines = [
        {"id": "a", "question": "Q1", "steps": ["x = 1.", "The answer is 1."], "answer": "1"},
        {"id": "a", "question": "Q1", "steps": ["again"]},  # duplicate id
        {"question": "Q2", "response": "Step 1: 2 + 2 = 4.\nStep 2: The answer is 4.", "outcome": 1},
        {"id": "c", "question": "Q1", "steps": ["one"], "labels": [1.0, 0.0]},  # one label per step expected
        {"id": "d", "question": "Q1", "steps": ["one"], "answer": ["1"]},
        {"id": "e", "question": "Q2"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n\n{oops\n")
    samples, invalid = read_samples(path)
    assert [s.id for s in samples] == ["a", "line-3"]
    assert samples[1].steps == split_steps(lines[2]["response"]) and samples[1].text == lines[2]["response"]
    assert [(r["line"], r["error"].split(":")[0]) for r in invalid] == [
        (2, "field 'id'"), (4, "field 'labels'"), (5, "field 'answer'"), (6, "field 'steps'"),
        (8, "invalid JSON (Expecting property name enclosed in double quotes at column 2)")]
    # correctness from the gold answer, else from `outcome`
    assert samples[0].correct() is True and samples[1].correct() is True
    assert list(group_by_question(samples).values()) == [[samples[0]], [samples[1]]]


def test_append_log_cuts_a_torn_line_and_keeps_only_wanted_rows(tmp_path):
    path = tmp_path / "out.jsonl"
    with AppendLog(path) as log:
        log.append([{"group": "g1", "i": 0}, {"group": "g2", "i": 1}])
    with open(path, "a") as f:
        f.write('{"group": "g3", "i"')  # killed mid-write
    with AppendLog(path) as log:
        assert log.rows == [{"group": "g1", "i": 0}, {"group": "g2", "i": 1}]
        assert log.keep(lambda r: r["group"] != "g2") == 1
        log.append([{"group": "g4", "i": 2}])
    assert [json.loads(line)["group"] for line in path.read_text().splitlines()] == ["g1", "g4"]


def test_a_job_resumes_only_with_its_own_settings(tmp_path):
    check_job(tmp_path / "job.json", {"command": "pairs", "model": "m", "min_margin": 0.1})
    check_job(tmp_path / "job.json", {"command": "pairs", "model": "m", "min_margin": 0.1})
    (tmp_path / "pairs.jsonl").write_text('{"group": "g1"}\n')  # outputs made with min_margin=0.1
    with pytest.raises(ValueError, match="min_margin=0.1.*min_margin=0.2"):
        check_job(tmp_path / "job.json", {"command": "pairs", "model": "m", "min_margin": 0.2})
