"""PRMRunner: scores one branch with every configured scorer and commits all of it or nothing."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from types import MappingProxyType
from typing import Any

import torch

from prm_distill.scorer.branches import order_parents_first
from prm_distill.scorer.config import PRMConfig
from prm_distill.scorer.contract import (
    BaseScorer,
    BaseTrajectoryScorer,
    PRMMetricObservation,
    PRMScorerResult,
    PRMTurnResult,
)
from prm_distill.scorer.metrics import PRMMetrics

logger = logging.getLogger(__name__)

Schema = tuple[str, tuple[str, ...]]  # (value_type, aggregations)
SchemaKey = tuple[str, str]  # (scope, metric_id)


class PRMRejectedError(RuntimeError):
    """A scorer returned None: the trajectory must not be trained on."""


def import_object(path: str) -> Any:
    """The object named by a dotted path `package.module.Name`."""
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ImportError(f"{path!r} is not a dotted path (package.module.Class)")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attribute!r}") from None


@dataclass
class _Failure:
    """An ordinary scorer exception, held until every turn of the scorer has finished."""

    error: Exception


async def _settle(awaitable: Any) -> Any:
    try:
        return await awaitable
    except Exception as error:
        return _Failure(error)


@dataclass
class _Validated:
    """One scorer's checked results, ready to commit."""

    scorer_name: str
    contributions: list[torch.Tensor]
    turn_results: list[PRMTurnResult]
    schemas: dict[SchemaKey, Schema]


