"""Files the package writes: strict JSON (an undefined metric is null, never a bare NaN) through one
writer, and the process umask honoured like any other file (a checkpoint copied to shared storage or
served by another user must stay readable)."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from prm_distill.atomic import atomic_open, json_safe, write_json
from prm_distill.checkpoint import Sidecar, read_sidecar, write_sidecar


def strict_load(path: Path):
    """json.loads that refuses NaN/Infinity, as JavaScript, Go and Rust parsers do."""

    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_write_json_turns_undefined_numbers_into_null_and_numpy_into_plain_numbers(tmp_path):
    obj = {"auroc": float("nan"), "inf": math.inf, "ok": 0.25, "n": np.int64(3), "f": np.float32(0.5),
           "flag": np.bool_(True), "arr": np.array([1.0, np.nan]), "nested": [{"x": float("-inf")}], "path": tmp_path}
    write_json(tmp_path / "r.json", obj)
    assert strict_load(tmp_path / "r.json") == {"auroc": None, "inf": None, "ok": 0.25, "n": 3, "f": 0.5, "flag": True,
                                                "arr": [1.0, None], "nested": [{"x": None}], "path": str(tmp_path)}
    assert json_safe({1: float("nan")}) == {"1": None}


def test_a_sidecar_with_an_undefined_training_metric_is_written_as_strict_json(tmp_path):
    # a dev split with one class: AUROC undefined
    sidecar = Sidecar(step_tag="\n\n", step_tag_id=7, max_length=64, training={"dev": {"auroc": float("nan"), "threshold": 0.5}})
    write_sidecar(tmp_path, sidecar)
    assert strict_load(tmp_path / "prm_distill.json")["training"]["dev"] == {"auroc": None, "threshold": 0.5}
    assert read_sidecar(tmp_path).training["dev"]["auroc"] is None


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_files_follow_the_process_umask(tmp_path, umask_022):
    with atomic_open(tmp_path / "a.txt") as f:
        f.write("x")
    write_json(tmp_path / "b.json", {"a": 1})
    assert mode(tmp_path / "a.txt") == mode(tmp_path / "b.json") == 0o644
    os.umask(0o077)
    write_json(tmp_path / "c.json", {"a": 1})
    assert mode(tmp_path / "c.json") == 0o600
    os.umask(0o002)
    write_json(tmp_path / "b.json", {"a": 2})  # replacing a file: the new one's mode, from the umask
    assert mode(tmp_path / "b.json") == 0o664


def test_every_file_of_an_exported_checkpoint_is_readable_by_others(tiny_backbone, synthetic_files, train_overrides, tmp_path, umask_022):
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train

    out = tmp_path / "model"
    train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **{"optim.max_steps": 1})))
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"model.safetensors", "prm_distill.json", "training_ids.txt"} <= {p.name for p in files}
    assert {p.name: oct(mode(p)) for p in files} == {p.name: oct(0o644) for p in files}
