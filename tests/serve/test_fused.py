"""The fused CPU runner (serve/fused.py) scores exactly as the `transformers` forward does: padding,
grouped-query attention, q/k/v biases; it refuses what it cannot run, and the engine then falls back."""

from __future__ import annotations

import pytest
import torch

from prm_distill.checkpoint import load_checkpoint
from prm_distill.inference import score_encoded
from prm_distill.serve import PRMEngine
from prm_distill.serve.cpu import cpu_has_onednn_bf16, cpu_vendor
from prm_distill.serve.engine import auto_cpu_kernels, cpu_runner
from prm_distill.serve.fused import FusedTokenClassifier, fused_support

ITEMS = [  # different lengths: one batch, right-padded
    ("What is 2 + 3?", ["2 + 3 = 5.", "The answer is 5."]),
    ("A train goes 60 km in 1.5 hours. Speed?", ["60 / 1.5 = 40.", "Speed is 40 km/h.", "Check: 40 * 1.5 = 60.", "Answer: 40."]),
    ("Half of 18?", ["18 / 2 = 9."]),
]


def flat(scores):
    return [s for row in scores for s in row]


def right_padded_batch(vocab: int, lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, vocab, (len(lengths), width), generator=g)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask  # pads are id 0


def test_the_engine_runs_llama_fused_with_the_evaluation_paths_scores(tiny_checkpoint):
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", cpu_kernels="fused")
    assert isinstance(engine.model, FusedTokenClassifier)
    model, _, _ = load_checkpoint(tiny_checkpoint)  # plain transformers, as training's evaluation runs it
    reference = score_encoded(model, [engine.encode(q, s) for q, s in ITEMS], engine.pad_id)
    assert flat(engine.score(ITEMS)) == pytest.approx(flat(reference), abs=1e-5)
    # a trajectory scores as it does inside a padded batch of longer and shorter ones, up to float rounding
    # (the pipeline reuses scores across batches); in bf16 within bf16 rounding
    for dtype, tolerance in (("float32", 1e-6), ("bfloat16", 1e-2)):
        runner = engine if dtype == "float32" else PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype=dtype, cpu_kernels="fused")
        assert flat(runner.score([item])[0] for item in ITEMS) == pytest.approx(flat(runner.score(ITEMS)), abs=tolerance)


def test_the_default_kernels_are_chosen_per_dtype_and_score_as_the_evaluation_path(tiny_checkpoint):
    # side by side with vLLM (benchmarks/engine_vs_vllm.py): fused wins in bf16; in fp32 the plain forward
    # wins on Intel (MKL's matmuls), fused elsewhere (AMD EPYC, where MKL's fp32 path is slow)
    assert [auto_cpu_kernels(torch.bfloat16, v) for v in ("GenuineIntel", "AuthenticAMD")] == ["fused", "fused"]
    assert [auto_cpu_kernels(torch.float32, v) for v in ("GenuineIntel", "AuthenticAMD", "HygonGenuine")] == ["torch", "fused", "fused"]
    assert auto_cpu_kernels(torch.float16, "GenuineIntel") == "torch" and auto_cpu_kernels(torch.float32) == auto_cpu_kernels(torch.float32, cpu_vendor())
    fp32 = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32")  # cpu_kernels="auto" (default)
    bf16 = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="bfloat16")
    if auto_cpu_kernels(torch.float32) == "torch":  # this CPU's choice, as the engine made it
        assert type(fp32.model).__name__ == "LlamaForTokenClassification"  # the plain forward, no oneDNN repacking
        assert not any(type(m).__name__ == "MkldnnLinear" for m in fp32.model.modules())
    else:
        assert isinstance(fp32.model, FusedTokenClassifier)
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    # oneDNN's bf16 linears need AVX512 BW/VL/DQ or AVX-NE-CONVERT: without them the plain forward runs
    assert isinstance(bf16.model, FusedTokenClassifier) == cpu_has_onednn_bf16()
    model, _, _ = load_checkpoint(tiny_checkpoint)
    reference = flat(score_encoded(model, [fp32.encode(q, s) for q, s in ITEMS], fp32.pad_id))
    assert flat(fp32.score(ITEMS)) == pytest.approx(reference, abs=1e-5)
    assert flat(bf16.score(ITEMS)) == pytest.approx(reference, abs=0.05)  # bf16 rounding
    plain = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="float32", cpu_kernels="torch")
    assert type(plain.model).__name__ == "LlamaForTokenClassification" and flat(plain.score(ITEMS)) == pytest.approx(reference, abs=1e-5)


