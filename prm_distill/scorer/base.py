"""This package's scorer base classes, used when AReaL's are not importable (see `contract.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from prm_distill.scorer.types import PRMScorerResult, coerce_enabled, coerce_weight


class BaseScorer:
    """A process-reward scorer: one unweighted reward per turn.

    `evaluate` returns a scalar (broadcast to every output token of the turn), a tensor of exactly
    `[interaction.model_response.output_len]`, or None to reject the trajectory; a deliberate zero
    is `0.0`. One instance serves many sessions at once, so per-request state belongs in the
    coroutine, never on `self`.
    """

    name: ClassVar[str] = ""

    def __init__(self, weight: float = 1.0, enabled: bool = True, **kwargs: Any) -> None:
        if not self.name:
            raise ValueError(f"{type(self).__name__} must set a non-empty class attribute `name`")
        if kwargs:
            # A misspelt YAML kwarg must not be silently dropped.
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments {sorted(kwargs)}")
        # Coerced as AReaL does (`float(weight)`, `bool(enabled)`), refusing values whose meaning is unclear.
        try:
            self.weight = coerce_weight(weight)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{type(self).__name__} weight: {error}") from None
        try:
            self.enabled = coerce_enabled(enabled)
        except TypeError as error:
            raise TypeError(f"{type(self).__name__} enabled: {error}") from None

    async def score(self, interaction: Any, ctx: Mapping[str, Any]) -> float | torch.Tensor | None:
        """The weighted reward of one turn (AReaL's helper); the runner itself weights `evaluate`."""
        result = await self.evaluate(interaction, ctx)
        if result is None:
            return None
        if isinstance(result, torch.Tensor):
            return result * self.weight
        return float(result) * self.weight

    async def evaluate(self, interaction: Any, ctx: Mapping[str, Any]) -> float | torch.Tensor | None:
        """The unweighted reward of one turn; the runner applies the weight."""
        raise NotImplementedError

    def prepare_result(self, interaction: Any, result: float | torch.Tensor, ctx: Mapping[str, Any]) -> PRMScorerResult:
        """Attach observations to a reward; the default has none."""
        del interaction, ctx
        return PRMScorerResult(reward=result)

    async def evaluate_result(self, interaction: Any, ctx: Mapping[str, Any]) -> PRMScorerResult | None:
        """Evaluate and prepare in one coroutine, so no request state is kept on the instance."""
        result = await self.evaluate(interaction, ctx)
        if result is None:
            return None
        return self.prepare_result(interaction, result, ctx)

    def validate_prm_config(self, config: Any, *, training_enabled: bool) -> None:
        """Reject a configuration this scorer cannot serve, before any trajectory is scored."""

    async def aclose(self) -> None:
        """Release what the scorer owns (clients, buffers); the owning runner calls it once."""


class BaseTrajectoryScorer(BaseScorer):
    """A scorer that judges a whole branch at once instead of one turn at a time."""

    async def evaluate(self, interaction: Any, ctx: Mapping[str, Any]) -> float | torch.Tensor | None:
        del interaction, ctx
        raise RuntimeError(f"{type(self).__name__} scores whole trajectories; run it through PRMRunner")

    async def evaluate_trajectory(
        self, interactions: Sequence[Any], ctx: Mapping[str, Any]
    ) -> Mapping[str, float | torch.Tensor | None] | None:
        """Unweighted rewards keyed by interaction id; turns arrive parents first, missing ids get 0.0."""
        raise NotImplementedError
