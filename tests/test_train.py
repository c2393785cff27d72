"""The real training loop on a tiny model: export format, LoRA, resume, config, bad input."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from prm_distill.backbones import BackboneError
from prm_distill.checkpoint import SIDECAR_NAME, load_checkpoint
from prm_distill.config import ConfigError, load_config
from prm_distill.records import read_jsonl
from prm_distill.serve.engine import PRMEngine
from prm_distill.train import TrainJobConfig, train

ROOT = Path(__file__).resolve().parents[1]


def test_export_reloads_in_plain_transformers_with_the_engine_numbers(tiny_checkpoint, synthetic_files):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    sidecar = json.loads((tiny_checkpoint / SIDECAR_NAME).read_text())
    assert sidecar["step_tag"] == "<|step|>" and sidecar["encoding_version"] == 1
    assert sidecar["training"]["steps"] == 4 and 0.0 <= sidecar["threshold"] <= 1.0
    assert list(tiny_checkpoint.glob("*.safetensors")) and not list(tiny_checkpoint.glob("*.bin"))
    ids = (tiny_checkpoint / "training_ids.txt").read_text().split()
    assert ids and all(i.startswith("train-") for i in ids)

    # plain transformers, no prm_distill code: tokenise the same way by hand, softmax at the tags
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = AutoModelForTokenClassification.from_pretrained(tiny_checkpoint).eval()
    tag = sidecar["step_tag_id"]
    rec = read_jsonl(synthetic_files["test"])[0]
    input_ids = tok(rec.question + "\n", add_special_tokens=False)["input_ids"]
    positions = []
    for s in rec.steps:
        input_ids += tok(s, add_special_tokens=False)["input_ids"] + [tag]
        positions.append(len(input_ids) - 1)
    with torch.no_grad():
        probs = model(input_ids=torch.tensor([input_ids])).logits[0, positions].softmax(-1)[:, 1].tolist()
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu")
    got = engine.score([(rec.question, rec.steps)])[0]
    assert max(abs(a - b) for a, b in zip(probs, got)) < 1e-5


def test_training_moves_the_model_toward_the_labels(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    """Twenty steps on a fixed batch of labels lower the loss: the loop really optimises."""
    out = tmp_path / "m"
    settings = {"optim.max_steps": 20, "data.limit": 8, "optim.batch_size": 8, "optim.warmup_ratio": 0.0, "optim.lr_scheduler": "constant"}
    summary = train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **settings)))
    losses = [h["loss"] for h in summary["history"] if "loss" in h]
    assert len(losses) == 20 and losses[-1] < 0.7 * losses[0]


def test_lora_keeps_the_head_trainable_and_export_is_merged(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    from safetensors import safe_open

    from prm_distill.train.config import LoraSettings, ModelConfig
    from prm_distill.train.model import build_model

    model, *_ = build_model(ModelConfig(backbone=str(tiny_backbone)), LoraSettings(r=4, alpha=8, top_layers=1))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("score" in n for n in trainable)
    assert any("layers.1." in n and "lora_" in n for n in trainable) and not any("layers.0." in n for n in trainable)

    out = tmp_path / "lora"
    train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **{"lora.enabled": True, "lora.r": 4, "optim.max_steps": 2})))
    (weights,) = out.glob("*.safetensors")
    with safe_open(weights, "pt") as f:
        keys = list(f.keys())
    assert not any("lora" in k for k in keys) and "score.weight" in keys
    model, _, _ = load_checkpoint(out)
    assert type(model).__name__ == "LlamaForTokenClassification"


def test_resume_continues_where_it_stopped_and_matches_an_uninterrupted_run(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    common = {"optim.max_steps": 6, "optim.save_steps": 3, "optim.batch_size": 4, "data.limit": 16}
    straight = tmp_path / "straight"
    train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, straight, **common)))

    # the straight run left a mid-run checkpoint at step 3: drop everything after it (as if killed there)
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copytree(straight / "checkpoints" / "step-3", resumed / "checkpoints" / "step-3")
    # the time the first process spent is kept: pretend it took 1000 s; the summary adds this process's
    # seconds to it, and the rate is over both (a rate over this process alone would claim 2x the speed)
    state_file = resumed / "checkpoints" / "step-3" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert 0 < state["train_wall_s"] < 1000
    state_file.write_text(json.dumps({**state, "train_wall_s": 1000.0}))
    t0 = time.time()
    summary = train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, resumed, **common)))
    assert 1000 < summary["train_wall_s"] <= 1000 + (time.time() - t0) + 0.1
    assert summary["tokens_per_s"] == pytest.approx(summary["tokens_seen"] / summary["train_wall_s"], abs=0.1)
    assert summary["steps"] == 6
    assert [h["step"] for h in summary["history"] if "loss" in h] == [1, 2, 3, 4, 5, 6]

    a, _, _ = load_checkpoint(straight)
    b, _, _ = load_checkpoint(resumed)
    diff = max((pa - pb).abs().max().item() for pa, pb in zip(a.parameters(), b.parameters()))
    assert diff < 1e-5


def test_config_overrides_and_errors_name_the_key(tmp_path):
    cfg = load_config(TrainJobConfig, None,
                      ["optim.learning_rate=1e-3", "optim.max_steps=7", "model.backbone=/x", "loss.kind=mix", "data.train=[a.jsonl,b.jsonl]"])
    assert cfg.optim.learning_rate == 0.001 and cfg.optim.max_steps == 7 and cfg.model.backbone == "/x"
    assert cfg.loss.kind == "mix" and cfg.data.train == ["a.jsonl", "b.jsonl"]
    with pytest.raises(ConfigError, match=r"optim\.max_stepz: unknown key"):
        load_config(TrainJobConfig, None, ["optim.max_stepz=3"])
    with pytest.raises(ConfigError, match=r"optim\.max_steps: expected an integer"):
        load_config(TrainJobConfig, None, ["optim.max_steps=many"])
    with pytest.raises(ConfigError, match=r"loss: .*loss.kind must be one of"):
        load_config(TrainJobConfig, None, ["loss.kind=hinge"])
    (tmp_path / "c.yaml").write_text("optim:\n  max_steps: 9\n  learning_rate: 0.01\nmodel:\n  max_length: 128\n")
    cfg = load_config(TrainJobConfig, tmp_path / "c.yaml", ["optim.max_steps=11"])
    assert cfg.optim.max_steps == 11 and cfg.optim.learning_rate == 0.01 and cfg.model.max_length == 128


def test_the_old_train_section_name_still_loads_with_a_warning(tmp_path):
    """`train:` (in a train config; `train.train.` in the pipeline's) was renamed `optim:`: an old file and
    old overrides keep working, each with a FutureWarning naming the new key, and mixing both is refused."""
    (tmp_path / "old.yaml").write_text("train:\n  max_steps: 9\n  learning_rate: 0.01\n")
    with pytest.warns(FutureWarning, match=r"config key train is now optim"):
        cfg = load_config(TrainJobConfig, tmp_path / "old.yaml", ["optim.max_steps=11"])
    assert (cfg.optim.max_steps, cfg.optim.learning_rate) == (11, 0.01)  # old file, new override: merged key by key
    with pytest.warns(FutureWarning):
        assert load_config(TrainJobConfig, None, ["train.max_steps=5"]).optim.max_steps == 5
    with pytest.raises(ConfigError, match=r"train and optim are the same setting .*give only optim"):
        load_config(TrainJobConfig, None, ["train.max_steps=5", "optim.max_steps=6"])


def test_shipped_config_loads():
    cfg = load_config(TrainJobConfig, Path(__file__).resolve().parents[1] / "configs" / "train.yaml")
    assert cfg.model.backbone == "smollm2" and cfg.optim.output_dir


def test_backbone_without_a_tokenizer_is_a_clear_error(tiny_backbone, tmp_path):
    from prm_distill.train.config import LoraSettings, ModelConfig
    from prm_distill.train.model import build_model

    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_backbone.iterdir():
        if f.name in ("config.json", "model.safetensors"):
            shutil.copy(f, bare / f.name)
    with pytest.raises(BackboneError, match="no usable tokenizer"):
        build_model(ModelConfig(backbone=str(bare)), LoraSettings(enabled=False))
    with pytest.raises(BackboneError, match="no config.json"):
        build_model(ModelConfig(backbone=str(tmp_path)), LoraSettings(enabled=False))


def test_no_supervised_labels_is_a_clear_error(tiny_backbone, train_overrides, tmp_path):
    from prm_distill.records import Trajectory, write_jsonl

    write_jsonl([Trajectory(id="a", question="Q?", steps=["s"], labels=[None])], tmp_path / "t.jsonl")
    files = {"train": tmp_path / "t.jsonl", "dev": tmp_path / "t.jsonl"}
    with pytest.raises(ValueError, match="no supervised step"):
        train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, files, tmp_path / "o")))


@pytest.mark.slow
def test_accelerate_launch_with_two_processes(tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / "ddp-cpu.yaml"),
           "-m", "prm_distill.cli", "train",  # the shipped 2-process config: torchrun; CPU-only hosts get gloo
           *train_overrides(tiny_backbone, synthetic_files, out, **{"optim.max_steps": 3, "optim.save_steps": 2})]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es)" in proc.stdout
    sidecar = json.loads((out / SIDECAR_NAME).read_text())
    assert sidecar["training"]["steps"] == 3
    assert (out / "checkpoints" / "step-2" / "trainer_state.json").is_file()
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    rec = read_jsonl(synthetic_files["test"])[0]
    assert len(engine.score([(rec.question, rec.steps)])[0]) == len(rec.steps)


@pytest.mark.parametrize("save_steps", [100, 0])  # 0: the pipeline's setting; the budget saves the checkpoint anyway
def test_time_budget_stops_exports_and_leaves_a_resumable_checkpoint(save_steps, tiny_backbone, synthetic_files, train_overrides, tmp_path):
    out = tmp_path / "budget"
    over = {"optim.max_steps": 3, "optim.save_steps": save_steps, "data.limit": 8}
    first = train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **over, **{"optim.max_minutes": 1e-6})))
    assert first["steps"] == 1 and (out / SIDECAR_NAME).is_file()  # stopped after one step, still exported
    assert (out / "checkpoints" / "step-1" / "trainer_state.json").is_file()
    second = train(load_config(TrainJobConfig, None, train_overrides(tiny_backbone, synthetic_files, out, **over)))
    assert second["steps"] == 3 and [h["step"] for h in second["history"] if "loss" in h] == [1, 2, 3]


def test_num_layers_keeps_the_bottom_layers_and_exports_a_loadable_shallower_model(tiny_backbone, tmp_path):
    from transformers import AutoModelForTokenClassification

    from prm_distill.train.config import LoraSettings, ModelConfig
    from prm_distill.train.model import build_model, export

    full, *_ = build_model(ModelConfig(backbone=str(tiny_backbone)), LoraSettings(enabled=False))
    model, tok, encoding, _ = build_model(ModelConfig(backbone=str(tiny_backbone), num_layers=1), LoraSettings(enabled=False))
    assert model.config.num_hidden_layers == 1 and len(model.model.layers) == 1
    # the kept layer is the backbone's first layer, unchanged
    torch.testing.assert_close(model.model.layers[0].mlp.up_proj.weight, full.model.layers[0].mlp.up_proj.weight)
    export(model, tok, str(tmp_path / "shallow"), encoding)
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "shallow")
    assert reloaded.config.num_hidden_layers == 1 and len(reloaded.model.layers) == 1
    with pytest.raises(BackboneError, match="num_layers must be between 1 and 2"):
        build_model(ModelConfig(backbone=str(tiny_backbone), num_layers=5), LoraSettings(enabled=False))


def test_train_prints_a_readable_line_per_log_step_and_keeps_the_json_in_a_file(tiny_backbone, synthetic_files, train_overrides,
                                                                              tmp_path, capsys):
    import re

    from prm_distill.cli import main

    out = tmp_path / "o"
    assert main(["train", *train_overrides(tiny_backbone, synthetic_files, out, **{"optim.logging_steps": 2})]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step ")]
    assert [ln.split()[1] for ln in lines] == ["2/4", "4/4"]  # max_steps 4, a line every 2 steps
    assert all(re.fullmatch(r"step \d/4  loss \d\.\d{4}  lr \S+  \d+ tokens/s  ETA \d+m\d\ds", ln) for ln in lines), lines
    logged = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged] == [2, 4] and all(set(e) == {"step", "loss", "lr", "tokens_per_s"} for e in logged)
    assert f"{logged[0]['loss']:.4f}" == lines[0].split()[3]  # the console line rounds the logged value


def test_bf16_on_a_cpu_that_only_emulates_it_warns_and_auto_stays_fp32(monkeypatch, caplog):
    import prm_distill.train.loop as loop

    monkeypatch.setattr(loop.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: False)  # an AVX2-only EPYC
    with caplog.at_level("WARNING", logger="prm_distill.train"):
        assert loop._precision("auto") == "no" and not caplog.records
        assert loop._precision("bf16") == "bf16"  # asked for: kept, but said
    assert "bf16 is emulated here and far slower than fp32 (optim.mixed_precision=no)" in caplog.text
    caplog.clear()
    monkeypatch.setattr(loop, "cpu_has_native_bf16", lambda: True)
    with caplog.at_level("WARNING", logger="prm_distill.train"):
        assert loop._precision("bf16") == "bf16" and not caplog.records


@pytest.mark.parametrize("checkpointing", [False, True])
def test_full_fine_tuning_of_the_top_layers_freezes_the_rest(tiny_backbone, checkpointing):
    # lora.enabled=false with lora.top_layers=1: the top layer, the final norm and the head train in full; the
    # embeddings and the layer below are frozen (no gradient reaches them), also under gradient checkpointing
    import torch

    from prm_distill.train.config import LoraSettings, ModelConfig
    from prm_distill.train.model import build_model

    model, *_ = build_model(ModelConfig(backbone=str(tiny_backbone), gradient_checkpointing=checkpointing),
                            LoraSettings(enabled=False, top_layers=1))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {n for n in trainable if "layers.1." in n} == {n for n, _ in model.named_parameters() if "layers.1." in n}
    assert "score.weight" in trainable and "model.norm.weight" in trainable
    assert not any("layers.0." in n or "embed_tokens" in n for n in trainable)
    model.train()
    logits = model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits
    logits[0, -1, 1].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["model.layers.1.mlp.down_proj.weight"] is not None and grads["model.layers.1.mlp.down_proj.weight"].abs().sum() > 0
    assert grads["model.layers.0.mlp.down_proj.weight"] is None and grads["model.embed_tokens.weight"] is None
