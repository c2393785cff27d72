"""PRMEngine: the oneDNN fast path and bf16 give the evaluation path's numbers; dtype choice; the
calibration in force follows the checkpoint's sidecar while the engine runs."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

import prm_distill.serve.engine as engine_module
from prm_distill.checkpoint import load_checkpoint, write_calibration
from prm_distill.inference import score_encoded
from prm_distill.serve import PRMEngine

ITEMS = [
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("A train goes 60 km in 1.5 hours. Speed?", ["60 / 1.5 = 40.", "Speed is 40 km/h.", "Check: 40 * 1.5 = 60.", "Answer: 40."]),
]


def flat(scores):
    return [s for row in scores for s in row]


def test_onednn_linears_give_the_evaluation_paths_scores(tiny_checkpoint):
    fast = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", cpu_kernels="onednn")
    assert any(type(m).__name__ == "MkldnnLinear" for m in fast.model.modules())
    model, _, _ = load_checkpoint(tiny_checkpoint)  # plain transformers, as training's evaluation runs it
    reference = score_encoded(model, [fast.encode(q, s) for q, s in ITEMS], fast.pad_id)
    plain = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", cpu_kernels="torch")
    assert not any(type(m).__name__ == "MkldnnLinear" for m in plain.model.modules())
    assert flat(fast.score(ITEMS)) == pytest.approx(flat(reference), abs=1e-5)
    assert flat(plain.score(ITEMS)) == pytest.approx(flat(reference), abs=1e-6)


def test_bf16_scores_stay_close_to_fp32(tiny_checkpoint):
    fp32 = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32").score(ITEMS)
    bf16 = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="bfloat16").score(ITEMS)
    assert flat(bf16) == pytest.approx(flat(fp32), abs=2e-2)  # bf16 keeps 8 bits of mantissa


def test_dtype_choice(monkeypatch):
    assert engine_module.resolve_dtype(None, "cpu") == torch.float32  # exact by default on CPU
    assert engine_module.resolve_dtype(None, "cuda") == torch.bfloat16
    assert engine_module.resolve_dtype("auto", "cuda:1") == torch.bfloat16
    monkeypatch.setattr(engine_module, "cpu_has_native_bf16", lambda: True)
    assert engine_module.resolve_dtype("auto", "cpu") == torch.bfloat16
    monkeypatch.setattr(engine_module, "cpu_has_native_bf16", lambda: False)
    assert engine_module.resolve_dtype("auto", "cpu") == torch.float32
    with pytest.raises(ValueError, match="dtype must be one of auto|float32|bfloat16|float16, got 'fp8'"):
        engine_module.resolve_dtype("fp8", "cpu")


def test_the_engine_follows_the_calibration_written_into_its_checkpoint(tiny_checkpoint, tmp_path):
    model = shutil.copytree(tiny_checkpoint, tmp_path / "model")
    engine = PRMEngine.from_checkpoint(model, device="cpu", dtype="float32")
    raw = engine.score(ITEMS)
    assert engine.calibration() is None and engine.calibrate(raw) == raw
    write_calibration(model, {"method": "temperature", "params": {"temperature": 0.5}})
    assert engine.calibration()["version"] == 1
    sharper = [[1 / (1 + math.exp(-2 * math.log(p / (1 - p)))) for p in row] for row in raw]
    assert flat(engine.calibrate(raw)) == pytest.approx(flat(sharper), abs=1e-9)
    write_calibration(model, {"method": "isotonic", "params": {"x": [0.0, 1.0], "y": [0.25, 0.75]}})
    assert engine.calibration()["version"] == 2
    assert flat(engine.calibrate(raw)) == pytest.approx([0.25 + 0.5 * p for p in flat(raw)], abs=1e-9)
    assert engine.score(ITEMS) == raw  # raw scores never change


def test_on_cpu_a_batch_runs_in_passes_of_at_most_forward_tokens_with_the_same_scores(tiny_checkpoint):
    eng = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32")
    assert eng.forward_tokens == engine_module.CPU_FORWARD_TOKENS == 2048  # activations of one pass stay in cache
    assert PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", max_batch_tokens=1000).forward_tokens == 1000
    lengths = sorted(eng.encode(q, s).n_tokens for q, s in ITEMS)
    assert lengths[0] < lengths[1]
    passes: list[tuple[int, int]] = []
    capped = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", forward_tokens=lengths[1])
    # every pass (the plain forward, or the fused runner's `logits_at`) starts at the input embeddings
    hook = capped.model.get_input_embeddings().register_forward_pre_hook(lambda m, args: passes.append(tuple(args[0].shape)))
    try:
        split = capped.score(ITEMS)
    finally:
        hook.remove()
    # two windows of different lengths: together they would be 2 x the longer > the cap, so two passes of one
    assert sorted(passes) == [(1, lengths[0]), (1, lengths[1])]
    whole = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", forward_tokens=10_000).score(ITEMS)
    assert flat(split) == pytest.approx(flat(whole), abs=1e-6)
    with pytest.raises(ValueError, match="forward_tokens"):
        PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", forward_tokens=0)
