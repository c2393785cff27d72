"""One main job: `prm-distill demo` is an alias of `prm-distill pipeline`, whose embedded defaults are
one packaged YAML (read through importlib.resources, so an installed wheel runs it too)."""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from prm_distill import cli
from prm_distill.cli import main
from prm_distill.pipeline.config import embedded_defaults, load_pipeline_config
from prm_distill.pipeline.stages import Context

ROOT = Path(__file__).resolve().parents[1]


def test_demo_is_the_pipeline_command_with_the_same_options_and_defaults(capsys):
    parser = cli.build_parser()
    demo, pipeline = parser.parse_args(["demo", "rollout.k=4"]), parser.parse_args(["pipeline", "rollout.k=4"])
    assert demo.func is pipeline.func is cli.cmd_pipeline
    assert {k: v for k, v in vars(demo).items() if k != "command"} == {k: v for k, v in vars(pipeline).items() if k != "command"}
    assert main(["demo", "--help-config"]) == 0
    demo_help = capsys.readouterr().out
    assert main(["pipeline", "--help-config"]) == 0
    assert capsys.readouterr().out == demo_help
    # --help-config shows the main job's values (the packaged YAML), not the section classes' defaults
    assert "train.optim.max_steps (250):" in demo_help and "train.model.num_layers (16):" in demo_help and "name ('demo'):" in demo_help


def test_the_embedded_defaults_are_the_one_packaged_yaml_and_write_the_documented_checkpoint():
    packaged = files("prm_distill.pipeline").joinpath("defaults.yaml").read_text(encoding="utf-8")
    assert (ROOT / "configs" / "pipeline.yaml").read_text(encoding="utf-8") == packaged  # a link, not a second copy
    cfg = embedded_defaults()
    assert dataclasses.asdict(load_pipeline_config(None)) == dataclasses.asdict(cfg)
    data = yaml.safe_load(packaged)
    assert cfg.train.optim.max_minutes == data["train"]["optim"]["max_minutes"] == 6 and cfg.train.optim.save_steps == 0
    assert cfg.label.verifier.alone and cfg.rollout.policy.policy == "smollm2" and cfg.rollout.policy.backend == "transformers"
    # `make demo` (= `prm-distill pipeline`) writes the checkpoint the docs name
    assert Context(cfg, 1).model_dir == Path("runs/demo/iter-1/train/model")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "prm-distill pipeline\n" in makefile and "--config configs/pipeline.yaml" not in makefile


def test_the_rl_stage_reads_the_packaged_trainer_yaml_that_configs_links_to():
    from prm_distill.pipeline.rl import trainer_config

    packaged = files("prm_distill.pipeline").joinpath("trainer_prm.yaml").read_text(encoding="utf-8")
    assert (ROOT / "configs" / "trainer_prm.yaml").read_text(encoding="utf-8") == packaged
    scorer = trainer_config()["rollout"]["agent"]["prm"]["scorers"][0]
    assert scorer["kwargs"]["model"] == "runs/demo/iter-1/train/model"


@pytest.mark.slow  # the whole main job on tiny models, server included
def test_demo_runs_the_main_job_loading_the_checkpoint_once(tiny_backbone, tmp_path, capsys, monkeypatch):
    import prm_distill.serve.engine as engine_module

    loads = []  # every checkpoint load of the engine, counted (the real load runs)
    real_load = engine_module.load_checkpoint
    monkeypatch.setattr(engine_module, "load_checkpoint", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    tiny = {"name": "d", "root": str(tmp_path), "threads": 1, "data.synthetic_train": 32, "data.synthetic_dev": 12, "data.heldout_size": 24,
            "rollout.problems": "embedded:2", "rollout.k": 2, "rollout.max_new_tokens": 16, "rollout.progress": False,
            "rollout.policy.policy": str(tiny_backbone), "label.progress": False, "train.model.backbone": str(tiny_backbone),
            "train.model.num_layers": "null", "train.lora.enabled": False, "train.lora.top_layers": "null", "train.optim.max_steps": 3,
            "train.optim.batch_size": 4, "train.optim.eval_steps": 0, "serve.n_requests": 2, "recalibrate.audit.max_trajectories": 6}
    assert main(["demo", *[f"{k}={v}" for k, v in tiny.items()]]) == 0
    it = tmp_path / "d" / "iter-1"
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"report: {it / 'report.md'}"
    assert (it / "train" / "model" / "prm_distill.json").is_file()
    assert json.loads((it / "eval" / "report.json").read_text())["n_items"] == 24
    assert "2 trajectories scored over HTTP" in (it / "serve" / "serve.txt").read_text()
    table = (it / "rl" / "shaped_advantages.txt").read_text()
    for mode in ("process_weighted", "gvpo", "additive"):
        assert table.count(mode) == 2  # one correct and one wrong trajectory per mode
    recal = json.loads((it / "recalibrate" / "report.json").read_text())
    assert recal["n_items"] == 24 and recal["previous"] is None and recal["calibration"]["adopted"] is False
    assert len(loads) == 1  # loaded once; eval, serve, RL and recalibration share the engine
