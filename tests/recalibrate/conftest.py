"""Fixtures for the recalibration tests: real checkpoints whose P(good) is set by hand to depend on
token position only (a model built to reward length, a neutral one, one harsher on later steps),
and small labelled files."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest


def build_position_model(tokenizer, path: Path, slope: float, bias: float = 0.0) -> Path:
    """A real GPT-2 token classifier + the SmolLM2 tokenizer, exported as a prm_distill checkpoint,
    whose logit(P(good)) grows with the token position when slope > 0 (0: a constant P).

    Token embeddings are zero and each block's output projections are zero, so the residual stream
    holds only the learned position embedding (pos / 100, 1, 0, ...); after the final LayerNorm the
    head reads (feature 0 - feature 1), which rises monotonically with the position.
    """
    import torch
    from transformers import GPT2Config, GPT2ForTokenClassification

    from prm_distill.checkpoint import Sidecar, save_checkpoint
    from prm_distill.encoding import ensure_step_tag

    tok = copy.deepcopy(tokenizer)
    tag = ensure_step_tag(tok)
    n_pos, d = 1024, 8
    cfg = GPT2Config(vocab_size=len(tok), n_embd=d, n_layer=1, n_head=1, n_positions=n_pos, num_labels=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, classifier_dropout=0.0, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = GPT2ForTokenClassification(cfg)
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
        model.transformer.wpe.weight.zero_()
        model.transformer.wpe.weight[:, 0] = torch.arange(n_pos, dtype=torch.float32) / 100.0
        model.transformer.wpe.weight[:, 1] = 1.0
        for block in model.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                proj.weight.zero_()
                proj.bias.zero_()
        model.transformer.ln_f.weight.fill_(1.0)
        model.transformer.ln_f.bias.zero_()
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.weight[1, 0], model.classifier.weight[1, 1] = slope, -slope
        model.classifier.bias[1] = bias
    save_checkpoint(model, tok, path, Sidecar(step_tag="<|step|>", step_tag_id=tag, max_length=512, threshold=0.5))
    return path


@pytest.fixture(scope="session")
def position_models(smol_tokenizer, tmp_path_factory) -> dict[str, Path]:
    """{"rewards_length": P rises with position, "neutral": constant P = sigmoid(0.8), "harsher_later": P falls}."""
    root = tmp_path_factory.mktemp("position_models")
    return {
        "rewards_length": build_position_model(smol_tokenizer, root / "rewards_length", slope=1.0),
        "neutral": build_position_model(smol_tokenizer, root / "neutral", slope=0.0, bias=0.8),
        "harsher_later": build_position_model(smol_tokenizer, root / "harsher_later", slope=-1.0, bias=1.0),
    }


@pytest.fixture
def model_copy(tiny_checkpoint, tmp_path) -> Path:
    """A private copy of the session's tiny checkpoint (tests that adopt write into its sidecar)."""
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "model"))


@pytest.fixture(scope="session")
def correct_heldout(tmp_path_factory) -> Path:
    """All-correct synthetic trajectories, ids never used in training."""
    from prm_distill.records import write_jsonl
    from prm_distill.synthetic import SyntheticConfig, generate

    path = tmp_path_factory.mktemp("heldout") / "correct.jsonl"
    write_jsonl(generate(SyntheticConfig(n=24, seed=11, corrupt_rate=0.0, id_prefix="ok")), path)
    return path
