"""STAND-IN for AReaL's PRM runner module (see ../../../../README.md).

Only what a host runner does to a scorer: build it from `{path, weight, enabled, kwargs}`, call
`evaluate_result` (or `evaluate_trajectory`) per turn, broadcast scalars with `float()`, weight,
commit through `InteractionCache.set_token_rewards`, publish to `stats_tracker`. No aclose hook
and no `validate_prm_config` call: older AReaL bases have neither.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from areal.api.cli_args import PRMScorerConfig
from areal.utils import stats_tracker


class BaseScorer:
    name: ClassVar[str] = ""

    def __init__(self, weight: float = 1.0, enabled: bool = True):
        if not self.name:
            raise ValueError(f"{type(self).__name__} must define a non-empty class-level name")
        self.weight = float(weight)
        self.enabled = bool(enabled)

    async def evaluate(self, interaction, ctx):
        raise NotImplementedError

    def prepare_result(self, interaction, result, ctx):
        return PRMScorerResult(reward=result)

    async def evaluate_result(self, interaction, ctx):
        result = await self.evaluate(interaction, ctx)
        return None if result is None else self.prepare_result(interaction, result, ctx)


class BaseTrajectoryScorer(BaseScorer):
    async def evaluate_trajectory(self, interactions, ctx):
        raise NotImplementedError


@dataclass(frozen=True)
class PRMMetricObservation:
    metric_id: str
    scope: str
    target_id: str
    value: Any
    value_type: str
    aggregations: tuple


@dataclass(frozen=True)
class PRMScorerResult:
    reward: Any
    observations: tuple = ()


@dataclass(frozen=True)
class PRMTurnResult:
    scorer_name: str
    reward: float
    observations: tuple = ()


def record_prm_results(results, *, is_eval=False):
    tracker = stats_tracker.get("eval-rollout" if is_eval else "rollout")
    for record in results:
        tracker.scalar(**{f"prm_turn_reward/{record.scorer_name}": record.reward})


def _resolve(spec):
    if isinstance(spec, BaseScorer):
        return spec
    if isinstance(spec, Mapping):
        spec = PRMScorerConfig(**spec)
    module_name, _, attribute = spec.path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(cls, type) and issubclass(cls, BaseScorer)):
        raise TypeError(f"{spec.path!r} resolved to {cls!r}, not a BaseScorer subclass")
    return cls(weight=spec.weight, enabled=spec.enabled, **dict(spec.kwargs))


class PRMRunner:
    def __init__(self, config):
        self.config = config
        self._scorers = [_resolve(spec) for spec in config.scorers] if config.enabled else []

    @property
    def scorers(self):
        return tuple(self._scorers)

    async def run(self, cache, ctx=None, *, is_eval=False, record_metrics=True):
        ctx = {**(ctx or {}), "is_eval": is_eval}
        committed = []
        for scorer in self._scorers:
            if not scorer.enabled:
                continue
            items = list(cache.items())
            if isinstance(scorer, BaseTrajectoryScorer):
                raw = await scorer.evaluate_trajectory([turn for _, turn in items], ctx)
                results = [scorer.prepare_result(turn, raw.get(turn_id, 0.0), ctx) for turn_id, turn in items]
            else:
                results = await asyncio.gather(*(scorer.evaluate_result(turn, ctx) for _, turn in items))
            if any(result is None for result in results):
                raise RuntimeError(f"Scorer {scorer.name!r} returned None")
            for (turn_id, turn), result in zip(items, results, strict=True):
                output_len = turn.model_response.output_len
                if isinstance(result.reward, torch.Tensor):
                    raw_rewards = result.reward.detach().float()
                else:
                    raw_rewards = torch.full((output_len,), float(result.reward))
                contribution = raw_rewards * scorer.weight
                total = contribution if turn.token_rewards is None else turn.token_rewards + contribution
                cache.set_token_rewards(turn_id, total)
                committed.append(PRMTurnResult(scorer.name, float(contribution.mean()), tuple(result.observations)))
        if record_metrics:
            record_prm_results(committed, is_eval=is_eval)
        return committed
