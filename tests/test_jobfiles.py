"""The files of a resumable job (rollout, labeling, select): the identity check, shards and their merge."""

from __future__ import annotations

import json

import pytest

from prm_distill.jobfiles import AppendLog, Shards, check_job


def test_a_pending_identity_key_is_recorded_once_known_and_checked_after(tmp_path):
    job = tmp_path / "job.json"
    check_job(job, {"k": 2, "policy_version": None}, pending=["policy_version"])  # before the policy is loaded
    check_job(job, {"k": 2, "policy_version": "v1"}, pending=["policy_version"])  # learnt: recorded
    assert json.loads(job.read_text()) == {"k": 2, "policy_version": "v1"}
    check_job(job, {"k": 2, "policy_version": None}, pending=["policy_version"])  # nothing to generate: not compared
    with pytest.raises(ValueError, match="policy_version='v1', this run has policy_version='v2'.*use a new output folder"):
        check_job(job, {"k": 2, "policy_version": "v2"}, pending=["policy_version"])
    with pytest.raises(ValueError, match="k=2, this run has k=3"):
        check_job(job, {"k": 3, "policy_version": "v1"}, pending=["policy_version"])


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
