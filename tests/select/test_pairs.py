"""Preference pairs: which pairs by hand, and `prm-distill pairs` output read back as TRL reads it."""

from __future__ import annotations

import json

import pytest

from prm_distill.cli import main
from prm_distill.select.inputs import Sample
from prm_distill.select.pairs import PairsConfig, step_pairs, to_row, trajectory_pairs

from .conftest import Q1, read_jsonl


def _sample(i, steps):
    return Sample(line=i + 1, id=f"s{i}", question="Q", steps=steps, record={"question": "Q", "steps": steps})


def test_trajectory_pairs_by_hand():
    samples = [_sample(0, ["a", "b"]), _sample(1, ["a", "c"]), _sample(2, ["d", "e"])]
    scores = [[0.9, 0.8], [0.9, 0.3], [0.75, 0.85]]  # min: 0.8, 0.3, 0.75
    pairs = trajectory_pairs(samples, scores, PairsConfig(min_margin=0.1))
    # 0 over 1 (0.5) and 2 over 1 (0.45); 0 over 2 differs by 0.05 only
    assert [(p.chosen.id, p.rejected.id, round(p.margin, 6)) for p in pairs] == [("s0", "s1", 0.5), ("s2", "s1", 0.45)]
    assert [p.chosen.id for p in trajectory_pairs(samples, scores, PairsConfig(min_margin=0.1, max_pairs_per_problem=1))] == ["s0"]
    mean = trajectory_pairs(samples, scores, PairsConfig(agg="mean", min_margin=0.2))  # means 0.85, 0.6, 0.8
    assert [(p.chosen.id, p.rejected.id) for p in mean] == [("s0", "s1"), ("s2", "s1")]


def test_step_pairs_meet_where_solutions_diverge():
    samples = [_sample(0, ["A", "B", "C"]), _sample(1, ["A", "B", "D"]), _sample(2, ["A", "E"]), _sample(3, ["F", "G"])]
    scores = [[0.9, 0.8, 0.7], [0.9, 0.8, 0.2], [0.9, 0.4], [0.5, 0.5]]
    pairs = step_pairs(samples, scores, PairsConfig(min_margin=0.1))
    got = [(p.prefix, p.chosen.text, p.rejected.text, round(p.margin, 6), p.chosen.id, p.rejected.id) for p in pairs]
    assert got == [(["A", "B"], "C", "D", 0.5, "s0", "s1"), (["A"], "B", "E", 0.4, "s0", "s2")]
    # with no shared step required, the first steps A (0.9) and F (0.5) pair too
    assert len(step_pairs(samples, scores, PairsConfig(min_margin=0.1, min_prefix_steps=0))) == 3
    assert step_pairs(samples, scores, PairsConfig(min_margin=0.6)) == []


def test_rows_in_trl_plain_and_conversational_form():
    samples = [_sample(0, ["A", "B", "C"]), _sample(1, ["A", "B", "D"])]
    [p] = step_pairs(samples, [[0.9, 0.8, 0.7], [0.9, 0.8, 0.2]], PairsConfig())
    plain = to_row(p, "Q?", "g", conversational=False)
    assert (plain["prompt"], plain["chosen"], plain["rejected"]) == ("Q?\n\nA\nB\n", "C", "D")
    assert plain["kind"] == "step" and plain["prefix_steps"] == 2 and plain["margin"] == 0.5
    chat = to_row(p, "Q?", "g", conversational=True)
    assert chat["prompt"] == [{"role": "user", "content": "Q?"}]
    assert chat["chosen"] == [{"role": "assistant", "content": "A\nB\nC"}] and chat["rejected"] == [{"role": "assistant", "content": "A\nB\nD"}]


@pytest.mark.parametrize("conversational", [False, True])
def test_pairs_cli_output_loads_with_datasets(tiny_checkpoint, rollouts, tmp_path, conversational):
    from datasets import load_dataset

    out = tmp_path / "pairs.jsonl"
    argv = ["pairs", "--model", str(tiny_checkpoint), "--input", str(rollouts), "--output", str(out), "--min-margin", "0", "--agg", "mean", "--device", "cpu"]
    assert main(argv + (["--conversational"] if conversational else [])) == 0
    ds = load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert {"prompt", "chosen", "rejected"} <= set(ds.column_names) and len(ds) > 0
    assert all(row["chosen"] != row["rejected"] for row in ds)
    kinds = {row["kind"] for row in ds}
    assert kinds == {"trajectory", "step"}  # q1-a and q1-b share their first step
    if conversational:
        assert all(row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant" for row in ds)
    else:
        assert all(isinstance(row["prompt"], str) and isinstance(row["chosen"], str) for row in ds)
        step = next(row for row in ds if row["kind"] == "step" and row["prompt"].startswith(Q1))
        assert step["prompt"] == Q1 + "\n\nHe starts with 3 apples.\n" and {step["chosen"], step["rejected"]} == {"3 + 4 = 8.", "3 + 4 = 7."}

    summary = json.loads((tmp_path / "pairs.summary.json").read_text())
    # Q1: 4 samples -> 12 ordered pairs, one direction of each clears a zero margin: 6; Q2: 1. (By the mean:
    # q1-a and q1-b share a first step, so their min can tie.)
    assert summary["trajectory_pairs"] == 7 and summary["problems"] == 3 and len(summary["singleton_problems"]) == 1
    assert summary["step_pairs"] == sum(row["kind"] == "step" for row in ds) >= 1
    assert summary["answers"]["with_answers"] == 7
    assert [r["line"] for r in summary["invalid_records"]] == [2, 3]
    assert len(read_jsonl(out)) == len(ds)
