"""How the PPO actor turns token rewards into advantages.

Conventions (as the actor holds its tensors): `advantages`, `loss_mask` and `turn_ids` sit on the
position that *predicts* each token (the mask already rolled by -1); `token_rewards` sit on the
tokens they reward, as the runner writes them, and are rolled here. All tensors are `[batch, seq]`.
AReaL's actor helpers take rewards already rolled: their counterpart here is the explicitly
named `shape_advantages_prerolled`.
"""

from __future__ import annotations

import math

import torch

SHAPING_MODES = ("additive", "gvpo", "process_weighted", "min_form")

# AReaL's wording, which its users' tests and alerts match on.
PROCESS_WEIGHTED_RANGE_ERROR = "Process-weighted advantage shaping requires process rewards in [0, 1]"
FOLD_UNIFORM_ERROR = (
    "token_rewards_as_adv=False requires uniform token rewards within each turn; "
    "use token_rewards_as_adv=True for dense or sparse per-token rewards."
)


def check_shaping_mode(mode: str, *, token_rewards_as_adv: bool, mask_no_eos_with_zero: bool) -> None:
    """Refuse actor settings under which a mode would silently mean something else."""
    if mode not in SHAPING_MODES:
        raise ValueError(f"unknown mode {mode!r} (expected {'|'.join(SHAPING_MODES)})")
    if mode in ("gvpo", "process_weighted", "min_form") and not token_rewards_as_adv:
        # gvpo and process_weighted are piecewise in the outcome advantage, which only exists after
        # GAE; min_form looks ahead along the row, which a per-turn fold cannot express.
        raise ValueError(f"{mode!r} advantage shaping requires actor.token_rewards_as_adv=True")
    if mode == "process_weighted" and mask_no_eos_with_zero:
        # A truncated row's zeroed reward would read as "this step is worthless".
        raise ValueError("'process_weighted' advantage shaping is incompatible with actor.mask_no_eos_with_zero=True")


