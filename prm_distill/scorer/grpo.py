"""PRM rewards for critic-free training (GRPO) and the per-step reward r_t = r_env + lambda * p.

From the practitioner's write-up: sample a group of trajectories per question, turn each
trajectory's step scores into one score, normalise within the group, use it as the advantage.
A plain sum of step scores grows with the number of steps, which the policy learns to exploit by
padding; hence the decayed sum (default) or the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..aggregate import AGGREGATIONS, aggregate

STEP_AGGREGATIONS = ("decayed_sum", *AGGREGATIONS)


def aggregate_step_scores(
    step_scores: Sequence[float] | torch.Tensor, *, method: str = "decayed_sum", decay: float = 0.9
) -> float:
    """One trajectory score through `prm_distill.aggregate`: `decayed_sum` = sum_i decay**i * s_i (i from 0,
    not normalised), or any of its methods (`discounted` is the length-normalised decayed sum)."""
    if method not in STEP_AGGREGATIONS:
        raise ValueError(f"unknown aggregation {method!r} (expected {'|'.join(STEP_AGGREGATIONS)})")
    scores = torch.as_tensor(step_scores, dtype=torch.float64).detach().cpu().numpy()
    if method == "decayed_sum":
        return aggregate(scores, "discounted", gamma=decay, normalize=False)
    return aggregate(scores, method, gamma=decay)


def group_normalize(scores: Sequence[float] | torch.Tensor, *, eps: float = 1e-5) -> torch.Tensor:
    """(r - mean) / (std + eps) within one question's group, so questions of different difficulty weigh alike.

    `std` is the unbiased sample deviation. A group of one has no baseline and gets advantage 0.
    """
    rewards = torch.as_tensor(scores, dtype=torch.float32)
    if rewards.ndim != 1 or not torch.isfinite(rewards).all():
        raise ValueError("scores must be a finite 1-D sequence")
    if rewards.numel() < 2:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def prm_group_advantages(
    group_step_scores: Sequence[Sequence[float]],
    *,
    method: str = "decayed_sum",
    decay: float = 0.9,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Advantages `[group]` for one question's trajectories from their PRM step scores."""
    totals = [aggregate_step_scores(steps, method=method, decay=decay) for steps in group_step_scores]
    return group_normalize(totals, eps=eps)


def combine_step_rewards(
    env_rewards: torch.Tensor,
    prm_scores: torch.Tensor,
    *,
    lam: float = 0.5,
    prm_clip: tuple[float, float] | None = None,
) -> torch.Tensor:
    """r_t = r_env(s_t) + lam * p(s_t) per step, for PPO-style per-step rewards.

    `lam` around 0.5 is the write-up's starting point: too large and the policy pleases the PRM,
    too small and the signal is sparse again. `prm_clip=(low, high)` clamps p first, so one
    outlier score cannot dominate a batch's gradient.
    """
    if env_rewards.shape != prm_scores.shape:
        raise ValueError(f"env_rewards {tuple(env_rewards.shape)} and prm_scores {tuple(prm_scores.shape)} differ")
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be finite and >= 0, got {lam}")
    if not (torch.isfinite(env_rewards).all() and torch.isfinite(prm_scores).all()):
        raise ValueError("env_rewards and prm_scores must be finite")
    scores = prm_scores.to(env_rewards.dtype)
    if prm_clip is not None:
        low, high = prm_clip
        if not low <= high:
            raise ValueError(f"prm_clip must be (low, high) with low <= high, got {prm_clip}")
        scores = scores.clamp(low, high)
    return env_rewards + lam * scores