class PRMRunner:
    """Runs the configured scorers over one branch and adds their weighted rewards to `token_rewards`.

    Scorers built from `{path, ...}` entries are owned and closed by `aclose()`; ready instances in
    `config.scorers` are borrowed and left to the caller. Use `await PRMRunner.create(config)` in
    async code: it closes what it built if start-up fails. `PRMRunner(config)` is the synchronous
    form without that rollback.
    """

    def __init__(self, config: PRMConfig) -> None:
        self._setup(config)
        self._build_scorers()
        self._validate_scorers()

    @classmethod
    async def create(cls, config: PRMConfig) -> PRMRunner:
        """Build and validate the scorers; on failure close the owned ones, then re-raise the cause."""
        runner = cls.__new__(cls)
        runner._setup(config)
        try:
            runner._build_scorers()
            runner._validate_scorers()
        except Exception as error:
            runner._closing = True
            for cleanup_error in await runner._close_owned():
                error.add_note(f"while rolling back PRMRunner.create: scorer clean-up failed: {cleanup_error!r}")
            raise
        return runner

    def _setup(self, config: PRMConfig) -> None:
        self.config = config
        self.metrics = PRMMetrics()
        self._scorers: list[BaseScorer] = []
        self._unclosed: list[BaseScorer] = []  # owned, clean-up not yet attempted, creation order
        self._closing = False
        self._close_task: asyncio.Task[None] | None = None
        self._schemas: dict[str, dict[SchemaKey, Schema]] = {}

    def _build_scorers(self) -> None:
        if not self.config.enabled:
            return
        for index, spec in enumerate(self.config.scorers):
            if isinstance(spec, BaseScorer):
                self._scorers.append(spec)
                continue
            try:
                cls = import_object(spec.path)
            except ImportError as error:
                raise ImportError(f"scorers[{index}].path: cannot import {spec.path!r}: {error}") from error
            if not (isinstance(cls, type) and issubclass(cls, BaseScorer)):
                raise TypeError(f"scorers[{index}].path: {spec.path!r} is {cls!r}, not a BaseScorer subclass")
            scorer = cls(weight=spec.weight, enabled=spec.enabled, **dict(spec.kwargs))
            self._unclosed.append(scorer)
            self._scorers.append(scorer)
        classes: dict[str, type] = {}
        for scorer in self._scorers:
            if classes.setdefault(scorer.name, type(scorer)) is not type(scorer):
                raise ValueError(
                    f"scorer name {scorer.name!r} is used by both {classes[scorer.name].__qualname__} "
                    f"and {type(scorer).__qualname__}; names must be unique (they key the metrics)"
                )

    def _validate_scorers(self) -> None:
        for scorer in self._scorers:
            validate = getattr(scorer, "validate_prm_config", None)
            if validate is not None:
                validate(self.config, training_enabled=self.config.enabled and scorer.enabled)

    @property
    def scorers(self) -> tuple[BaseScorer, ...]:
        return tuple(self._scorers)

    async def run(
        self,
        interactions: Iterable[Any],
        ctx: Mapping[str, Any] | None = None,
        *,
        is_eval: bool = False,
        record_metrics: bool = True,
    ) -> list[PRMTurnResult]:
        """Score one branch (parents first) and add every enabled scorer's weighted reward.

        Scorers run one after another; one scorer scores the turns concurrently. Nothing is
        changed unless every scorer succeeds: any exception propagates, and a None result raises
        `PRMRejectedError`. Set `record_metrics=False` to publish the returned results yourself
        once a larger unit (e.g. every branch of a session) has succeeded.
        """
        if self._closing:
            raise RuntimeError("PRMRunner is closed: run() is refused once aclose() has started")
        turns = list(interactions)
        active = [scorer for scorer in self._scorers if scorer.enabled]
        if not active or not turns:
            return []
        totals = [_existing_token_rewards(turn) for turn in turns]
        score_ctx = MappingProxyType({**(ctx or {}), "is_eval": is_eval})
        validated: list[_Validated] = []
        for scorer in active:
            results = await self._evaluate(scorer, turns, score_ctx)
            validated.append(_validate(scorer, turns, results))
        return self._commit(turns, totals, validated, is_eval=is_eval, record_metrics=record_metrics)

    async def _evaluate(self, scorer: BaseScorer, turns: list[Any], ctx: Mapping[str, Any]) -> list[PRMScorerResult]:
        if isinstance(scorer, BaseTrajectoryScorer):
            return await _evaluate_trajectory(scorer, turns, ctx)
        tasks = []
        async with asyncio.TaskGroup() as group:
            for turn in turns:
                tasks.append(group.create_task(_settle(scorer.evaluate_result(turn, ctx))))
        outcomes = [task.result() for task in tasks]
        for outcome in outcomes:
            if isinstance(outcome, _Failure):
                raise outcome.error
        rejected = sum(outcome is None for outcome in outcomes)
        if rejected:
            raise PRMRejectedError(f"scorer {scorer.name!r} returned None for {rejected}/{len(turns)} turns")
        return outcomes

    def _commit(
        self,
        turns: list[Any],
        totals: list[torch.Tensor | None],
        validated: list[_Validated],
        *,
        is_eval: bool,
        record_metrics: bool,
    ) -> list[PRMTurnResult]:
        # No await from here on: checking and registering schemas cannot interleave with another run.
        for item in validated:
            registered = self._schemas.get(item.scorer_name, {})
            for key, schema in item.schemas.items():
                if registered.get(key, schema) != schema:
                    raise ValueError(
                        f"scorer {item.scorer_name!r} changed the schema of metric {key!r}: "
                        f"{registered[key]} before, {schema} now"
                    )
        for index, turn in enumerate(turns):
            total = totals[index]
            for item in validated:
                contribution = item.contributions[index]
                total = contribution.clone() if total is None else total + contribution
            if not torch.isfinite(total).all():
                raise ValueError(f"accumulated token_rewards of {turn.interaction_id!r} are not finite")
            totals[index] = total
        for item in validated:
            registered = self._schemas.setdefault(item.scorer_name, {})
            for key, schema in item.schemas.items():
                registered.setdefault(key, schema)
        for turn, total in zip(turns, totals, strict=True):
            turn.token_rewards = total
        results = [result for item in validated for result in item.turn_results]
        if record_metrics:
            self.metrics.record_branch(results, is_eval=is_eval)
        return results

    async def aclose(self) -> None:
        """Close the owned scorers (disabled ones too) in reverse creation order, each at most once.

        Concurrent callers await the same clean-up. Ordinary failures are logged, and raised
        together as an `ExceptionGroup` once every owned scorer was tried. Cancellation propagates
        (to every waiter); an interrupted or failed clean-up is never retried, while a later call
        still closes the scorers that were not reached.
        """
        self._closing = True
        task = self._close_task
        if task is None or (task.done() and self._unclosed):
            task = self._close_task = asyncio.get_running_loop().create_task(self._close_pass())
        elif task.done():
            return
        await task

    async def _close_pass(self) -> None:
        errors = await self._close_owned()
        if errors:
            raise ExceptionGroup("PRM scorer cleanup failed", errors)

    async def _close_owned(self) -> list[Exception]:
        errors: list[Exception] = []
        while self._unclosed:
            scorer = self._unclosed.pop()  # popped before awaiting: never closed twice
            close = getattr(scorer, "aclose", None)  # older AReaL bases have no hook
            if close is None:
                continue
            try:
                await close()
            except Exception as error:
                logger.exception("closing PRM scorer %r failed", scorer.name)
                errors.append(error)
        return errors


def _existing_token_rewards(turn: Any) -> torch.Tensor | None:
    """Check a turn is scorable and return its current token rewards as CPU float32."""
    turn_id = getattr(turn, "interaction_id", None)
    if not isinstance(turn_id, str) or not turn_id:
        raise ValueError(f"every interaction needs a non-empty string interaction_id, got {turn_id!r}")
    response = getattr(turn, "model_response", None)
    if response is None:
        raise ValueError(f"interaction {turn_id!r} has no model_response: PRM scoring needs token ids")
    output_len = response.output_len
    if output_len <= 0 or output_len != len(response.output_tokens):
        raise ValueError(
            f"interaction {turn_id!r} has output_len {output_len} for {len(response.output_tokens)} output tokens"
        )
    existing = turn.token_rewards
    if existing is None:
        return None
    existing = torch.as_tensor(existing).detach().to(device="cpu", dtype=torch.float32)
    if existing.shape != (output_len,) or not torch.isfinite(existing).all():
        raise ValueError(f"interaction {turn_id!r} has token_rewards that are not a finite [{output_len}] tensor")
    return existing


