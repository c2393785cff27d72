"""A training run knows what it is (output_dir/run.json), on real `prm-distill train` subprocesses: the
same command again says finished and retrains nothing, other settings or data are refused (exit 2)
naming what changed and the ways on, --fresh starts over, a larger max_steps continues; and a dev split
that cannot choose a threshold says so instead of a silent null."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prm_distill import exits
from prm_distill.checkpoint import SIDECAR_NAME
from prm_distill.records import Trajectory, read_jsonl, write_jsonl
from prm_distill.train.identity import RUN_FILE, changes

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
SMALL = {"optim.max_steps": 2, "optim.save_steps": 1, "optim.batch_size": 4, "data.limit": 8}


def _train(overrides: list[str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prm_distill", "train", *flags, *overrides], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=300)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def finished(tiny_backbone, synthetic_files, train_overrides, tmp_path_factory):
    """(folder, overrides) of one finished 2-step run, trained once; each test works on its own copy."""
    out = tmp_path_factory.mktemp("identity") / "m"
    _ok(_train(train_overrides(tiny_backbone, synthetic_files, out, **SMALL)))
    return out


def _copy(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "m"
    shutil.copytree(finished, out)  # copy2: modification times kept
    return out


def test_the_same_command_again_says_finished_and_retrains_nothing(finished, tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = _copy(finished, tmp_path)
    run = json.loads((out / RUN_FILE).read_text())
    assert run["config"]["optim"]["learning_rate"] == 1e-3 and run["config"]["model"]["step_tag"] == "<|step|>"  # defaults resolved
    digest = run["data_files"][str(synthetic_files["train"])]
    assert digest["size"] == synthetic_files["train"].stat().st_size and len(digest["sha256"]) == 64
    assert run["backbone"]["path"] == str(tiny_backbone) and "model.safetensors" in run["backbone"]["files"]
    stamps = {p: p.stat().st_mtime_ns for p in [out / "checkpoints" / "step-2" / "trainer_state.json", out / "model.safetensors", out / SIDECAR_NAME]}

    proc = _ok(_train(train_overrides(tiny_backbone, synthetic_files, out, **SMALL)))
    assert f"already finished: {out}" in proc.stdout and "training on" not in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_other_settings_are_refused_naming_them_and_fresh_starts_over(finished, tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = _copy(finished, tmp_path)
    changed = train_overrides(tiny_backbone, synthetic_files, out, **{**SMALL, "optim.learning_rate": 1e-2,
                                                                      "data.train": f"[{synthetic_files['train']},{synthetic_files['test']}]"})
    proc = _train(changed)
    assert proc.returncode == exits.BAD_INPUT, proc.stderr[-3000:]
    assert "optim.learning_rate: 0.001 -> 0.01" in proc.stderr and f"data.train: added {synthetic_files['test']}" in proc.stderr
    assert "--fresh" in proc.stderr and "optim.output_dir" in proc.stderr and "Traceback" not in proc.stderr
    before = (out / "checkpoints" / "step-2" / "trainer_state.json").stat().st_mtime_ns

    proc = _ok(_train(changed, "--fresh"))
    assert f"starting over in {out}: removed checkpoints/, the export, {RUN_FILE}" in proc.stdout and "resumed from" not in proc.stdout
    assert (out / "checkpoints" / "step-2" / "trainer_state.json").stat().st_mtime_ns != before
    assert json.loads((out / RUN_FILE).read_text())["config"]["optim"]["learning_rate"] == 1e-2
    training = json.loads((out / SIDECAR_NAME).read_text())["training"]
    assert training["steps"] == 2 and [h["lr"] for h in training["history"] if "lr" in h][0] == pytest.approx(5e-3)  # the new rate's schedule


def test_a_larger_max_steps_continues_from_the_last_step(finished, tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = _copy(finished, tmp_path)
    proc = _ok(_train(train_overrides(tiny_backbone, synthetic_files, out, **{**SMALL, "optim.max_steps": 3, "optim.logging_steps": 3})))
    assert f"resumed from {out / 'checkpoints' / 'step-2'} at step 2" in proc.stdout  # the finished run saved its last step
    training = json.loads((out / SIDECAR_NAME).read_text())["training"]
    assert training["steps"] == 3 and [h["step"] for h in training["history"] if "loss" in h] == [1, 2, 3]
    assert json.loads((out / RUN_FILE).read_text())["config"]["optim"]["max_steps"] == 3  # the new budget recorded


def test_changed_data_is_refused_naming_the_file(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    data = tmp_path / "train.jsonl"
    shutil.copy(synthetic_files["train"], data)
    overrides = train_overrides(tiny_backbone, {**synthetic_files, "train": data}, tmp_path / "m", **{**SMALL, "optim.max_steps": 1})
    _ok(_train(overrides))
    records = read_jsonl(data)
    write_jsonl(records[1:], data)  # one record fewer: same path, other bytes
    proc = _train(overrides)
    assert proc.returncode == exits.BAD_INPUT, proc.stderr[-3000:]
    assert f"data file {data} changed (size" in proc.stderr and "sha256" in proc.stderr and "--fresh" in proc.stderr


def test_an_old_folder_without_run_json_resumes_and_records_it(finished, tiny_backbone, synthetic_files, train_overrides, tmp_path):
    """Checkpoints made before runs recorded their identity: resumed as before, with a warning, and run.json written."""
    out = _copy(finished, tmp_path)
    (out / RUN_FILE).unlink()
    (out / SIDECAR_NAME).unlink()  # stopped before the export
    shutil.rmtree(out / "checkpoints" / "step-2")
    proc = _ok(_train(train_overrides(tiny_backbone, synthetic_files, out, **SMALL)))
    assert f"has training outputs but no {RUN_FILE}" in proc.stderr and f"resumed from {out / 'checkpoints' / 'step-1'} at step 1" in proc.stdout
    assert (out / RUN_FILE).is_file() and json.loads((out / SIDECAR_NAME).read_text())["training"]["steps"] == 2


def test_a_one_class_dev_split_warns_and_the_threshold_source_says_why(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    dev = tmp_path / "dev.jsonl"
    write_jsonl([Trajectory(id=f"d{i}", question=f"What is {i} + 1?", steps=[f"{i} + 1 = {i + 1}.", f"So {i + 1}."], labels=[1.0, 1.0])
                 for i in range(2)], dev)
    out = tmp_path / "m"
    proc = _ok(_train(train_overrides(tiny_backbone, {**synthetic_files, "dev": dev}, out, **{**SMALL, "optim.max_steps": 1, "optim.save_steps": 0})))
    why = "2 records: 0 with a first error, 2 all-correct; 4 good and 0 bad labelled steps"
    assert f"dev split unusable ({why}: ProcessBench F1 needs records with a first error and all-correct ones and step AUROC needs" in proc.stderr
    assert f"dev: unusable ({why}" in proc.stdout and "nan" not in proc.stdout
    sidecar = json.loads((out / SIDECAR_NAME).read_text())
    assert sidecar["threshold"] is None and sidecar["threshold_source"].startswith(f"none: dev split unusable ({why}")


def test_changes_name_keys_lists_and_files_and_leave_the_budget_alone():
    def ident(**optim):
        return {"encoding_version": 1, "config": {"optim": {"learning_rate": 1e-4, "max_steps": 8, "eval_steps": 5, "output_dir": "a", **optim},
                                                  "data": {"train": ["a.jsonl"]}},
                "data_files": {"a.jsonl": {"size": 10, "sha256": "0" * 64}}, "backbone": {"path": "b", "files": {"config.json": 1}}}

    old = ident()
    assert changes(old, ident(max_steps=20, eval_steps=1, output_dir="moved")) == []
    new = ident(learning_rate=1e-3)
    new["config"]["data"]["train"] = ["a.jsonl", "x.jsonl"]
    new["data_files"] = {"a.jsonl": {"size": 12, "sha256": "1" * 64}, "x.jsonl": {"size": 1, "sha256": "2" * 64}}
    assert changes(old, new) == ["data.train: added x.jsonl", "optim.learning_rate: 0.0001 -> 0.001",
                                 "data file a.jsonl changed (size 10 -> 12, sha256 000000000000 -> 111111111111)"]
