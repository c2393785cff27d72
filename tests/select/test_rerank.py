"""Best-of-N: the report's numbers by hand, and `prm-distill rerank --model` end to end."""

from __future__ import annotations

import json
import shutil

import pytest

from prm_distill import calibration, checkpoint
from prm_distill.aggregate import AGGREGATIONS, aggregate
from prm_distill.cli import main
from prm_distill.select.rerank import best_of_n_report, choose_aggregation, n_values
from prm_distill.steps import split_steps

from .conftest import Q1, Q2, Q3, ROLLOUTS, read_jsonl, write_lines


def _row(question, samples):
    """An output row with only what the report reads: per sample its min score, answer class and correctness."""
    return {"question": question, "n": len(samples),
            "samples": [{"scores": {"min": m}, "answer_class": c, "correct": ok} for m, c, ok in samples]}


def test_n_values_are_powers_of_two_and_the_largest_size():
    assert n_values(1) == [1] and n_values(4) == [1, 2, 4] and n_values(6) == [1, 2, 4, 6] and n_values(0) == []
    assert n_values(5, "every") == [1, 2, 3, 4, 5] and n_values(0, "every") == []


def test_every_n_uses_the_first_n_samples_at_odd_n_too():
    rows = [_row("A", [(0.2, 0, False), (0.9, 1, True), (0.5, 0, False), (0.3, 1, True)])]
    rep = best_of_n_report(rows, aggregations=("min",), grid="every")
    assert rep["n_values"] == [1, 2, 3, 4]
    # N=3: samples 0.2 (wrong), 0.9 (right), 0.5 (wrong): min picks 0.9; answers 0, 1, 0: class 0 wins, wrong;
    # one right of three; some sample right.
    assert rep["best_of_n"]["min"]["3"] == 1.0 and rep["baselines"]["majority_vote"]["3"] == 0.0
    assert rep["weighted_vote"]["min"]["3"] == 1.0  # class 1's 0.9 outweighs class 0's 0.2 + 0.5: two votes lose to one
    assert rep["baselines"]["random"]["3"] == pytest.approx(1 / 3) and rep["baselines"]["oracle"]["3"] == 1.0


def test_choose_aggregation_takes_the_best_at_the_largest_n_and_the_first_listed_on_ties():
    report = {"aggregations": ["min", "prod", "last"], "n_values": [1, 2, 4], "groups_with_answers": 3,
              "best_of_n": {"min": {"1": 0.9, "4": 0.5}, "prod": {"1": 0.1, "4": 0.7}, "last": {"1": 0.1, "4": 0.7}},
              "weighted_vote": {"min": {"4": 0.7}, "prod": {"4": 0.6}, "last": {"4": 0.2}}}
    assert choose_aggregation(report) == "prod"  # N=1's 0.9 for min does not count; prod, last and vote:min tie at N=4
    report["best_of_n"]["prod"]["4"] = None
    assert choose_aggregation(report) == "last"
    report["weighted_vote"]["last"]["4"] = 0.8
    assert choose_aggregation(report) == "vote:last"
    with pytest.raises(ValueError, match="no best-of-N accuracy"):
        choose_aggregation({"aggregations": ["min"], "n_values": [], "groups_with_answers": 0, "best_of_n": {"min": {}}, "weighted_vote": {"min": {}}})


