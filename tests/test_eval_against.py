"""`eval --against`: two checkpoints compared on the same items, with an interval over problems.

The hand-computed case uses a table scorer (a test double: each step's score is set in the test, so the
AUROCs are known exactly); the command-line cases use real checkpoints, the second one the first with its
classification head negated, which turns every P(good) p into 1 - p and so its AUROC into 1 - AUROC.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from prm_distill.checkpoint import read_sidecar
from prm_distill.cli import main
from prm_distill.evaluate import evaluate_files
from prm_distill.records import Trajectory, write_jsonl

# two problems: P with two solutions, Q with one all-correct solution
ITEMS = [
    ("p1", "P", {"A1": 0.9, "A2": 0.8, "A3": 0.1}, [1.0, 1.0, 0.0]),
    ("p2", "P", {"B1": 0.7, "B2": 0.2}, [1.0, 0.0]),
    ("q1", "Q", {"C1": 0.6, "C2": 0.95}, [1.0, 1.0]),
]
OURS = {step: s for *_, steps, _ in ITEMS for step, s in steps.items()}
THEIRS = {**OURS, "B2": 0.75}  # one bad step above the good B1 (0.7) and C1 (0.6)


class TableScorer:
    """Each step's score from a table (test double)."""

    def __init__(self, table: dict[str, float], model: Path, name: str):
        self.table, self.sidecar, self.model_id = table, read_sidecar(model), name

    def calibration(self):
        return None

    def score(self, items):
        return [[self.table[step] for step in steps] for _, steps in items]


def test_against_by_hand_with_problems_resampled_whole(tiny_checkpoint, tmp_path):
    path = tmp_path / "dev.jsonl"
    write_jsonl([Trajectory(i, q, list(steps), labels) for i, q, steps, labels in ITEMS], path)
    rep = evaluate_files(TableScorer(OURS, tiny_checkpoint, "ours"), [str(path)], threshold=0.5,
                         against=TableScorer(THEIRS, tiny_checkpoint, "theirs"))
    vs = rep["against"]
    # 5 good steps, 2 bad: ours ranks all 10 pairs right (1.0); theirs puts B2 (0.75) above B1 and C1: 8/10
    assert rep["auroc"] == 1.0 and vs["auroc"] == pytest.approx(0.8) and vs["difference"] == pytest.approx(0.2)
    assert vs["model"] == "theirs" and vs["n_groups"] == 2
    # resampling P and Q: {P, Q} -> 0.2; {P, P} -> theirs 5/6 on P's 3 good x 2 bad pairs -> 1/6; {Q, Q} has
    # no bad step and is left out. Both kept outcomes come up far more than 2.5% of the time: the interval
    # is exactly [1/6, 0.2]. Resampling the three records instead would draw p2 alone (a difference of 1).
    assert vs["low"] == pytest.approx(1 / 6) and vs["high"] == pytest.approx(0.2)
    assert 500 < vs["n_boot"] < 1000  # about a quarter of the draws are {Q, Q}
    assert rep["files"][str(path)]["auroc"] == 1.0 and vs["files"][str(path)]["difference"] == pytest.approx(0.2)


@pytest.fixture
def negated_checkpoint(tiny_checkpoint, tmp_path) -> Path:
    """The tiny checkpoint with its classification head negated: logits -z, so P(good) = 1 - p."""
    out = tmp_path / "negated"
    shutil.copytree(tiny_checkpoint, out)
    weights = load_file(out / "model.safetensors")
    head = [k for k in weights if k.startswith("score.")]
    assert head, sorted(weights)[-3:]
    save_file({k: (-v if k in head else v).contiguous() for k, v in weights.items()}, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_eval_against_a_checkpoint_with_the_head_negated(tiny_checkpoint, negated_checkpoint, synthetic_files, tmp_path, capsys):
    out = tmp_path / "report.json"
    test, dev = str(synthetic_files["test"]), str(synthetic_files["dev"])
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", test, "--data", dev, "--threshold", "0.5", "--no-verifier",
                 "--against", str(negated_checkpoint), "--output", str(out), "--device", "cpu"]) == 0
    rep = json.loads(out.read_text())
    vs = rep["against"]
    a = rep["auroc"]
    assert 0.0 <= a <= 1.0 and a != 0.5
    assert vs["auroc"] == pytest.approx(1 - a, abs=1e-6) and vs["difference"] == pytest.approx(2 * a - 1, abs=1e-6)
    assert vs["model"].endswith("negated") and set(vs["files"]) == {test, dev}
    assert vs["low"] <= vs["difference"] <= vs["high"]
    questions = {r["question"] for f in (test, dev) for r in map(json.loads, Path(f).read_text().splitlines())}
    assert vs["n_groups"] == len(questions)
    printed = capsys.readouterr().out
    assert "against" in printed and f"over {len(questions)} problems" in printed

    # a checkpoint against itself: no difference and no interval around it
    assert main(["eval", "--model", str(tiny_checkpoint), "--data", test, "--threshold", "0.5", "--against", str(tiny_checkpoint),
                 "--output", str(out), "--device", "cpu"]) == 0
    same = json.loads(out.read_text())["against"]
    assert same["difference"] == 0.0 and same["low"] == 0.0 and same["high"] == 0.0


def test_eval_against_a_missing_checkpoint_is_bad_input_before_scoring(tiny_checkpoint, synthetic_files, tmp_path, capsys):
    rc = main(["eval", "--model", str(tiny_checkpoint), "--data", str(synthetic_files["test"]), "--against", str(tmp_path / "nope"),
               "--output", str(tmp_path / "r.json")])
    assert rc == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "r.json").exists()
