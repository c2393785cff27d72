"""Group filters for GRPO-style dynamic sampling that keep groups a process reward still teaches.

A group is one prompt's samples as a batch dict: `rewards` (or `original_rewards`, preferred:
before normalisation) `[group]`, and `token_rewards`, `loss_mask` `[group, seq]` aligned to the
tokens. An all-wrong group has no outcome signal, but a negative process reward on an active
token still tells the policy which step failed, so it is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def _outcome_rewards(group: Mapping[str, Any]) -> torch.Tensor:
    rewards = group.get("original_rewards", group.get("rewards"))
    if rewards is None:
        raise ValueError("group filtering needs 'rewards' or 'original_rewards'")
    rewards = torch.as_tensor(rewards).reshape(-1)
    if rewards.numel() == 0 or not torch.isfinite(rewards).all():
        raise ValueError("group rewards must be a non-empty finite tensor")
    return rewards


def _rows_without_eos(group: Mapping[str, Any], loss_mask: torch.Tensor) -> torch.Tensor:
    """Rows whose sequence fills the padded width (no EOS), from `attention_mask`, as AReaL's filter finds them."""
    attention_mask = group.get("attention_mask")
    if attention_mask is None:
        raise ValueError("mask-no-EOS filtering requires attention_mask to identify truncated trajectories")
    attention_mask = torch.as_tensor(attention_mask)
    if attention_mask.shape != loss_mask.shape:
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} and loss_mask {tuple(loss_mask.shape)} "
            "must have matching shapes"
        )
    return attention_mask.bool().sum(dim=-1) == attention_mask.shape[-1]


def _has_active_penalty(group: Mapping[str, Any], rows: int, *, ignore_truncated: bool) -> bool:
    token_rewards, loss_mask = group.get("token_rewards"), group.get("loss_mask")
    if token_rewards is None or loss_mask is None:
        return False
    token_rewards, loss_mask = torch.as_tensor(token_rewards), torch.as_tensor(loss_mask)
    if token_rewards.shape != loss_mask.shape or token_rewards.ndim != 2 or token_rewards.shape[0] != rows:
        raise ValueError(
            f"token_rewards {tuple(token_rewards.shape)} and loss_mask {tuple(loss_mask.shape)} "
            f"must both be [group={rows}, seq]"
        )
    if not torch.isfinite(token_rewards).all():
        raise ValueError("token_rewards must be finite")
    active = loss_mask.bool()
    if ignore_truncated:
        # The actor clears the rewards of truncated rows, so their penalty teaches nothing.
        active = active & ~_rows_without_eos(group, loss_mask).unsqueeze(-1)
    return bool(((token_rewards < 0) & active).any())


def _keep(group: Mapping[str, Any], *, ignore_truncated: bool) -> bool:
    rewards = _outcome_rewards(group)
    if bool((rewards != rewards[0]).any()):
        return True
    return bool((rewards <= 0).all()) and _has_active_penalty(group, rewards.numel(), ignore_truncated=ignore_truncated)


def filter_mixed_or_penalized_all_wrong(group: Mapping[str, Any]) -> bool:
    """Keep a group with mixed outcomes, or all outcomes <= 0 and a negative process reward on an active token."""
    return _keep(group, ignore_truncated=False)


def filter_mixed_or_penalized_all_wrong_mask_no_eos(group: Mapping[str, Any]) -> bool:
    """As `filter_mixed_or_penalized_all_wrong`, for `mask_no_eos_with_zero: true`.

    Penalties on rows without EOS (read from `attention_mask`, as AReaL's filter does) do not count:
    the actor clears those rows' rewards.
    """
    return _keep(group, ignore_truncated=True)
