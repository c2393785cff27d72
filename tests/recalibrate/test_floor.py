"""A recalibration round's verdict with numbers computed by hand: a table scorer (each step's score
set in the test) on a four-trajectory held-out set, so AUROC and ProcessBench F1 are known exactly.
The first round gives no drift verdict, and an absolute floor flags a poor model (issue 27)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_distill.checkpoint import read_sidecar
from prm_distill.config import load_config
from prm_distill.recalibrate import RecalibrateConfig, run_recalibration
from prm_distill.records import Trajectory, write_jsonl

# (id, steps with their scores, labels); threshold 0.5, first error = first label < 0.5
HELDOUT = [
    ("e1", {"A1": 0.7, "A2": 0.6}, [1.0, 0.0]),   # first error 1; no score < 0.5: predicted -1, a miss
    ("e2", {"B1": 0.8, "B2": 0.2}, [0.0, None]),  # first error 0; predicted 1, a miss
    ("c1", {"C1": 0.4, "C2": 0.9}, [1.0, 1.0]),   # correct; predicted 0, a miss
    ("c2", {"D1": 0.55}, [1.0]),                  # correct; predicted -1, a hit
]
# AUROC: good steps 0.7, 0.4, 0.9, 0.55 against bad ones 0.6 and 0.8: 2 + 1 of the 8 pairs ranked right = 0.375.
# ProcessBench F1: accuracy on erroneous 0/2, on correct 1/2 -> F1 = 0.
AUROC, F1 = 3 / 8, 0.0
SCORES = {step: s for _, steps, _ in HELDOUT for step, s in steps.items()}


class TableScorer:
    """Each step's score from SCORES (0.5 for a step the audits insert)."""

    def __init__(self, model: Path):
        self.sidecar, self.model_id = read_sidecar(model), "table"

    def calibration(self):
        return None

    def score(self, items):
        return [[SCORES.get(step, 0.5) for step in steps] for _, steps in items]


@pytest.fixture
def table_model(tiny_checkpoint, tmp_path) -> Path:
    """A folder with the tiny checkpoint's sidecar at threshold 0.5 (the scores come from TableScorer)."""
    model = tmp_path / "model"
    model.mkdir()
    sidecar = json.loads((tiny_checkpoint / "prm_distill.json").read_text())
    (model / "prm_distill.json").write_text(json.dumps({**sidecar, "threshold": 0.5, "calibration": None}))
    return model


@pytest.fixture
def heldout(tmp_path) -> Path:
    path = tmp_path / "heldout.jsonl"
    write_jsonl([Trajectory(i, "What is 2 + 3?", list(steps), labels) for i, steps, labels in HELDOUT], path)
    return path


def _round(model, heldout, out, *overrides, history=None):
    cfg = load_config(RecalibrateConfig, None, ["audit.max_trajectories=2", *overrides])
    return run_recalibration(model, heldout, out, history=history, config=cfg, engine=TableScorer(model))


def test_a_first_round_below_the_floors_is_flagged_and_gives_no_drift_verdict(table_model, heldout, tmp_path):
    rep = _round(table_model, heldout, tmp_path / "r1")
    assert rep["auroc"] == pytest.approx(AUROC) and rep["processbench_f1"] == F1
    assert rep["previous"] is None and rep["drift"] == [] and rep["drift_verdict"] == "no_verdict"
    assert rep["floor"]["flags"] == ["auroc_floor", "f1_floor"] and rep["redistill_advised"] is True
    assert rep["verdict"] == ("drift: no verdict: first round, nothing to compare with (--history: a folder of earlier reports)\n"
                              "below the floor: auroc 0.3750 < floor.min_auroc 0.6; processbench_f1 0.0000 < floor.min_f1 0.05\n"
                              "-> re-distillation advised (exit 3)")
    md = (tmp_path / "r1" / "report.md").read_text()
    assert "- **re-distillation advised (exit 3)**" in md and "## Floors (every round, no history needed)" in md
    assert "- `auroc_floor`: auroc < 0.6 (floor.min_auroc) -> RAISED" in md
    assert json.loads((tmp_path / "r1" / "report.json").read_text())["floor"]["details"]["f1_floor"]["values"] == {"processbench_f1": 0.0, "min_f1": 0.05}


def test_floors_met_then_a_second_round_gives_the_drift_verdict(table_model, heldout, tmp_path):
    lenient = ("floor.min_auroc=0.375", "floor.min_f1=0")  # at the floors exactly: met
    first = _round(table_model, heldout, tmp_path / "hist" / "r1", *lenient)
    assert first["floor"]["flags"] == [] and first["redistill_advised"] is False
    assert first["verdict"].splitlines()[1:] == ["floor: met: auroc 0.3750 >= floor.min_auroc 0.375; processbench_f1 0.0000 >= floor.min_f1 0",
                                                 "-> nothing flagged, but no drift verdict either: a verdict needs an earlier report"]
    second = _round(table_model, heldout, tmp_path / "hist" / "r2", *lenient, history=tmp_path / "hist")
    assert second["previous"]["path"] == str(tmp_path / "hist" / "r1" / "report.json")
    assert second["drift_verdict"] == "none" and second["redistill_advised"] is False
    assert second["verdict"].splitlines()[0] == "drift: none since the previous report"
    assert second["verdict"].splitlines()[-1] == "-> no re-distillation needed"
    off = _round(table_model, heldout, tmp_path / "off", "floor.min_auroc=null", "floor.min_f1=null")
    assert off["verdict"].splitlines()[1] == "floor: off (floor.min_auroc and floor.min_f1 are null)" and not off["redistill_advised"]
