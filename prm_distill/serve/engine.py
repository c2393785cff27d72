"""In-process batched scoring engine over an exported checkpoint.

Loads through `checkpoint.py` (safetensors only, no remote code) and scores through the shared
encoder and `inference.score_encoded`, so its numbers are the evaluation path's numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from ..checkpoint import Sidecar, load_checkpoint, pad_token_id
from ..encoding import EncodedTrajectory, StepEncoder
from ..inference import score_encoded
from ..steps import SplitConfig, split_steps


def _pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class PRMEngine:
    """Score (question, steps) pairs with one forward pass per trajectory window."""

    def __init__(self, model, tokenizer, sidecar: Sidecar, *, max_batch_tokens: int = 16384, model_id: str = "prm"):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.sidecar = sidecar
        self.model_id = model_id
        self.max_batch_tokens = max_batch_tokens
        self.encoder = StepEncoder(tokenizer, sidecar.step_tag_id, sidecar.max_length)
        self.pad_id = pad_token_id(tokenizer)

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path, *, device: str = "auto", dtype: str | None = None, max_batch_tokens: int = 16384) -> "PRMEngine":
        device = _pick_device(device)
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
        model, tok, sidecar = load_checkpoint(model_dir, device=device, dtype=torch_dtype)
        return cls(model, tok, sidecar, max_batch_tokens=max_batch_tokens, model_id=Path(model_dir).name)

    def encode(self, question: str, steps: Sequence[str]) -> EncodedTrajectory:
        return self.encoder.encode(question, list(steps))

    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """Per-step P(good) for each (question, steps)."""
        encoded = [self.encode(q, s) for q, s in items]
        return score_encoded(self.model, encoded, self.pad_id, self.max_batch_tokens)

    def score_response(self, question: str, response: str, split: SplitConfig | None = None) -> tuple[list[str], list[float]]:
        """Split a raw response with the shared splitter, then score it."""
        steps = split_steps(response, split)
        return steps, self.score([(question, steps)])[0]