async def _evaluate_trajectory(
    scorer: BaseTrajectoryScorer, turns: list[Any], ctx: Mapping[str, Any]
) -> list[PRMScorerResult]:
    ids = [turn.interaction_id for turn in turns]
    if len(set(ids)) != len(ids):
        raise ValueError(f"trajectory scorer {scorer.name!r} needs unique interaction ids, got {ids}")
    by_id = await scorer.evaluate_trajectory(order_parents_first(turns), ctx)
    if by_id is None:
        raise PRMRejectedError(f"trajectory scorer {scorer.name!r} returned None")
    if not isinstance(by_id, Mapping):
        raise TypeError(f"{type(scorer).__name__}.evaluate_trajectory must return a mapping, got {by_id!r}")
    unknown = [key for key in by_id if key not in ids]
    if unknown:
        raise ValueError(f"trajectory scorer {scorer.name!r} returned unknown interaction ids {unknown}")
    rewards = [by_id.get(turn_id, 0.0) for turn_id in ids]
    rejected = [turn_id for turn_id, reward in zip(ids, rewards, strict=True) if reward is None]
    if rejected:
        raise PRMRejectedError(f"trajectory scorer {scorer.name!r} returned None for {rejected}")
    return [scorer.prepare_result(turn, reward, ctx) for turn, reward in zip(turns, rewards, strict=True)]


def _validate(scorer: BaseScorer, turns: list[Any], results: Sequence[Any]) -> _Validated:
    """Check every result of one scorer before any of them is applied."""
    contributions: list[torch.Tensor] = []
    turn_results: list[PRMTurnResult] = []
    schemas: dict[SchemaKey, Schema] = {}
    seen: set[tuple[str, str, str]] = set()
    for turn, result in zip(turns, results, strict=True):
        if not isinstance(result, PRMScorerResult):
            raise TypeError(f"{type(scorer).__name__} must return PRMScorerResult or None, got {result!r}")
        raw = _token_rewards(scorer, turn, result.reward)
        contribution = raw * scorer.weight
        if not torch.isfinite(contribution).all():
            raise ValueError(f"scorer {scorer.name!r} weighted reward for {turn.interaction_id!r} is not finite")
        observations = result.observations
        if isinstance(observations, (str, bytes)) or not isinstance(observations, Sequence):
            raise TypeError(f"{type(scorer).__name__} observations must be a sequence, got {observations!r}")
        for observation in observations:
            _check_observation(scorer, turn, observation, seen, schemas)
        contributions.append(contribution)
        turn_results.append(
            PRMTurnResult(
                scorer_name=scorer.name,
                reward=float(contribution.mean().item()),
                observations=tuple(observations),
            )
        )
    return _Validated(scorer.name, contributions, turn_results, schemas)


def _token_rewards(scorer: BaseScorer, turn: Any, reward: Any) -> torch.Tensor:
    """A scalar broadcast to every output token, or a dense tensor of exactly that shape."""
    output_len = turn.model_response.output_len
    if isinstance(reward, torch.Tensor):
        tensor = reward.detach().to(device="cpu", dtype=torch.float32)
        if tensor.shape != (output_len,):
            raise ValueError(
                f"scorer {scorer.name!r} returned shape {tuple(tensor.shape)} for {turn.interaction_id!r}, "
                f"expected ({output_len},)"
            )
    elif isinstance(reward, Real) and not isinstance(reward, bool):
        tensor = torch.full((output_len,), float(reward), dtype=torch.float32)
    else:
        raise TypeError(f"scorer {scorer.name!r} returned {reward!r}; expected a float, a tensor or None")
    if not torch.isfinite(tensor).all():
        raise ValueError(f"scorer {scorer.name!r} returned non-finite rewards for {turn.interaction_id!r}")
    return tensor


def _check_observation(
    scorer: BaseScorer,
    turn: Any,
    observation: Any,
    seen: set[tuple[str, str, str]],
    schemas: dict[SchemaKey, Schema],
) -> None:
    if not isinstance(observation, PRMMetricObservation):
        raise TypeError(f"{type(scorer).__name__} observations must be PRMMetricObservation, got {observation!r}")
    if observation.scope == "turn" and observation.target_id != turn.interaction_id:
        raise ValueError(
            f"turn metric {observation.metric_id!r} of {scorer.name!r} targets {observation.target_id!r}, "
            f"expected {turn.interaction_id!r}"
        )
    key = (observation.scope, observation.target_id, observation.metric_id)
    if key in seen:
        raise ValueError(f"scorer {scorer.name!r} reported metric {key} twice")
    seen.add(key)
    schema = (observation.value_type, tuple(observation.aggregations))
    previous = schemas.setdefault((observation.scope, observation.metric_id), schema)
    if previous != schema:
        raise ValueError(
            f"scorer {scorer.name!r} reported metric {observation.metric_id!r} with schemas {previous} and {schema}"
        )
