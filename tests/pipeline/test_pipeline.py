"""`prm-distill pipeline` end to end with tiny models: a tiny random causal LM is both the policy
(rollout stage, transformers backend) and the student's backbone; the judge is the arithmetic
verifier alone; the server, runner and recalibration are the real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prm_distill import exits
from prm_distill.cli import main
from prm_distill.pipeline import PipelineConfig, load_pipeline_config, run_pipeline

ALL = ["data", "rollout", "label", "train", "eval", "serve", "rl", "recalibrate"]


def tiny_overrides(root: Path, backbone: Path, **extra: object) -> list[str]:
    base: dict[str, object] = {
        "name": "t", "root": str(root), "threads": 1,
        "data.synthetic_train": 32, "data.synthetic_dev": 12, "data.heldout_size": 24,
        "rollout.problems": "embedded:3", "rollout.k": 2, "rollout.max_new_tokens": 24, "rollout.progress": False,
        "rollout.policy.policy": str(backbone), "rollout.policy.backend": "transformers",
        "label.progress": False,
        "train.model.backbone": str(backbone), "train.model.max_length": 256, "train.model.num_layers": "null", "train.lora.enabled": False,
        "train.lora.top_layers": "null", "train.optim.max_minutes": "null",
        "train.optim.max_steps": 3, "train.optim.batch_size": 4, "train.optim.eval_steps": 0, "train.optim.save_steps": 0,
        "train.optim.logging_steps": 1, "train.optim.learning_rate": 1e-3,
        "serve.n_requests": 2, "recalibrate.audit.max_trajectories": 6,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def config(root: Path, backbone: Path, **extra: object) -> PipelineConfig:
    return load_pipeline_config(None, tiny_overrides(root, backbone, **extra))


def manifest(root: Path, k: int = 1) -> dict:
    return json.loads((root / "t" / f"iter-{k}" / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.slow  # tiny models loaded several times, a server started
def test_pipeline_runs_every_stage_then_skips_and_resumes(tmp_path, tiny_backbone):
    cfg = config(tmp_path, tiny_backbone)
    first = run_pipeline(cfg)
    assert first.exit_code == exits.OK
    assert first.ran == ALL and first.skipped == []
    m = manifest(tmp_path)
    assert [m["stages"][s]["status"] for s in ALL] == ["done"] * len(ALL)
    it = tmp_path / "t" / "iter-1"
    for stage, out in [("rollout", "rollouts.jsonl"), ("label", "labels.jsonl"), ("train", "model/prm_distill.json"), ("eval", "report.json"),
                       ("serve", "serve.txt"), ("rl", "shaped_advantages.txt"), ("recalibrate", "report.json")]:
        assert out in m["stages"][stage]["outputs"], stage
        assert (it / stage / out).is_file()
    # the label stage's recorded input is the rollout stage's output, by hash
    rollouts = str(it / "rollout" / "rollouts.jsonl")
    assert m["stages"]["label"]["inputs"][rollouts] == m["stages"]["rollout"]["outputs"]["rollouts.jsonl"]

    again = run_pipeline(cfg)  # nothing changed: nothing runs
    assert again.ran == [] and again.skipped == ALL
    assert again.exit_code == exits.OK

    (it / "eval" / "report.json").unlink()  # an output gone: only that stage reruns
    assert run_pipeline(cfg).ran == ["eval"]

    # a changed config section reruns that stage and those reading its outputs, nothing upstream
    changed = run_pipeline(config(tmp_path, tiny_backbone, **{"train.optim.max_steps": 2}))
    assert changed.ran == ["train", "eval", "serve", "rl", "recalibrate"]
    assert changed.skipped == ["data", "rollout", "label"]
    assert manifest(tmp_path)["stages"]["train"]["summary"]["steps"] == 2

    report = Path(changed.report)
    text = report.read_text(encoding="utf-8")
    assert report == it / "report.md"
    assert "## Held-out evaluation" in text and "## Recalibration" in text
    for plot in manifest(tmp_path)["stages"]["recalibrate"]["summary"]["plots"].values():  # plots linked, and there
        rel = str((it / "recalibrate" / plot).relative_to(it))
        assert f"]({rel})" in text and (it / rel).is_file()


@pytest.mark.slow  # tiny models loaded several times, a server started
def test_a_failed_stage_is_recorded_and_the_rerun_resumes_there(tmp_path, tiny_backbone):
    bad = config(tmp_path, tiny_backbone, **{"train.model.backbone": str(tmp_path / "no-such-model")})
    with pytest.raises(ValueError):
        run_pipeline(bad)
    m = manifest(tmp_path)
    assert m["stages"]["train"]["status"] == "failed" and "no-such-model" in m["stages"]["train"]["error"]
    assert m["invocations"][-1]["ran"] == ["data", "rollout", "label"] and m["invocations"][-1]["failed"] == "train"
    resumed = run_pipeline(config(tmp_path, tiny_backbone))
    assert resumed.skipped == ["data", "rollout", "label"]
    assert resumed.ran == ["train", "eval", "serve", "rl", "recalibrate"]


@pytest.mark.slow  # tiny models loaded several times, a server started
def test_iteration_two_continues_from_iteration_one_and_surfaces_drift(tmp_path, tiny_backbone, capsys):
    cfg = config(tmp_path, tiny_backbone, **{"serve.enabled": False, "rl.enabled": False})
    assert run_pipeline(cfg).exit_code == exits.OK
    with pytest.raises(FileNotFoundError, match="run --iteration 2 first"):
        run_pipeline(cfg, iteration=3)

    # every all-correct trajectory has some slope below 10: the position_bias audit flag is raised, and counted as drift
    drifty = tiny_overrides(tmp_path, tiny_backbone, **{"serve.enabled": False, "rl.enabled": False,
                                                       "recalibrate.drift.include_audit_flags": True,
                                                       "recalibrate.audit.position_slope_bound": 10})
    code = main(["pipeline", "--iteration", "2", *drifty])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == exits.DRIFT
    assert out[-1] == f"report: {tmp_path / 't' / 'iter-2' / 'report.md'}"
    m2 = manifest(tmp_path, 2)
    it1 = tmp_path / "t" / "iter-1"
    assert m2["stages"]["train"]["summary"]["backbone"] == str(it1 / "train" / "model")
    assert str(it1 / "train" / "model") in m2["stages"]["train"]["inputs"]
    recal = m2["stages"]["recalibrate"]["summary"]
    assert recal["previous"] == str(it1 / "recalibrate" / "report.json")
    assert "position_bias" in recal["drift"]
    heldout = str(tmp_path / "t" / "heldout" / "test.jsonl")  # the same held-out file, unchanged, in both iterations
    assert m2["stages"]["eval"]["inputs"][heldout] == manifest(tmp_path, 1)["stages"]["eval"]["inputs"][heldout]
    # a rerun skips everything and still reports the drift
    assert main(["pipeline", "--iteration", "2", *drifty]) == exits.DRIFT


def test_bad_config_exits_2_naming_the_key(tmp_path, capsys):
    cfg = tmp_path / "p.yaml"
    cfg.write_text("name: x\ntrain:\n  optim:\n    max_stepz: 3\n", encoding="utf-8")
    assert main(["pipeline", "--config", str(cfg)]) == exits.BAD_INPUT
    err = capsys.readouterr().err
    assert "train.optim.max_stepz: unknown key" in err
    assert main(["pipeline", "name=a/b"]) == exits.BAD_INPUT
    assert "name must be a plain folder name" in capsys.readouterr().err
    assert main(["pipeline", "--config", str(tmp_path / "missing.yaml")]) == exits.BAD_INPUT
    assert "config file not found" in capsys.readouterr().err


def test_configs_pipeline_yaml_holds_the_embedded_defaults():
    """`make demo` runs configs/pipeline.yaml; `prm-distill pipeline` without --config the same settings."""
    import dataclasses

    yaml_cfg = dataclasses.asdict(load_pipeline_config(Path(__file__).resolve().parents[2] / "configs" / "pipeline.yaml"))
    embedded = dataclasses.asdict(load_pipeline_config(None, ["name=demo"]))
    assert yaml_cfg == embedded
    assert embedded["label"]["verifier"]["alone"] and embedded["rollout"]["policy"]["policy"] == "smollm2"


def test_the_pipelines_own_files_stay_records_when_the_users_are_in_another_format(tmp_path):
    # a user adds their TRL rows with train.data.format=trl: the labels and synthetic files the pipeline writes are
    # still read as records (jsonl:), the user's file in the user's format
    from prm_distill.pipeline.stages import Context, train_config
    from prm_distill.records import file_and_format

    cfg = config(tmp_path, tmp_path / "backbone", **{"train.data.format": "trl", "train.data.train": f"[{tmp_path / 'mine.parquet'}]"})
    files = train_config(Context(cfg, 1)).data.train
    assert [file_and_format(f, "trl")[1] for f in files] == ["jsonl", "jsonl", "trl"]
    assert Path(file_and_format(files[0], "trl")[0]).name == "labels.jsonl" and files[2] == str(tmp_path / "mine.parquet")
    plain = train_config(Context(config(tmp_path, tmp_path / "backbone"), 1)).data.train  # records throughout: paths as before
    assert not any(f.startswith("jsonl:") for f in plain)
