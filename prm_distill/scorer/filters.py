"""Group filters for GRPO-style dynamic sampling that keep groups a process reward still teaches.

A group is one prompt's samples as a batch dict: `rewards` (or `original_rewards`, preferred:
before normalisation) `[group]`, and `token_rewards`, `loss_mask` `[group, seq]` aligned to the
tokens. An all-wrong group has no outcome signal, but a negative process reward on an active
token still tells the policy which step failed, so it is kept. `filter_process_consistent`
drops, within a group, the responses whose process score contradicts their outcome (PROF-style).
"""

from __future__ import annotations

import math
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


def _process_scores(group: Mapping[str, Any], rows: int, agg: str) -> torch.Tensor:
    """One process score per response: `process_scores` when given, else `agg` of the active `token_rewards`."""
    given = group.get("process_scores")
    if given is not None:
        scores = torch.as_tensor(given, dtype=torch.float64).reshape(-1)
        if scores.shape != (rows,) or not torch.isfinite(scores).all():
            raise ValueError(f"process_scores must be {rows} finite values (one per response), got {tuple(scores.shape)}")
        return scores
    token_rewards, loss_mask = group.get("token_rewards"), group.get("loss_mask")
    if token_rewards is None or loss_mask is None:
        raise ValueError("process-consistency filtering needs 'process_scores', or 'token_rewards' and 'loss_mask'")
    token_rewards = torch.as_tensor(token_rewards, dtype=torch.float64)
    active = torch.as_tensor(loss_mask).bool()
    if token_rewards.shape != active.shape or token_rewards.ndim != 2 or token_rewards.shape[0] != rows:
        raise ValueError(
            f"token_rewards {tuple(token_rewards.shape)} and loss_mask {tuple(active.shape)} must both be [group={rows}, seq]"
        )
    if not torch.isfinite(token_rewards).all():
        raise ValueError("token_rewards must be finite")
    if not bool(active.any(dim=-1).all()):
        raise ValueError("every response needs at least one active token to have a process score")
    if agg == "min":
        return torch.where(active, token_rewards, torch.full_like(token_rewards, torch.inf)).min(dim=-1).values
    if agg == "mean":
        return (token_rewards * active).sum(dim=-1) / active.sum(dim=-1)
    raise ValueError(f"unknown agg {agg!r} (expected min|mean)")


def process_consistency_mask(
    group: Mapping[str, Any],
    *,
    correct_min: float = 0.5,
    incorrect_max: float = 0.5,
    correct_above: float = 0.0,
    agg: str = "min",
) -> torch.Tensor:
    """`[group]` bool: the responses whose process score agrees with their outcome (PROF-style).

    In the spirit of PROF (arXiv 2509.03403): a correct response (outcome > `correct_above`) whose
    process score is below `correct_min` reached the answer by flawed steps, and an incorrect one
    whose process score is above `incorrect_max` is one the PRM cannot tell from a good one; both
    teach the policy the wrong thing and are dropped. Process scores come from `process_scores`
    (`[group]`, e.g. the aggregated P(good)) or, when absent, from `token_rewards` over the active
    tokens of `loss_mask` (`agg`: `min`, the weakest step with a spread placement, or `mean`).
    """
    for name, value in (("correct_min", correct_min), ("incorrect_max", incorrect_max), ("correct_above", correct_above)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    rewards = _outcome_rewards(group).to(torch.float64)
    scores = _process_scores(group, rewards.numel(), agg)
    correct = rewards > correct_above
    return torch.where(correct, scores >= correct_min, scores <= incorrect_max)


def filter_process_consistent(group: Mapping[str, Any], **options: Any) -> dict[str, Any] | None:
    """The group with its process-inconsistent responses dropped, or None when too little is left to learn from.

    Every tensor (or list) in `group` with one entry per response is indexed by the kept rows; other
    values are passed through. None when fewer than two responses remain or the remaining outcomes are
    all equal (a GRPO group without outcome variance has no advantage), unless an all-wrong remainder
    still carries an active negative process reward (as `filter_mixed_or_penalized_all_wrong` keeps).
    Options: those of `process_consistency_mask`.
    """
    rows = _outcome_rewards(group).numel()
    keep = process_consistency_mask(group, **options)
    index = keep.nonzero().reshape(-1)
    kept: dict[str, Any] = {}
    for key, value in group.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == rows:
            kept[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == rows:
            kept[key] = [value[i] for i in index.tolist()]
        else:
            kept[key] = value
    if index.numel() < 2 or not filter_mixed_or_penalized_all_wrong(kept):
        return None
    return kept
