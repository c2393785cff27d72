"""A Qwen2-architecture backbone (the Qwen2.5 students of configs/recipe-qwen-cpu.yaml) works end to
end on CPU, as `model.backbone=DIR` with DIR an HF-style Qwen2 folder: train (layers cut, LoRA on the
top layers), export, `prm-distill eval`, `prm-distill score`, the engine's fused CPU runner. Qwen2 has
q/k/v biases (Llama has none): they are set non-zero here so that a dropped or misplaced bias shows.

The model is tiny and randomly initialised from a `Qwen2Config`, with the real SmolLM2 tokenizer saved
beside it (no download): `make_tiny_qwen2` and the `qwen2_checkpoint` fixture in tests/conftest.py
(tests/serve/test_vllm_qwen.py serves the same checkpoint with vLLM).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prm_distill.checkpoint import load_checkpoint
from prm_distill.cli import main
from prm_distill.inference import score_encoded
from prm_distill.serve import PRMEngine
from prm_distill.serve.fused import FusedTokenClassifier

ITEMS = [  # different lengths, so the engine's batch is right-padded
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("A train goes 60 km in 1.5 hours. Speed?", ["60 / 1.5 = 40.", "Speed is 40 km/h.", "Check: 40 * 1.5 = 60."]),
    ("Half of 18?", ["18 / 2 = 9."]),
]


def test_training_exports_a_plain_qwen2_token_classifier_with_its_biases(qwen2_checkpoint, tiny_qwen2_backbone):
    from safetensors.torch import load_file

    cfg = json.loads((qwen2_checkpoint / "config.json").read_text())
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForTokenClassification"]
    assert cfg["num_hidden_layers"] == 2 and cfg["id2label"] == {"0": "bad", "1": "good"}
    weights = load_file(qwen2_checkpoint / "model.safetensors")
    assert not [k for k in weights if "lora" in k]  # LoRA merged: vLLM and transformers load it as is
    base = load_file(tiny_qwen2_backbone / "model.safetensors")
    # layer 0 is below the adapted layer: its biases come through untouched; the adapted layer 1 changed
    assert torch.equal(weights["model.layers.0.self_attn.q_proj.bias"], base["model.layers.0.self_attn.q_proj.bias"])
    assert float(weights["model.layers.0.self_attn.k_proj.bias"].abs().sum()) > 0
    assert not torch.equal(weights["model.layers.1.self_attn.q_proj.weight"], base["model.layers.1.self_attn.q_proj.weight"])
    assert "model.layers.2.self_attn.q_proj.weight" not in weights  # the cut layer is gone


def reference_scores(checkpoint: Path, items) -> list[list[float]]:
    """Plain transformers forward (as training's evaluation runs it), no verifier rule."""
    model, _, _ = load_checkpoint(checkpoint)
    engine = PRMEngine.from_checkpoint(checkpoint, device="cpu", dtype="float32", cpu_kernels="torch", verifier=False)
    return score_encoded(model, [engine.encode(q, s) for q, s in items], engine.pad_id)


def flat(rows):
    return [s for row in rows for s in row]


def test_the_engine_runs_qwen2_fused_and_matches_the_plain_forward(qwen2_checkpoint):
    # cpu_kernels="fused" explicitly: auto runs fp32 on Intel through the plain forward (AUTO_CPU_KERNELS)
    engine = PRMEngine.from_checkpoint(qwen2_checkpoint, device="cpu", dtype="float32", cpu_kernels="fused", verifier=False)
    assert isinstance(engine.model, FusedTokenClassifier)  # q/k/v biases are packed into the fused qkv matmul
    got = engine.score(ITEMS)
    want = reference_scores(qwen2_checkpoint, ITEMS)
    assert [len(r) for r in got] == [2, 3, 1]
    assert flat(got) == pytest.approx(flat(want), abs=1e-5)
    assert engine.score(ITEMS[2:])[0] == pytest.approx(got[2], abs=1e-6)  # alone = inside the padded batch


def test_cli_eval_and_score_on_a_qwen2_checkpoint(qwen2_checkpoint, synthetic_files, tmp_path):
    report = tmp_path / "report.json"
    assert main(["eval", "--model", str(qwen2_checkpoint), "--data", str(synthetic_files["test"]),
                 "--dev", str(synthetic_files["dev"]), "--output", str(report), "--device", "cpu"]) == 0
    rep = json.loads(report.read_text())
    assert rep["n_items"] == 24 and rep["threshold_source"].startswith("dev") and 0.0 <= rep["auroc"] <= 1.0

    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": str(i), "question": q, "steps": s}) + "\n" for i, (q, s) in enumerate(ITEMS)))
    assert main(["score", "--model", str(qwen2_checkpoint), "--input", str(inp), "--output", str(out), "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    # `score` applies the checkpoint's verifier rule; none of these steps is refuted, so it equals the plain forward
    assert flat([r["step_scores"] for r in rows]) == pytest.approx(flat(reference_scores(qwen2_checkpoint, ITEMS)), abs=1e-5)


def test_a_qwen2_folder_with_sliding_window_on_falls_back_to_the_generic_runner(qwen2_checkpoint, tmp_path):
    """Sliding-window attention is not fused: the engine keeps a generic path and scores as transformers does."""
    import shutil

    from prm_distill.serve.fused import fused_support

    sw = tmp_path / "sliding"
    shutil.copytree(qwen2_checkpoint, sw)
    cfg = json.loads((sw / "config.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=4, max_window_layers=0)
    (sw / "config.json").write_text(json.dumps(cfg))
    model, _, _ = load_checkpoint(sw)
    assert "sliding-window attention (4 tokens)" in (fused_support(model) or "")
    engine = PRMEngine.from_checkpoint(sw, device="cpu", dtype="float32", verifier=False)
    assert not isinstance(engine.model, FusedTokenClassifier)
    assert flat(engine.score(ITEMS)) == pytest.approx(flat(reference_scores(sw, ITEMS)), abs=1e-5)


def test_the_qwen_recipe_without_a_backbone_folder_is_a_clear_error(tmp_path, capsys):
    """configs/recipe-qwen-cpu.yaml needs model.backbone=DIR: forgetting it must not train another model."""
    from prm_distill.backbones import BackboneError, resolve_backbone
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig

    recipe = Path(__file__).resolve().parents[1] / "configs" / "recipe-qwen-cpu.yaml"
    cfg = load_config(TrainJobConfig, str(recipe), [])
    assert (cfg.model.num_layers, cfg.lora.top_layers, cfg.optim.mixed_precision) == (12, 6, "bf16")
    with pytest.raises(BackboneError, match=r"backbone folder \./pass-model\.backbone=DIR does not exist"):
        resolve_backbone(cfg.model.backbone)
    with pytest.raises(BackboneError, match="does not exist"):
        resolve_backbone(str(tmp_path / "no-such-model"))
    assert resolve_backbone("Qwen/Qwen2.5-Coder-0.5B") == "Qwen/Qwen2.5-Coder-0.5B"  # a hub id passes through