def _check_same_2d(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 2 or any(shape != first for shape in shapes.values()):
        raise ValueError(f"expected equal [batch, seq] shapes, got {shapes}")


def no_eos_rows(attention_mask: torch.Tensor, is_truncated: torch.Tensor | None = None) -> torch.Tensor:
    """`[batch]` bool: rows without EOS, as AReaL's actor finds them.

    `is_truncated` (one flag per row) when the rollout recorded it, else rows whose sequence fills
    the padded width (`attention_mask.sum(-1) == seq`).
    """
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be [batch, seq], got shape {tuple(attention_mask.shape)}")
    if is_truncated is None:
        return attention_mask.bool().sum(dim=-1) == attention_mask.shape[-1]
    flags = torch.as_tensor(is_truncated, device=attention_mask.device)
    if flags.shape != (attention_mask.shape[0],):
        raise ValueError(
            f"`is_truncated` must have one value per trajectory, got shape {tuple(flags.shape)} "
            f"for batch shape ({attention_mask.shape[0]},)"
        )
    return flags.bool()


def _zero_truncated(token_rewards: torch.Tensor, truncated_rows: torch.Tensor | None) -> torch.Tensor:
    """`mask_no_eos_with_zero`: a row without EOS gets no process reward (its outcome is zeroed too)."""
    if truncated_rows is None:
        return token_rewards
    rows = torch.as_tensor(truncated_rows, device=token_rewards.device).bool()
    if rows.shape != (token_rewards.shape[0],):
        raise ValueError(f"truncated_rows must be [batch={token_rewards.shape[0]}], got shape {tuple(rows.shape)}")
    return torch.where(rows.unsqueeze(-1), torch.zeros_like(token_rewards), token_rewards)


def _check_coefficients(negative_scale: float, zero_penalty: float, zero_eps: float) -> None:
    for name, value in (("negative_scale", negative_scale), ("zero_penalty", zero_penalty), ("zero_eps", zero_eps)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"GVPO {name} must be finite and non-negative, got {value}")


def check_min_form_temperature(temperature: float | None) -> None:
    """None (the strict minimum) or a finite temperature > 0 (the softmax-weighted minimum)."""
    if temperature is None:
        return
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:
        raise ValueError(f"min_form_temperature must be null (strict minimum) or a finite number > 0, got {temperature!r}")


def min_form_returns(process: torch.Tensor, active: torch.Tensor, temperature: float | None = None) -> torch.Tensor:
    """`[batch, seq]`: at each position, the minimum of the process rewards at active positions from there on.

    PURE's min-form credit assignment (arXiv 2504.15275): a token's process return is its future's
    weakest reward, so a policy cannot raise it by adding more high-scoring steps. With a
    `temperature` T the minimum is softened to `sum_s w_s P_s`, `w = softmax(-P / T)` over the
    same positions (T -> 0 is the strict minimum, large T the mean). Positions with no active
    position at or after them get 0.
    """
    check_min_form_temperature(temperature)
    active = active.bool()
    if temperature is None:
        masked = torch.where(active, process, torch.full_like(process, math.inf))
        suffix_min = torch.flip(torch.cummin(torch.flip(masked, dims=[-1]), dim=-1).values, dims=[-1])
        return torch.where(torch.isfinite(suffix_min), suffix_min, torch.zeros_like(suffix_min))
    # sum_s exp(x_s) P_s / sum_s exp(x_s) over suffixes, x = -P / T, in log space: the positive and
    # negative parts of P are accumulated separately so nothing overflows or divides 0 by 0.
    dtype = process.dtype
    process = process.to(torch.float64)  # a small T puts the logits far from 0: float32 would lose digits
    neg_inf = torch.full_like(process, -math.inf)
    logits = torch.where(active, -process / temperature, neg_inf)

    def suffix_logsumexp(values: torch.Tensor) -> torch.Tensor:
        return torch.flip(torch.logcumsumexp(torch.flip(values, dims=[-1]), dim=-1), dims=[-1])

    norm = suffix_logsumexp(logits)
    positive = suffix_logsumexp(torch.where(process > 0, logits + process.clamp_min(1e-300).log(), neg_inf))
    negative = suffix_logsumexp(torch.where(process < 0, logits + (-process).clamp_min(1e-300).log(), neg_inf))
    has_future = torch.isfinite(norm)
    safe_norm = torch.where(has_future, norm, torch.zeros_like(norm))
    returns = torch.exp(positive - safe_norm) - torch.exp(negative - safe_norm)
    return torch.where(has_future, returns, torch.zeros_like(returns)).to(dtype)


def min_form_step_rewards(step_rewards: list[float] | torch.Tensor, temperature: float | None = None) -> torch.Tensor:
    """Per-step rewards whose suffix sums are the min-form returns of `step_rewards` (float64).

    For a trainer that sums rewards (verl's GRPO/RLOO/REINFORCE++ per response, GAE with gamma =
    lambda = 1 per token): placing d_k = m_k - m_{k+1} at step k's last token, with m the min-form
    returns (m_{n+1} = 0), makes the return from step k exactly m_k and the response total m_1,
    the weakest step, instead of a sum that grows with every extra high-scoring step.
    """
    rewards = torch.as_tensor(step_rewards, dtype=torch.float64).reshape(1, -1)
    if rewards.numel() == 0 or not torch.isfinite(rewards).all():
        raise ValueError("step_rewards must be a non-empty, finite 1-D sequence")
    returns = min_form_returns(rewards, torch.ones_like(rewards, dtype=torch.bool), temperature)[0]
    following = torch.cat([returns[1:], returns.new_zeros(1)])
    return returns - following


def shape_advantages(
    advantages: torch.Tensor,
    token_rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    mode: str,
    negative_scale: float = 0.2,
    zero_penalty: float = 0.4,
    zero_eps: float = 1e-6,
    min_form_temperature: float | None = None,
    truncated_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Combine outcome advantages A (after GAE and normalisation) with process rewards P.

    Takes `token_rewards` as the runner writes them (on the tokens) and rolls them here:
    P = roll(token_rewards, -1) * loss_mask; for rewards already rolled use
    `shape_advantages_prerolled`. `truncated_rows` (`[batch]` bool, see `no_eos_rows`) zeroes the
    rewards of rows without EOS first, as AReaL's `mask_no_eos_with_zero` does. `additive`:
    A + P. `gvpo`, where P < 0 (a failed token): A < -eps becomes A * (1 + negative_scale),
    |A| <= eps becomes -zero_penalty, A > eps becomes 0. `process_weighted` (P in [0, 1]):
    A >= 0 becomes A * P; A < 0 becomes P where P > 0. `min_form`: A + M, where M at a position
    is the minimum of P over the active positions from there to the row's end (softmax-weighted
    with `min_form_temperature`; see `min_form_returns`): put the step's value on every token of
    the step (placement `spread`), since a zero between step ends would count as a reward.
    Returns a new tensor; inactive positions
    keep the input advantages, and the inputs (hence the critic's returns) are never modified.
    """
    _check_same_2d(advantages=advantages, token_rewards=token_rewards, loss_mask=loss_mask)
    rewards = _zero_truncated(token_rewards.to(device=advantages.device, dtype=advantages.dtype), truncated_rows)
    if not torch.isfinite(rewards).all():
        raise ValueError("token_rewards must be finite")
    active = loss_mask.to(advantages.device).bool()
    rolled = torch.roll(rewards, shifts=-1, dims=-1) * active.to(rewards.dtype)
    return shape_advantages_prerolled(
        advantages,
        rolled,
        loss_mask,
        mode=mode,
        negative_scale=negative_scale,
        zero_penalty=zero_penalty,
        zero_eps=zero_eps,
        min_form_temperature=min_form_temperature,
    )


def shape_advantages_prerolled(
    advantages: torch.Tensor,
    rolled_process_rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    mode: str,
    negative_scale: float = 0.2,
    zero_penalty: float = 0.4,
    zero_eps: float = 1e-6,
    min_form_temperature: float | None = None,
) -> torch.Tensor:
    """`shape_advantages` for process rewards ALREADY rolled by -1 onto the predicting positions.

    `rolled_process_rewards` is AReaL's `token_advantages` (roll(token_rewards, -1) * loss_mask,
    truncated rows already zeroed): use this when porting AReaL actor code, `shape_advantages`
    when holding `token_rewards` as the runner writes them. Passing unrolled rewards here shifts
    every reward one token late.
    """
    if mode not in SHAPING_MODES:
        raise ValueError(f"unknown mode {mode!r} (expected {'|'.join(SHAPING_MODES)})")
    _check_coefficients(negative_scale, zero_penalty, zero_eps)
    check_min_form_temperature(min_form_temperature)
    _check_same_2d(advantages=advantages, rolled_process_rewards=rolled_process_rewards, loss_mask=loss_mask)
    process = rolled_process_rewards.to(device=advantages.device, dtype=advantages.dtype)
    if not torch.isfinite(process).all():
        raise ValueError("process rewards must be finite")
    active = loss_mask.to(advantages.device).bool()

    if mode == "additive":
        shaped = advantages + process
    elif mode == "gvpo":
        failed = process < 0
        shaped = torch.where(failed & (advantages < -zero_eps), advantages * (1.0 + negative_scale), advantages)
        shaped = torch.where(failed & (advantages.abs() <= zero_eps), torch.full_like(shaped, -zero_penalty), shaped)
        shaped = torch.where(failed & (advantages > zero_eps), torch.zeros_like(shaped), shaped)
    elif mode == "min_form":
        shaped = advantages + min_form_returns(process, active, min_form_temperature)
    else:
        # No host sync on GPU: the check fails asynchronously there, synchronously on CPU.
        in_range = (process >= 0) & (process <= 1)
        torch._assert_async(torch.all(in_range | ~active), PROCESS_WEIGHTED_RANGE_ERROR)
        shaped = torch.where(advantages >= 0, advantages * process, torch.where(process > 0, process, advantages))
    return torch.where(active, shaped, advantages)


def fold_turn_rewards(
    token_rewards: torch.Tensor,
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor | None = None,
    *,
    truncated_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-position rewards to add before GAE when `token_rewards_as_adv` is false.

    The actor's low-level path for workflows that write one uniform reward per turn themselves
    (configured scorers refuse this mode: how a dense reward becomes one turn total is not
    defined). Each turn's reward is counted once, at the turn's last predicting position, so it
    must be uniform over the turn's tokens (a dense reward would otherwise lose its shape
    silently). Turns are runs of active positions, split further by `turn_ids` when given.
    `truncated_rows` zeroes rows without EOS first (`mask_no_eos_with_zero`).
    """
    tensors = {"token_rewards": token_rewards, "loss_mask": loss_mask}
    if turn_ids is not None:
        tensors["turn_ids"] = turn_ids
    _check_same_2d(**tensors)
    token_rewards = _zero_truncated(token_rewards, truncated_rows)
    active = loss_mask.bool()
    rolled = torch.roll(token_rewards, shifts=-1, dims=-1)
    continues = torch.zeros_like(active)
    continues[:, :-1] = active[:, :-1] & active[:, 1:]
    if turn_ids is not None:
        continues[:, :-1] &= turn_ids[:, :-1] == turn_ids[:, 1:]
    uniform = (rolled[:, :-1] == rolled[:, 1:]) | ~continues[:, :-1]
    torch._assert_async(torch.all(uniform), FOLD_UNIFORM_ERROR)
    return rolled * (active & ~continues).to(rolled.dtype)
