"""LengthBudgetScorer: rewards turns that stay within an output-token budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prm_distill.scorer.contract import BaseScorer, PRMMetricObservation, PRMScorerResult


class LengthBudgetScorer(BaseScorer):
    """1.0 for a turn of at most `max_output_tokens` (default 128, as AReaL's example) output tokens, else 0.0.

    Needs no model, so it doubles as the smallest working example of the contract, observations
    included: a boolean turn metric `within_budget` aggregated as count and rate.
    """

    name = "length_budget"

    def __init__(self, max_output_tokens: int = 128, weight: float = 1.0, enabled: bool = True, **kwargs: Any) -> None:
        super().__init__(weight=weight, enabled=enabled, **kwargs)
        if isinstance(max_output_tokens, bool) or not isinstance(max_output_tokens, int) or max_output_tokens <= 0:
            raise ValueError(f"max_output_tokens must be positive (an integer > 0), got {max_output_tokens!r}")
        self.max_output_tokens = max_output_tokens

    def _within(self, interaction: Any) -> bool:
        return interaction.model_response.output_len <= self.max_output_tokens

    async def evaluate(self, interaction: Any, ctx: Mapping[str, Any]) -> float:
        return float(self._within(interaction))

    def prepare_result(self, interaction: Any, result: float, ctx: Mapping[str, Any]) -> PRMScorerResult:
        observation = PRMMetricObservation(
            metric_id="within_budget",
            scope="turn",
            target_id=interaction.interaction_id,
            value=self._within(interaction),
            value_type="boolean",
            aggregations=("count", "rate"),
        )
        return PRMScorerResult(reward=result, observations=(observation,))
