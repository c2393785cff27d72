"""Fixtures for rollout and policy tests: the labeling tests' OpenAI-compatible HTTP server double
(loaded from tests/labeling/conftest.py, one definition) and small problems files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("_labeling_conftest", Path(__file__).resolve().parents[1] / "labeling" / "conftest.py")
_labeling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_labeling)
OpenAIDouble = _labeling.OpenAIDouble
free_port = _labeling.free_port
VLLM_PY = _labeling.VLLM_PY
openai_double = _labeling.openai_double


@pytest.fixture
def problems_file(tmp_path):
    """problems_file(rows) -> a JSONL file of the given rows."""

    def make(rows: list[dict], name: str = "problems.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path

    return make


@pytest.fixture(scope="session")
def token_classifier(smol_tokenizer, tmp_path_factory) -> Path:
    """A tiny *ForTokenClassification folder: what a PRM checkpoint looks like, and not a policy."""
    import torch
    from transformers import LlamaConfig, LlamaForTokenClassification

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_labels=2)
    path = tmp_path_factory.mktemp("prm_like")
    LlamaForTokenClassification(cfg).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path
