"""Sharded training for real on two CPU processes (gloo), through the shipped accelerate configs:
FSDP2 (configs/accelerate/fsdp.yaml) and DeepSpeed ZeRO-2/3 (deepspeed-zero{2,3}.yaml), each with
--num_processes 2: training, mid-run evaluation and checkpointing on sharded parameters, and the
export that gathers them on every rank. Both average gradients over the ranks like DDP does, so each
export must hold the weights the 2-process DDP run exports, to float rounding."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prm_distill.checkpoint import SIDECAR_NAME
from prm_distill.records import read_jsonl
from prm_distill.serve.engine import PRMEngine

ROOT = Path(__file__).resolve().parents[1]
# linear decay from 1e-3 over 3 steps, no warmup; an evaluation and a saved state at step 2. No LoRA
# dropout: under fsdp.yaml's cpu_ram_efficient_loading rank 1 builds the model on the meta device,
# draws no initialisation random numbers, and so would draw other dropout masks than under DDP.
OVERRIDES = {"optim.max_steps": 3, "optim.lr_scheduler": "linear", "optim.warmup_ratio": 0.0, "optim.eval_steps": 2, "optim.save_steps": 2,
             "lora.dropout": 0.0}
# accelerate steps a prepared scheduler once per process at each optimizer step; the schedule must
# still span max_steps: the logged lr after step k is 1e-3 * (3 - k) / 3
LRS = [2e-3 / 3, 1e-3 / 3, 0.0]


def _train(config: str, overrides: list[str]) -> str:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / config),
           "--num_processes", "2", "-m", "prm_distill.cli", "train", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _lrs(folder: Path) -> list[float]:
    return [h["lr"] for h in json.loads((folder / SIDECAR_NAME).read_text())["training"]["history"] if "loss" in h]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    assert files and not list(folder.glob("*.bin"))
    return {k: v for f in files for k, v in load_file(f).items()}


@pytest.fixture(scope="module")
def ddp_exports(tiny_backbone, synthetic_files, train_overrides, tmp_path_factory):
    """lora -> the folder the 2-process DDP run (configs/accelerate/ddp-cpu.yaml) exported; run once each."""
    done: dict[bool, Path] = {}

    def get(lora: bool) -> Path:
        if lora not in done:
            out = tmp_path_factory.mktemp("ddp") / "model"
            stdout = _train("ddp-cpu.yaml", train_overrides(tiny_backbone, synthetic_files, out, **OVERRIDES, **{"lora.enabled": lora}))
            assert "2 process(es) (MULTI_CPU)" in stdout
            assert _lrs(out) == pytest.approx(LRS, abs=1e-12)
            done[lora] = out
        return done[lora]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("config, kind, lora, resume", [
    ("fsdp.yaml", "FSDP", False, True), ("fsdp.yaml", "FSDP", True, False),
    ("deepspeed-zero3.yaml", "DEEPSPEED", False, True), ("deepspeed-zero3.yaml", "DEEPSPEED", True, False),
    ("deepspeed-zero2.yaml", "DEEPSPEED", False, False),
], ids=["fsdp-full", "fsdp-lora", "zero3-full", "zero3-lora", "zero2-full"])
def test_sharded_run_on_two_cpu_processes_exports_the_weights_ddp_does(config, kind, lora, resume, tiny_backbone, synthetic_files,
                                                                      train_overrides, ddp_exports, tmp_path):
    if kind == "DEEPSPEED":
        pytest.importorskip("deepspeed", reason="the optional deepspeed extra (DS_BUILD_OPS=0 pip install -e .[deepspeed])")
    out = tmp_path / "model"
    overrides = train_overrides(tiny_backbone, synthetic_files, out, **OVERRIDES, **{"lora.enabled": lora})
    stdout = _train(config, overrides)
    assert f"2 process(es) ({kind})" in stdout  # really sharded, not silently DDP
    assert (out / "checkpoints" / "step-2" / "trainer_state.json").is_file()

    training = json.loads((out / SIDECAR_NAME).read_text())["training"]
    assert training["steps"] == 3 and training["lora"] is lora
    assert _lrs(out) == pytest.approx(LRS, abs=1e-12)
    assert [h["step"] for h in training["history"] if "dev" in h] == [2]

    got, ref = _weights(out), _weights(ddp_exports(lora))
    assert sorted(got) == sorted(ref)
    assert not [k for k in got if "lora_" in k or "modules_to_save" in k or "base_model" in k]  # LoRA merged, plain names
    assert max(float((got[k].float() - ref[k].float()).abs().max()) for k in got) < 1e-5  # updates are ~1e-3
    backbone = _weights(tiny_backbone)
    layer = "model.layers.1.self_attn.q_proj.weight"  # trained under both full fine-tuning and LoRA
    assert float((got[layer] - backbone[layer]).abs().max()) > 1e-4

    # the export scores as the gathered in-memory model did before it was written: the sidecar's dev
    # report was computed on that model; recompute it from the exported folder
    from prm_distill.metrics import report

    dev = read_jsonl(synthetic_files["dev"])
    scores = PRMEngine.from_checkpoint(out, device="cpu").score([(r.question, r.steps) for r in dev])
    again = report(scores, [r.labels for r in dev], [r.first_error for r in dev], training["dev"]["threshold"])
    assert again["mean_score"] == pytest.approx(training["dev"]["mean_score"], abs=1e-5)
    assert again["auroc"] == pytest.approx(training["dev"]["auroc"], abs=1e-9)

    if resume:  # as if killed after step 2: the same command resumes from the sharded state saved there, redoes step 3
        shutil.rmtree(out / "checkpoints" / "step-3")  # the finished run saved its last step too (a rerun would say "already finished")
        (out / SIDECAR_NAME).unlink()
        stdout = _train(config, overrides)
        assert f"resumed from {out / 'checkpoints' / 'step-2'} at step 2" in stdout
        again_w = _weights(out)
        assert max(float((again_w[k] - got[k]).abs().max()) for k in got) < 1e-6
