"""The files of a resumable job (rollout, labeling, select): the identity check, shards and their merge."""

from __future__ import annotations

import json

import pytest

from prm_distill.jobfiles import AppendLog, Shards, check_job


def test_a_pending_identity_key_is_recorded_once_known_and_checked_after(tmp_path):
    job = tmp_path / "job.json"
    check_job(job, {"k": 2, "policy_version": None}, pending=["policy_version"])  # before the policy is loaded
    check_job(job, {"k": 2, "policy_version": "v1"}, pending=["policy_version"])  # learnt: recorded
    (tmp_path / "rows-00000.jsonl").write_text('{"id": "a"}\n')  # an output made with these settings
    assert json.loads(job.read_text()) == {"k": 2, "policy_version": "v1"}
    check_job(job, {"k": 2, "policy_version": None}, pending=["policy_version"])  # nothing to generate: not compared
    with pytest.raises(ValueError, match="policy_version='v1', this run has policy_version='v2'.*use a new output folder"):
        check_job(job, {"k": 2, "policy_version": "v2"}, pending=["policy_version"])
    with pytest.raises(ValueError, match="k=2, this run has k=3"):
        check_job(job, {"k": 3, "policy_version": "v1"}, pending=["policy_version"])


def test_a_job_refused_before_its_first_output_does_not_lock_its_folder(tmp_path):
    """Issue 27: a rollout refused before its first sample (a wrong --policy) left only job.json,
    and the rerun with the right policy was refused. Settings are guarded only once outputs exist."""
    job = tmp_path / "out" / "job.json"
    job.parent.mkdir()
    check_job(job, {"policy": "wrong", "k": 2})
    (tmp_path / "out" / "rollouts-00000.jsonl").write_text("")  # an empty file is no output either
    check_job(job, {"policy": "right", "k": 2})  # nothing was written under policy=wrong: taken over
    assert json.loads(job.read_text()) == {"policy": "right", "k": 2}
    (tmp_path / "out" / "rollouts-00000.jsonl").write_text('{"id": "p#0"}\n')
    with pytest.raises(ValueError, match=r"holds outputs made with policy='right', this run has policy='other'"):
        check_job(job, {"policy": "other", "k": 2})


def test_named_outputs_are_what_the_guard_looks_at(tmp_path):
    """A job file beside other files (the select commands' `OUT.job.json`) can name its outputs."""
    job, out = tmp_path / "pairs.job.json", tmp_path / "pairs.jsonl"
    (tmp_path / "samples.jsonl").write_text('{"id": "input"}\n')  # not an output of this job
    check_job(job, {"min_margin": 0.1}, outputs=[out])
    check_job(job, {"min_margin": 0.2}, outputs=[out])  # pairs.jsonl is absent: nothing to protect
    out.write_text('{"group": "g"}\n')
    with pytest.raises(ValueError, match="min_margin=0.2, this run has min_margin=0.3"):
        check_job(job, {"min_margin": 0.3}, outputs=[out])
    with pytest.raises(ValueError, match="min_margin=0.2, this run has min_margin=0.3"):
        check_job(job, {"min_margin": 0.3})  # by default anything else in the folder counts


def test_shards_keep_the_first_copy_number_on_and_merge_strict_json(tmp_path):
    shards = Shards(tmp_path, "rows")
    assert shards.next_index() == 0 and list(shards.rows(key=lambda r: r["id"])) == []
    shards.write(0, [{"id": "a", "v": 1}, {"id": "b", "v": float("nan")}])
    shards.write(shards.next_index(), [{"id": "a", "v": 2}, {"id": "c", "v": 3}])  # a crash between merge and cleanup leaves copies
    assert shards.next_index() == 2
    rows = list(shards.rows(key=lambda r: r["id"]))
    assert [(r["id"], r["v"]) for r in rows[:1] + rows[2:]] == [("a", 1), ("c", 3)] and rows[1]["v"] is None  # NaN written as null
    shards.merge(rows)
    assert shards.shards() == [] and [json.loads(line)["id"] for line in (tmp_path / "rows.jsonl").read_text().splitlines()] == ["a", "b", "c"]


def test_append_log_rows_are_strict_json(tmp_path):
    with AppendLog(tmp_path / "log.jsonl") as log:
        log.append([{"x": float("inf")}])
    assert (tmp_path / "log.jsonl").read_text() == '{"x": null}\n'
