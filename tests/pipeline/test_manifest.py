"""The manifest's skip rule on real files: done + same config hash + same input hashes + outputs present."""

from __future__ import annotations

import hashlib

import pytest

from prm_distill.pipeline.manifest import Manifest, hash_inputs, sha256_config, sha256_path


def test_skip_rule_follows_config_inputs_and_outputs(tmp_path):
    inp, stage = tmp_path / "in.jsonl", tmp_path / "stage"
    inp.write_text("a\n")
    stage.mkdir()
    (stage / "out.json").write_text("{}\n")
    m = Manifest(tmp_path / "manifest.json", "t", 1)
    cfg, inputs = sha256_config({"k": 2}), hash_inputs([inp])
    assert inputs == {str(inp): hashlib.sha256(b"a\n").hexdigest()}
    assert not m.is_current("s", cfg, inputs, stage)  # never ran
    m.record("s", cfg, inputs, stage, elapsed_s=1.0)
    reloaded = Manifest(tmp_path / "manifest.json", "t", 1)  # what the next invocation reads
    assert reloaded.stages["s"]["outputs"] == {"out.json": hashlib.sha256(b"{}\n").hexdigest()}
    assert reloaded.is_current("s", cfg, inputs, stage)
    assert not reloaded.is_current("s", sha256_config({"k": 3}), inputs, stage)
    assert reloaded.is_stale("s", sha256_config({"k": 3}), inputs)
    inp.write_text("b\n")
    assert not reloaded.is_current("s", cfg, hash_inputs([inp]), stage)
    (stage / "out.json").unlink()
    assert not reloaded.is_current("s", cfg, inputs, stage) and not reloaded.is_stale("s", cfg, inputs)  # rerun, folder kept
    assert len(reloaded.data["invocations"]) == 2


def test_a_folder_hash_changes_with_any_file_and_a_missing_input_is_named(tmp_path):
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "sub" / "w.bin").write_bytes(b"1")
    before = sha256_path(tmp_path / "m")
    (tmp_path / "m" / "sub" / "w.bin").write_bytes(b"2")
    assert sha256_path(tmp_path / "m") != before
    with pytest.raises(FileNotFoundError, match="pipeline input not found: .*nope"):
        sha256_path(tmp_path / "nope")


def test_a_corrupt_manifest_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="delete it to rerun"):
        Manifest(tmp_path / "manifest.json", "t", 1)
