"""Losses on the step-tag logits. Labels stay floats: a 0.5 label trains toward P(good) = 0.5."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import LossConfig


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted mean of -(y log p_good + (1 - y) log p_bad) over steps; logits [n, 2], targets [n] in [0, 1]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    per_step = -(targets * logp[:, 1] + (1.0 - targets) * logp[:, 0])
    if weights is None:
        return per_step.mean()
    return (per_step * weights).sum() / weights.sum().clamp_min(1e-12)


def pairwise_ranking(logits: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor, *, margin: float = 0.0, form: str = "logistic") -> torch.Tensor:
    """Mean over pairs (i, j) of the same group with target_i > target_j of a loss that pushes
    s_i - s_j above `margin`, where s = logit_good - logit_bad. Zero (with a graph) when no pair exists."""
    s = logits[:, 1].float() - logits[:, 0].float()
    higher = (targets[:, None] > targets[None, :]) & (groups[:, None] == groups[None, :])
    if not higher.any():
        return s.sum() * 0.0
    diff = (s[:, None] - s[None, :])[higher]
    if form == "logistic":
        return F.softplus(margin - diff).mean()
    if form == "margin":
        return F.relu(margin - diff).mean()
    raise ValueError(f"unknown pairwise form {form!r}")


def step_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], cfg: LossConfig) -> torch.Tensor:
    weights = batch["weights"]
    if cfg.kind == "soft_ce":
        return soft_cross_entropy(logits, batch["targets"], weights)
    pair = pairwise_ranking(logits, batch["targets"], batch["groups"], margin=cfg.margin, form=cfg.pairwise_form)
    if cfg.kind == "pairwise":
        return pair
    return (1.0 - cfg.pairwise_weight) * soft_cross_entropy(logits, batch["targets"], weights) + cfg.pairwise_weight * pair
