"""SFT filtering: the keep rule by hand, `prm-distill filter` end to end, and resuming."""

from __future__ import annotations

import json

import pytest

from prm_distill.aggregate import aggregate
from prm_distill.cli import main
from prm_distill.select.filter import FilterConfig, decide
from prm_distill.steps import split_steps

from .conftest import ROLLOUTS, read_jsonl, write_lines

CORRECT = {"q1-a": False, "q1-b": True, "q1-c": False, "q1-d": True, "q2-a": True, "q2-b": False, "q3-a": True}
LABELS = {"q2-a": [1.0, 1.0], "q2-b": [1.0, 0.0], "q3-a": [1.0, None]}  # trajectory good: True, False, True


def test_keep_rule_by_hand():
    assert decide([0.9, 0.6, 0.7], FilterConfig(min_step=0.5)) == (0.6, None)
    assert decide([0.9, 0.4, 0.7], FilterConfig(min_step=0.5)) == (0.4, "step 2 of 3 scored 0.4000 < 0.5")
    score, reason = decide([0.9, 0.4, 0.7], FilterConfig(min_step=0.6, by="mean"))  # mean 2/3 clears 0.6
    assert score == pytest.approx(2 / 3) and reason is None
    assert decide([0.9, 0.4, 0.7], FilterConfig(min_step=0.7, by="mean"))[1] == "mean aggregate 0.6667 < 0.7"
    with pytest.raises(ValueError):
        FilterConfig(by="max")


def _input(tmp_path):
    records = [{**r, **({"labels": LABELS[r["id"]]} if r["id"] in LABELS else {})} for r in ROLLOUTS]
    return write_lines(tmp_path / "data.jsonl", records, extra=['{"id": "broken", "question": "Q", "steps": []}'])


def _min_scores(engine):
    raw = engine.score([(r["question"], r.get("steps") or split_steps(r["response"])) for r in ROLLOUTS])
    return {r["id"]: s for r, s in zip(ROLLOUTS, raw)}  # no calibration in the tiny checkpoint: raw = calibrated


def test_filter_cli_keeps_drops_with_reasons_and_reports_precision(tiny_checkpoint, select_engine, tmp_path, capsys):
    scores = _min_scores(select_engine)
    mins = sorted(min(s) for s in scores.values())
    threshold = (mins[3] + mins[4]) / 2  # keeps the 3 records with the highest weakest step
    out = tmp_path / "kept.jsonl"
    argv = ["filter", "--model", str(tiny_checkpoint), "--input", str(_input(tmp_path)), "--output", str(out),
            "--min-step", str(threshold), "--device", "cpu"]
    assert main(argv) == 0
    kept, dropped = read_jsonl(out), read_jsonl(tmp_path / "kept.dropped.jsonl")
    expect_kept = {i for i, s in scores.items() if min(s) >= threshold}
    assert {r["id"] for r in kept} == expect_kept and len(expect_kept) == 3
    assert {r["id"] for r in dropped} == set(scores) - expect_kept
    for r in kept + dropped:
        assert r["step_scores"] == pytest.approx(scores[r["id"]], abs=1e-5) and r["prm_score"] == pytest.approx(min(scores[r["id"]]), abs=1e-5)
    for r in dropped:
        worst = scores[r["id"]].index(min(scores[r["id"]]))
        assert r["reason"].startswith(f"step {worst + 1} of {len(scores[r['id']])} scored ")
    assert "response" in next(r for r in kept + dropped if r["id"] == "q1-c")  # records are written as they came

    summary = json.loads((tmp_path / "kept.summary.json").read_text())
    assert summary["kept"] == 3 and summary["records"] == 7 and summary["kept_fraction"] == pytest.approx(3 / 7)
    answers = summary["precision"]["answers"]
    assert answers["base_rate"] == pytest.approx(4 / 7) and answers["records"] == 7
    assert answers["kept_precision"] == pytest.approx(sum(CORRECT[i] for i in expect_kept) / 3)
    labels = summary["precision"]["labels"]
    assert labels["records"] == 3 and labels["base_rate"] == pytest.approx(2 / 3)
    assert [r["line"] for r in summary["invalid_records"]] == [8]
    assert (tmp_path / "kept.scores.png").stat().st_size > 0
    printed = capsys.readouterr()
    assert "kept 3/7 records" in printed.out and "skipped 1 invalid record(s)" in printed.err


def test_filter_by_aggregate_and_a_rerun_resumes_without_duplicates(tiny_checkpoint, select_engine, tmp_path):
    scores = _min_scores(select_engine)
    means = {i: aggregate(s, "mean") for i, s in scores.items()}
    ranked = sorted(means.values())
    threshold = (ranked[3] + ranked[4]) / 2  # between two records: batches of 2 round differently from one batch of 8
    first = write_lines(tmp_path / "first.jsonl", ROLLOUTS[:4])
    out = tmp_path / "kept.jsonl"
    argv = ["--model", str(tiny_checkpoint), "--output", str(out), "--min-step", str(threshold), "--by", "mean", "--batch-size", "2", "--device", "cpu"]
    assert main(["filter", "--input", str(first), *argv]) == 0
    # a kill mid-write leaves a torn line: it is cut and that record redone
    with open(out, "a") as f:
        f.write('{"id": "q2-a", "question": "What')
    everything = write_lines(tmp_path / "all.jsonl", ROLLOUTS)
    assert main(["filter", "--input", str(everything), *argv]) == 0
    kept, dropped = read_jsonl(out), read_jsonl(tmp_path / "kept.dropped.jsonl")
    ids = [r["id"] for r in kept + dropped]
    assert sorted(ids) == sorted(scores) and len(ids) == len(set(ids))
    assert {r["id"] for r in kept} == {i for i, m in means.items() if m >= threshold}
    assert all("mean aggregate" in r["reason"] for r in dropped)
    summary = json.loads((tmp_path / "kept.summary.json").read_text())
    assert summary["this_run"] == {"records_scored": 3, "records_already_done": 4}