def test_bf16_on_a_cpu_without_onednn_bf16_runs_the_plain_forward_instead_of_failing(tiny_checkpoint, monkeypatch):
    import prm_distill.serve.fused as fused_module

    monkeypatch.setattr(fused_module, "cpu_has_onednn_bf16", lambda: False)  # an AVX2-only CPU (an EPYC Zen 3)
    model, _, _ = load_checkpoint(tiny_checkpoint)
    assert "without AVX512 BW/VL/DQ or AVX-NE-CONVERT" in fused_support(model.to(torch.bfloat16))
    engine = PRMEngine.from_checkpoint(tiny_checkpoint, device="cpu", dtype="bfloat16", cpu_kernels="fused")
    assert type(engine.model).__name__ == "LlamaForTokenClassification"
    reference = flat(score_encoded(load_checkpoint(tiny_checkpoint)[0], [engine.encode(q, s) for q, s in ITEMS], engine.pad_id))
    assert flat(engine.score(ITEMS)) == pytest.approx(reference, abs=0.05)  # bf16 rounding


def test_qwen2_with_qkv_biases_matches_transformers_at_every_real_position():
    model = _qwen2()  # non-zero biases, so a dropped or misplaced bias shows
    ids, mask = right_padded_batch(97, [17, 9, 1])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    got = FusedTokenClassifier(model)(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(got[real], expected[real], atol=1e-5)


def _qwen2(num_layers: int = 2):
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=num_layers, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, num_labels=2, use_sliding_window=False)
    model = Qwen2ForTokenClassification(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("num_layers", [1, 3])
def test_logits_at_equals_the_full_forward_at_those_positions(num_layers):
    """The last layer run at the tag positions only (queries, attention output, MLP) gives the logits the
    full forward gives there: first and last real positions, several per window, a window with none."""
    model = _qwen2(num_layers)
    ids, mask = right_padded_batch(97, [17, 9, 1, 12])
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    rows = torch.tensor([0, 0, 0, 1, 1, 2])  # window 3 has no scored position
    cols = torch.tensor([0, 8, 16, 3, 8, 0])
    fused = FusedTokenClassifier(model)
    got = fused.logits_at(ids, mask, rows, cols)
    assert got.shape == (6, 2) and torch.allclose(got, expected[rows, cols], atol=1e-5)
    assert fused.logits_at(ids, mask, rows[:0], cols[:0]).shape == (0, 2)


def test_logits_at_refuses_padding_positions_and_unordered_rows():
    model = _qwen2(1)
    ids, mask = right_padded_batch(97, [5, 3])
    fused = FusedTokenClassifier(model)
    with pytest.raises(ValueError, match="lies in the padding"):
        fused.logits_at(ids, mask, torch.tensor([1]), torch.tensor([4]))
    with pytest.raises(ValueError, match="grouped in ascending order"):
        fused.logits_at(ids, mask, torch.tensor([1, 0]), torch.tensor([0, 0]))


@pytest.mark.parametrize("n", [1, 64, 150])
def test_bf16_attention_in_blocks_is_causal_attention_with_grouped_heads(n):
    """The bf16 path (64-row blocks, softmax accumulated in fp32) against causal attention written out in fp32 with
    each query head reading kv head h // 3; fp32 inputs take torch's kernel and match it exactly."""
    from prm_distill.serve.fused import _causal_attention

    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, heads, n, 16, generator=g) for heads in (6, 2, 2))
    scores = q @ k.repeat_interleave(3, dim=1).transpose(-1, -2) * 0.25
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    expected = scores.softmax(-1) @ v.repeat_interleave(3, dim=1)
    for blocked in (True, False, None):  # the blocks, torch's kernel, this CPU's choice
        got = _causal_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0.25, blocked=blocked)
        assert got.dtype == torch.bfloat16 and got.shape == (2, 6, n, 16)
        assert torch.allclose(got.float(), expected, atol=3e-2)
    assert torch.allclose(_causal_attention(q, k, v, 0.25), expected, atol=1e-5)
    assert torch.allclose(_causal_attention(q, k, v, 0.25, blocked=True), expected, atol=1e-5)


def test_left_padding_is_refused(tiny_checkpoint):
    model, _, _ = load_checkpoint(tiny_checkpoint)
    fused = FusedTokenClassifier(model)
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    with pytest.raises(ValueError, match="right padding"):
        fused(input_ids=ids, attention_mask=mask)


def test_an_unsupported_architecture_falls_back_to_onednn_linears():
    from transformers import GPT2Config, GPT2ForTokenClassification

    model = GPT2ForTokenClassification(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2, num_labels=2)).eval()
    assert "architecture 'gpt2'" in fused_support(model)
    with pytest.raises(ValueError, match="cannot fuse this model: architecture 'gpt2'"):
        FusedTokenClassifier(model)
    runner = cpu_runner(model, "fused")
    assert not isinstance(runner, FusedTokenClassifier)
    assert any(type(m).__name__ == "MkldnnLinear" for m in runner.modules())  # GPT-2's Conv1D stays, its head is a Linear
    with pytest.raises(ValueError, match="cpu_kernels must be one of fused|onednn|torch, got 'fast'"):
        cpu_runner(model, "fast")
