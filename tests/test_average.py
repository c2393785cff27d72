"""`prm-distill average`: the mean of a run's snapshots is one checkpoint that every scorer loads, and
checkpoints that cannot be averaged are refused without writing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prm_distill.average import average_checkpoints
from prm_distill.checkpoint import CheckpointError, read_sidecar
from prm_distill.cli import main


@pytest.fixture(scope="module")
def run_with_snapshot(tiny_backbone, synthetic_files, train_overrides, tmp_path_factory) -> Path:
    """A real 4-step run whose step-2 snapshot and final export differ (full fine-tuning, lr 1e-3)."""
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train

    out = tmp_path_factory.mktemp("avg_run") / "model"
    train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **{"optim.snapshot_steps": 2})))
    return out


def _pair(run: Path) -> tuple[Path, Path]:
    return run / "snapshots" / "step-2", run


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_uniform_mean_of_snapshot_and_final(run_with_snapshot, tmp_path):
    snap, final = _pair(run_with_snapshot)
    out = tmp_path / "avg"
    assert main(["average", "--model", str(snap), "--model", str(final), "--output", str(out)]) == 0
    a, b, m = _weights(snap), _weights(final), _weights(out)
    assert set(m) == set(a)
    moved = [k for k in a if not torch.equal(a[k], b[k])]
    assert moved, "the run must have changed some weights between step 2 and 4"
    for k in a:
        assert m[k].dtype == a[k].dtype
        torch.testing.assert_close(m[k], (a[k].double() / 2 + b[k].double() / 2).to(a[k].dtype), rtol=0, atol=1e-7)
    sc = read_sidecar(out)
    assert sc.threshold is None and sc.threshold_source.startswith("none: averaged weights")
    assert [e["step"] for e in sc.training["averaged_from"]] == [2, 4]
    assert [e["weight"] for e in sc.training["averaged_from"]] == [0.5, 0.5]
    # the snapshot's sidecar does not name the backbone; the final export's does, and the average keeps it
    assert "backbone_path" not in read_sidecar(snap).training
    assert sc.training["backbone_path"] == read_sidecar(final).training["backbone_path"]
    # both carry the run's training ids: the average carries their union, the same ids
    assert (out / "training_ids.txt").read_text() == (final / "training_ids.txt").read_text()
    assert sc.training["training_ids_missing_in"] == []
    assert (out / "tokenizer.json").read_bytes() == (final / "tokenizer.json").read_bytes()


def test_weights_are_normalised_and_one_hot_weights_give_that_checkpoints_scores(run_with_snapshot, tmp_path):
    from prm_distill.serve.engine import PRMEngine

    snap, final = _pair(run_with_snapshot)
    mixed = tmp_path / "mixed"
    average_checkpoints([snap, final], mixed, weights=[3, 1])
    a, b, m = _weights(snap), _weights(final), _weights(mixed)
    for k in a:
        torch.testing.assert_close(m[k], (0.75 * a[k].double() + 0.25 * b[k].double()).to(a[k].dtype), rtol=0, atol=1e-7)

    only_final = tmp_path / "only_final"
    average_checkpoints([snap, final], only_final, weights=[0, 2])
    items = [("Tom has 3 apples and buys 2 more. How many?", ["3 + 2 = 5", "The answer is 5."])]
    expect = PRMEngine.from_checkpoint(final, device="cpu").score(items)
    got = PRMEngine.from_checkpoint(only_final, device="cpu").score(items)
    assert got == expect


def test_dev_threshold_is_the_one_eval_dev_chooses(run_with_snapshot, synthetic_files, tmp_path):
    from prm_distill.evaluate import evaluate_files
    from prm_distill.serve.engine import PRMEngine

    snap, final = _pair(run_with_snapshot)
    out = tmp_path / "avg"
    dev = str(synthetic_files["dev"])
    assert main(["average", "--model", str(snap), "--model", str(final), "--output", str(out), "--dev", dev, "--device", "cpu"]) == 0
    sc = read_sidecar(out)
    rep = evaluate_files(PRMEngine.from_checkpoint(out, device="cpu"), [str(synthetic_files["test"])], dev_files=[dev])
    assert sc.threshold == pytest.approx(rep["threshold"])
    assert dev in sc.threshold_source


def test_different_architectures_are_refused_and_nothing_is_written(run_with_snapshot, qwen2_checkpoint, tmp_path, capsys):
    out = tmp_path / "avg"
    assert main(["average", "--model", str(run_with_snapshot), "--model", str(qwen2_checkpoint), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "config.json differs in" in err and "model_type" in err
    assert not out.exists()
    assert not list(tmp_path.glob(".avg.*")), "no temporary folder is left behind"


def test_an_existing_output_is_never_overwritten(run_with_snapshot, tmp_path, capsys):
    snap, final = _pair(run_with_snapshot)
    out = tmp_path / "keep"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["average", "--model", str(snap), "--model", str(final), "--output", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("argv, message", [
    (["--model", "{final}"], "at least two checkpoints"),
    (["--model", "{final}", "--model", "{final}"], "given twice"),
    (["--model", "{snap}", "--model", "{final}", "--weight", "1"], "1 weight(s) for 2 checkpoints"),
    (["--model", "{snap}", "--model", "{final}", "--weight", "1", "--weight", "-1"], "weights must be >= 0"),
    (["--model", "{snap}", "--model", "{final}", "--dev", "{missing}"], "dev file not found"),
])
def test_bad_arguments_are_exit_2_with_the_reason(run_with_snapshot, tmp_path, capsys, argv, message):
    snap, final = _pair(run_with_snapshot)
    subst = {"final": str(final), "snap": str(snap), "missing": str(tmp_path / "nope.jsonl")}
    out = tmp_path / "avg"
    assert main(["average", *[a.format(**subst) for a in argv], "--output", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_training_ids_are_the_union_and_a_checkpoint_without_them_is_named(run_with_snapshot, tmp_path):
    import shutil

    snap, final = _pair(run_with_snapshot)
    other = tmp_path / "other"
    shutil.copytree(final, other)
    (other / "training_ids.txt").write_text("new-1\n" + (final / "training_ids.txt").read_text().splitlines()[0] + "\n")
    bare = tmp_path / "bare"
    shutil.copytree(snap, bare)
    (bare / "training_ids.txt").unlink()
    provenance = average_checkpoints([final, other, bare], tmp_path / "avg")
    ids = (tmp_path / "avg" / "training_ids.txt").read_text().splitlines()
    assert ids == (final / "training_ids.txt").read_text().splitlines() + ["new-1"]  # each id once, first seen first
    assert provenance["training_ids_missing_in"] == [str(bare)]


def test_a_tokenizer_that_differs_is_refused(run_with_snapshot, tmp_path):
    import shutil

    snap, final = _pair(run_with_snapshot)
    other = tmp_path / "other"
    shutil.copytree(final, other)
    cfg = json.loads((other / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = 7
    (other / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"tokenizers differ \(tokenizer_config.json\)"):
        average_checkpoints([snap, other], tmp_path / "avg")


def test_an_interrupted_write_leaves_no_checkpoint(run_with_snapshot, tmp_path, monkeypatch):
    """The interruption is simulated (a stand-in for save_file raises KeyboardInterrupt, as Ctrl-C would)."""
    import safetensors.torch

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors.torch, "save_file", interrupted)
    snap, final = _pair(run_with_snapshot)
    with pytest.raises(KeyboardInterrupt):
        average_checkpoints([snap, final], tmp_path / "avg")
    assert list(tmp_path.iterdir()) == []