def test_best_of_n_and_baselines_by_hand():
    rows = [
        _row("A", [(0.2, 0, False), (0.9, 1, True), (0.5, 0, False), (0.3, 1, True)]),
        _row("B", [(0.6, 0, True), (0.4, None, False)]),  # the second states no answer
        _row("C", [(0.7, 0, True)]),  # one sample: no best-of-N
        _row("D", [(0.1, 0, None), (0.2, 0, None), (0.3, 1, None), (0.4, 1, None)]),  # no gold answer
    ]
    rep = best_of_n_report(rows, aggregations=("min",))
    assert rep["n_values"] == [1, 2, 4] and rep["groups_with_answers"] == 2 and rep["singleton_problems"] == ["C"]
    # N=1: A picks its wrong first sample, B its right one. N=2: A's 0.9 (right), B's 0.6 (right).
    # N=4 (A only): 0.9 again.
    assert rep["best_of_n"]["min"] == pytest.approx({"1": 0.5, "2": 1.0, "4": 1.0})
    # Majority at N=2: A ties one class each (expected 1/2), B has one vote (right): (0.5 + 1) / 2.
    # At N=4 A ties two votes each: 1/2.
    assert rep["baselines"]["majority_vote"] == pytest.approx({"1": 0.5, "2": 0.75, "4": 0.5})
    assert rep["baselines"]["random"] == pytest.approx({"1": 0.5, "2": 0.5, "4": 0.5})
    assert rep["baselines"]["oracle"] == pytest.approx({"1": 0.5, "2": 1.0, "4": 1.0})
    assert rep["problems_at_n"] == {"1": {"problems": 3, "with_answers": 2}, "2": {"problems": 3, "with_answers": 2},
                                    "4": {"problems": 2, "with_answers": 1}}
    # Weighted vote (each answer's summed min scores). N=1: as best-of-1. N=2: A's class 1 (0.9 > 0.2, right),
    # B's only answered class (right). N=4 (A): class 1 sums 0.9 + 0.3 = 1.2 > class 0's 0.2 + 0.5 (right).
    assert rep["weighted_vote"]["min"] == pytest.approx({"1": 0.5, "2": 1.0, "4": 1.0})
    assert rep["gain_over_majority_at_largest_n"] == {"min": pytest.approx(0.5), "vote:min": pytest.approx(0.5)}


def test_sample_auroc_within_problems_and_pooled_by_hand():
    rows = [
        _row("A", [(0.2, 0, False), (0.9, 1, True), (0.5, 0, False), (0.3, 1, True)]),
        _row("B", [(0.6, 0, True), (0.4, 1, False)]),
        _row("E", [(0.8, 0, True), (0.1, 0, True)]),  # all right: no within-problem AUROC, still pooled
        _row("D", [(0.1, 0, None), (0.2, 0, None)]),  # no gold answer: left out
    ]
    got = best_of_n_report(rows, aggregations=("min",))["sample_auroc"]["min"]
    # A: right {0.9, 0.3} vs wrong {0.2, 0.5}: 0.9 beats both, 0.3 beats 0.2 only: 3 of 4 pairs. B: 1 of 1.
    assert got["problems"] == 2 and got["within_problem"] == pytest.approx((3 / 4 + 1) / 2)
    # Pooled, right {0.9, 0.3, 0.6, 0.8, 0.1} vs wrong {0.2, 0.5, 0.4}: 3 + 1 + 3 + 3 + 0 = 10 of 15 pairs.
    assert got["pooled"] == pytest.approx(10 / 15)
    none = best_of_n_report([rows[2]], aggregations=("min",))["sample_auroc"]["min"]
    assert none == {"within_problem": None, "pooled": None, "problems": 0}


def test_ties_pick_the_first_sample_and_no_answers_give_null_accuracies():
    tie = best_of_n_report([_row("A", [(0.5, 0, False), (0.5, 1, True)])], aggregations=("min",))
    assert tie["best_of_n"]["min"]["2"] == 0.0
    blind = best_of_n_report([_row("D", [(0.1, 0, None), (0.2, 0, None)])], aggregations=("min",))
    assert blind["best_of_n"]["min"] == {"1": None, "2": None} and blind["baselines"]["oracle"]["2"] is None
    alone = best_of_n_report([_row("C", [(0.7, 0, True)])], aggregations=("min",))
    assert alone["n_values"] == [] and alone["best_of_n"] == {"min": {}} and alone["singleton_problems"] == ["C"]


