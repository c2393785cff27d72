"""The distilled PRM as a TRL `GRPOTrainer` reward function.

```python
from prm_distill.integrations.trl import PRMReward
trainer = GRPOTrainer(model=..., reward_funcs=[correctness, PRMReward(model="runs/prm")], ...)
```

GRPOTrainer calls each reward function with `prompts`, `completions`, `completion_ids` and the
dataset's other columns as keyword arguments and expects one `float | None` per completion
(None: "this function has no opinion", NaN in its table, left out of the weighted sum). Prompts
and completions are strings, or message lists for conversational datasets; both are handled.
`PRMReward` is synchronous; `AsyncPRMReward` has an async `__call__`, which GRPOTrainer runs
concurrently with the other async reward functions.

The score of a completion is its steps' calibrated P(good) aggregated by `agg` (`min` by default:
a chain is as good as its weakest step). `outcome=` makes it the process-weighted combination
with a correctness reward: `outcome * score` where the outcome is >= 0 (a correct answer reached
by sound steps is worth more than one reached by luck) and the outcome unchanged where it is
negative. A completion that cannot be scored (no text, no steps, refused by the server) gets
None, counted in `fallbacks` and logged through TRL's `log_metric` when it passes one. A server
that cannot be reached raises (naming its URL) after the client's bounded retries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from prm_distill.integrations.common import (
    FallbackCounter,
    PRMBackend,
    ScoredSteps,
    UnscorableError,
    aggregated,
    check_agg,
    question_of,
    response_of,
)

__all__ = ["AsyncPRMReward", "PRMReward"]


class PRMReward:
    """`reward(prompts=[...], completions=[...], **columns)` -> one float or None per completion."""

    def __init__(
        self,
        model: str | None = None,
        url: str | None = None,
        *,
        agg: str = "min",
        gamma: float = 0.9,
        outcome: Callable[..., Sequence[float | None]] | None = None,
        question_column: str | None = None,
        name: str = "prm",
        backend: PRMBackend | None = None,
        **backend_options: Any,
    ) -> None:
        """`model`: a checkpoint folder (scored in-process) or `url`: a `prm-distill serve` server.
        `question_column`: a dataset column holding the bare question (default: the last user
        message of the prompt). `backend_options` go to `PRMBackend` (device, dtype, api_key,
        splitter, calibrate). `name` is what TRL logs the reward as (`rewards/<name>/mean`)."""
        self.agg = check_agg(agg)
        self.gamma = gamma
        if outcome is not None and not callable(outcome):
            raise TypeError(f"outcome must be a reward function (callable), got {outcome!r}")
        self.outcome = outcome
        self.question_column = question_column
        self.__name__ = name
        self.backend = backend if backend is not None else PRMBackend(model=model, url=url, **backend_options)
        self.fallbacks = FallbackCounter()

    def _pairs(self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> list[tuple[str, str] | UnscorableError]:
        if len(prompts) != len(completions):
            raise ValueError(f"got {len(prompts)} prompts for {len(completions)} completions")
        questions: Sequence[Any] = prompts
        if self.question_column is not None:
            if self.question_column not in columns:
                raise KeyError(f"question_column {self.question_column!r} is not among the dataset columns {sorted(columns)}")
            questions = columns[self.question_column]
        pairs: list[tuple[str, str] | UnscorableError] = []
        for question, completion in zip(questions, completions, strict=True):
            try:
                pairs.append((question_of(question), response_of(completion)))
            except UnscorableError as e:
                pairs.append(e)
        return pairs

    def _finish(
        self,
        pairs: list[tuple[str, str] | UnscorableError],
        results: list[ScoredSteps | UnscorableError],
        outcomes: Sequence[float | None] | None,
        columns: Mapping[str, Any],
    ) -> list[float | None]:
        merged: list[ScoredSteps | UnscorableError] = []
        it = iter(results)
        for pair in pairs:
            merged.append(pair if isinstance(pair, UnscorableError) else next(it))
        rewards = [aggregated(result, self.agg, self.gamma) for result in merged]
        reasons = [result.reason for result in merged if isinstance(result, UnscorableError)]
        self.fallbacks.count(scored=len(merged) - len(reasons), reasons=reasons)
        if outcomes is not None:
            if len(outcomes) != len(rewards):
                raise ValueError(f"outcome returned {len(outcomes)} rewards for {len(rewards)} completions")
            rewards = [_process_weighted(o, r) for o, r in zip(outcomes, rewards, strict=True)]
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            log_metric(f"{self.__name__}/fallback_frac", len(reasons) / max(len(merged), 1))
        return rewards

    def _outcomes(self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> Any:
        if self.outcome is None:
            return None
        return self.outcome(prompts=prompts, completions=completions, **columns)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        pairs = self._pairs(prompts, completions, columns)
        results = self.backend.score_responses([p for p in pairs if not isinstance(p, UnscorableError)])
        return self._finish(pairs, results, self._outcomes(prompts, completions, columns), columns)

    def close(self) -> None:
        self.backend.close()


class AsyncPRMReward(PRMReward):
    """`PRMReward` with an async `__call__`: GRPOTrainer awaits it alongside its other async rewards."""

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:  # type: ignore[override]
        pairs = self._pairs(prompts, completions, columns)
        results = await self.backend.ascore_responses([p for p in pairs if not isinstance(p, UnscorableError)])
        outcomes = self._outcomes(prompts, completions, columns)
        if hasattr(outcomes, "__await__"):
            outcomes = await outcomes
        return self._finish(pairs, results, outcomes, columns)


def _process_weighted(outcome: float | None, score: float | None) -> float | None:
    """outcome * score for a non-negative outcome, the outcome itself when negative; None when either is missing."""
    if outcome is None or score is None or (isinstance(outcome, float) and math.isnan(outcome)):
        return None
    return float(outcome) * score if outcome >= 0 else float(outcome)
