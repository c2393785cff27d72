"""Run encoded windows through a token-classification model and read P(good) at the step tags.

Shared by training-time evaluation and the serving engine, so both read scores the same way:
right padding (positions and causal attention of real tokens are unchanged by padding),
length-bucketed batches under a token budget, softmax over the two classes at each tag.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .encoding import EncodedTrajectory, Window


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def tag_index(windows: Sequence[Window]) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of every window's scored tag positions in a batch of `windows`, in window then
    position order."""
    rows = torch.tensor([b for b, w in enumerate(windows) for _ in w.tag_positions], dtype=torch.long)
    cols = torch.tensor([p for w in windows for p in w.tag_positions], dtype=torch.long)
    return rows, cols


def tag_logits(logits: torch.Tensor, windows: Sequence[Window]) -> torch.Tensor:
    """[n_tags, 2] logits at every window's tag positions, in window then position order."""
    rows, cols = tag_index(windows)
    return logits[rows.to(logits.device), cols.to(logits.device)]


def good_probability(logits: torch.Tensor) -> torch.Tensor:
    """P(step is good) = softmax over the two classes, class 1 (computed in fp32)."""
    return torch.softmax(logits.float(), dim=-1)[..., 1]


def length_buckets(lengths: Sequence[int], max_batch_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length so that (batch size x longest) <= max_batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > max_batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


@torch.inference_mode()
def score_encoded(
    model: torch.nn.Module,
    encoded: Sequence[EncodedTrajectory],
    pad_id: int,
    max_batch_tokens: int = 16384,
) -> list[list[float]]:
    """Per-step P(good) for each trajectory: one forward pass per window, windows batched by length."""
    flat = [(t, w) for t, enc in enumerate(encoded) for w in enc.windows]
    out: list[list[float]] = [[float("nan")] * enc.n_steps for enc in encoded]
    device = next(model.parameters()).device
    for batch in length_buckets([len(w.input_ids) for _, w in flat], max_batch_tokens):
        windows = [flat[i][1] for i in batch]
        ids, mask = pad_batch([w.input_ids for w in windows], pad_id)
        logits_at = getattr(model, "logits_at", None)
        if callable(logits_at):  # a runner that computes the tag positions only (serve/fused.py)
            rows, cols = tag_index(windows)
            at = logits_at(ids.to(device), mask.to(device), rows.to(device), cols.to(device))
        else:
            at = tag_logits(model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits, windows)
        probs = good_probability(at).cpu().tolist()
        k = 0
        for i in batch:
            t, w = flat[i]
            for step in w.step_indices:
                out[t][step] = probs[k]
                k += 1
    return out