def test_rerank_cli_picks_by_calibrated_aggregate_and_reports(tiny_checkpoint, select_engine, rollouts, tmp_path, capsys):
    # A copy of the checkpoint with a temperature calibration: what rerank ranks must be the calibrated scores.
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, model)
    checkpoint.write_calibration(model, {"method": "temperature", "params": {"temperature": 3.0}})
    out = tmp_path / "run" / "ranked.jsonl"
    assert main(["rerank", "--model", str(model), "--input", str(rollouts), "--output", str(out), "--agg", "mean", "--device", "cpu"]) == 0
    printed = capsys.readouterr()
    assert "skipped 2 invalid record(s)" in printed.err and "lines 2, 3" in printed.err

    rows = read_jsonl(out)
    assert [r["question"] for r in rows] == [Q1, Q2, Q3] and [r["n"] for r in rows] == [4, 2, 1]
    for row in rows:
        originals = [r for r in ROLLOUTS if r["question"] == row["question"]]
        raw = select_engine.score([(o["question"], o.get("steps") or split_steps(o["response"])) for o in originals])
        expected = [calibration.apply(r, {"method": "temperature", "params": {"temperature": 3.0}}).tolist() for r in raw]
        for sample, want in zip(row["samples"], expected):
            assert sample["step_scores"] == pytest.approx(want, abs=1e-5)
            assert sample["scores"]["min"] == pytest.approx(min(want), abs=1e-5)
        means = [aggregate(w, "mean") for w in expected]
        assert row["best"]["mean"] == means.index(max(means))
        assert row["chosen"]["id"] == originals[row["best"]["mean"]]["id"]
    # Correctness by hand (see conftest): the answers do not depend on the model.
    assert [s["correct"] for s in rows[0]["samples"]] == [False, True, False, True]
    assert [s["correct"] for s in rows[1]["samples"]] == [True, False]

    rep = json.loads((out.parent / "report.json").read_text())
    assert set(rep["best_of_n"]) == set(AGGREGATIONS) and rep["n_values"] == [1, 2, 4]
    assert rep["singleton_problems"] == [Q3] and [r["line"] for r in rep["invalid_records"]] == [2, 3]
    # Baselines by hand. N=1: Q1 wrong, Q2 right. N=2: Q1 has one right of two, Q2 too; majority ties
    # one answer each in Q1 (1/2), and in Q2 (1/2). N=4 (Q1 only): answers 8, 7, 8, 7 tie: 1/2.
    assert rep["baselines"]["random"] == pytest.approx({"1": 0.5, "2": 0.5, "4": 0.5})
    assert rep["baselines"]["oracle"] == pytest.approx({"1": 0.5, "2": 1.0, "4": 1.0})
    assert rep["baselines"]["majority_vote"] == pytest.approx({"1": 0.5, "2": 0.5, "4": 0.5})
    assert rep["best_of_n"]["mean"]["4"] == float(rows[0]["samples"][rows[0]["best"]["mean"]]["correct"])
    assert (out.parent / "best_of_n.png").stat().st_size > 0
    assert "majority_vote" in printed.out and "N=4" in printed.out

    # The same output reported on every N: a resume that scores nothing; N=3 is Q1's first three samples.
    assert main(["rerank", "--model", str(model), "--input", str(rollouts), "--output", str(out), "--agg", "mean",
                 "--device", "cpu", "--n-grid", "every"]) == 0
    every = json.loads((out.parent / "report.json").read_text())
    assert every["n_values"] == [1, 2, 3, 4] and every["this_run"]["problems_scored"] == 0
    assert every["baselines"]["oracle"]["3"] == 1.0 and every["best_of_n"]["mean"]["4"] == rep["best_of_n"]["mean"]["4"]

    # Another --agg only re-picks `chosen` from the stored scores: nothing is scored again, and each row's chosen
    # sample is now the one whose last step scores highest (the first of equals), its steps and scores kept.
    assert main(["rerank", "--model", str(model), "--input", str(rollouts), "--output", str(out), "--agg", "last", "--device", "cpu"]) == 0
    last = json.loads((out.parent / "report.json").read_text())
    assert last["this_run"]["problems_scored"] == 0 and last["config"]["agg"] == "last"
    again = read_jsonl(out)
    assert [r["samples"] for r in again] == [r["samples"] for r in rows]
    for row in again:
        tails = [s["step_scores"][-1] for s in row["samples"]]
        top = tails.index(max(tails))
        assert row["agg"] == "last" and row["chosen"]["id"] == row["samples"][top]["id"]
        assert row["chosen"]["step_scores"] == row["samples"][top]["step_scores"]


