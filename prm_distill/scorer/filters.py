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


def _truncated_rows(group: Mapping[str, Any], rows: int) -> torch.Tensor:
    """Rows without EOS: `is_truncated` when present, else rows whose sequence fills the padded length."""
    flags = group.get("is_truncated")
    if flags is not None:
        flags = torch.as_tensor(flags).reshape(-1).bool()
    else:
        attention_mask = group.get("attention_mask")
        if attention_mask is None:
            raise ValueError("the no-EOS filter needs 'is_truncated' or 'attention_mask'")
        attention_mask = torch.as_tensor(attention_mask)
        flags = attention_mask.bool().sum(dim=-1) == attention_mask.shape[-1]
    if flags.shape != (rows,):
        raise ValueError(f"expected one truncation flag per row ({rows}), got shape {tuple(flags.shape)}")
    return flags


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
        active = active & ~_truncated_rows(group, rows).unsqueeze(-1)
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
    """As `filter_mixed_or_penalized_all_wrong`, for `mask_no_eos_with_zero: true`: penalties on truncated rows do not count."""
    return _keep(group, ignore_truncated=True)