def test_rerank_without_answers_or_with_only_singletons_reports_nulls(tiny_checkpoint, tmp_path, capsys):
    blind = write_lines(tmp_path / "blind.jsonl", [{k: v for k, v in r.items() if k != "answer"} for r in ROLLOUTS])
    out = tmp_path / "blind" / "ranked.jsonl"
    assert main(["rerank", "--model", str(tiny_checkpoint), "--input", str(blind), "--output", str(out), "--device", "cpu"]) == 0
    rep = json.loads((out.parent / "report.json").read_text())
    assert rep["best_of_n"]["min"] == {"1": None, "2": None, "4": None} and "plot" not in rep
    assert "accuracies are null" in capsys.readouterr().out

    single = write_lines(tmp_path / "single.jsonl", [ROLLOUTS[0], ROLLOUTS[4]])
    out = tmp_path / "single" / "ranked.jsonl"
    assert main(["rerank", "--model", str(tiny_checkpoint), "--input", str(single), "--output", str(out), "--device", "cpu"]) == 0
    assert [r["best"]["min"] for r in read_jsonl(out)] == [0, 0]
    assert json.loads((out.parent / "report.json").read_text())["n_values"] == []
    assert "best-of-N undefined" in capsys.readouterr().out
    # resuming into that output with other settings would mix rows: refused, nothing changed
    before = out.read_text()
    assert main(["rerank", "--model", str(tiny_checkpoint), "--input", str(single), "--output", str(out), "--gamma", "0.5", "--device", "cpu"]) == 2
    assert "gamma=0.9" in capsys.readouterr().err and out.read_text() == before


def test_rerank_benchmark_chooses_the_aggregation_on_other_problems_and_reports_the_test_ones_with_it(
        tiny_backbone, tiny_checkpoint, tmp_path):
    """benchmarks/rerank_gsm8k.py --choose-on: the choosing problems are sampled and reranked apart (OUTPUT/choose),
    and the test problems are reranked with the aggregation they chose, on every N up to k."""
    import subprocess
    import sys
    from pathlib import Path

    def problems(name, rows):
        return write_lines(tmp_path / name, [{"question": q, "answer": f"#### {a}"} for q, a in rows])

    train = problems("train.jsonl", [("What is 2 + 2?", 4), ("What is 3 + 5?", 8), ("What is 9 - 4?", 5)])
    test = problems("test.jsonl", [("What is 1 + 6?", 7), ("What is 10 - 3?", 7)])
    out = tmp_path / "bench"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "rerank_gsm8k.py"
    run = subprocess.run([sys.executable, str(script), str(tiny_checkpoint), "--problems", str(test), "--limit", "2", "--k", "3",
                          "--max-new-tokens", "6", "--policy", str(tiny_backbone), "--choose-on", str(train), "--choose-limit", "2",
                          "--n-grid", "every", "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    chooser = json.loads((out / "choose" / "report.json").read_text())
    bench = json.loads((out / "bench.json").read_text())
    assert chooser["problems"] == 2 and [r["question"] for r in read_jsonl(out / "choose" / "ranked.jsonl")] == ["What is 2 + 2?", "What is 3 + 5?"]
    assert [r["question"] for r in read_jsonl(out / "ranked.jsonl")] == ["What is 1 + 6?", "What is 10 - 3?"]
    assert bench["chosen_on"]["agg"] == choose_aggregation(chooser) == bench["agg"]
    assert all(r["agg"] == bench["agg"].removeprefix("vote:") for r in read_jsonl(out / "ranked.jsonl"))
    assert bench["n_values"] == [1, 2, 3] and bench["samples_generated"] == 6
    assert f"the chosen aggregation ({bench['agg']})" in run.stdout
