"""PRMRunner: scores one branch with every configured scorer and commits each scorer all or nothing.

Behaves as AReaL's `areal.reward.prm.PRMRunner` (same inputs, errors and commit rule by default),
so a user can move either way; see the README for the one option AReaL does not have
(`commit_scope: run`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from prm_distill.scorer.config import PRMConfig
from prm_distill.scorer.contract import (
    BaseScorer,
    BaseTrajectoryScorer,
    PRMMetricObservation,
    PRMScorerResult,
    PRMTurnResult,
)
from prm_distill.scorer.metrics import PRMMetrics, record_prm_results
from prm_distill.scorer.tree import order_parents_first

logger = logging.getLogger(__name__)

Schema = tuple[str, tuple[str, ...]]  # (value_type, aggregations)
SchemaKey = tuple[str, str]  # (scope, metric_id)

# AReaL's documented example paths, resolved to this package's implementation of the same scorer,
# so a trainer config written for AReaL runs here unchanged.
SCORER_PATH_ALIASES: dict[str, str] = {
    "examples.prm.scorers.LengthBudgetScorer": "prm_distill.scorer.length_budget.LengthBudgetScorer",
}


class PRMRejectedError(RuntimeError):
    """A scorer returned None: the trajectory must not be trained on."""


def import_from_string(path: str) -> Any:
    """The object named by a dotted path `package.module.Name` (AReaL's example paths are aliased).

    AReaL's name for it: the runner resolves every scorer path through this module-level name, so
    code (and tests) written against AReaL that patch `runner.import_from_string` work unchanged.
    """
    path = SCORER_PATH_ALIASES.get(path, path)
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise ImportError(f"{path!r} is not a dotted path (package.module.Class)")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attribute!r}") from None


# The earlier name, kept for callers; patch `import_from_string`, which is the one the runner calls.
import_object = import_from_string


@dataclass
class _Failure:
    """An ordinary scorer exception, held until every turn of the scorer has finished."""

    error: Exception


async def _settle(awaitable: Any) -> Any:
    try:
        return await awaitable
    except Exception as error:  # noqa: BLE001 - held, then re-raised once every turn has finished
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

    # AReaL's callers check this before relying on `validate_prm_config` being called.
    supports_scorer_config_validation = True

    def __init__(self, config: PRMConfig) -> None:
        self._setup(config)
        self._build_scorers()
        self._validate_scorers()

    @classmethod
    async def create(cls, config: PRMConfig) -> PRMRunner:
        """Build and validate the scorers; on any failure (cancellation too) close the owned ones, then re-raise."""
        runner = cls.__new__(cls)
        runner._setup(config)
        try:
            runner._build_scorers()
            runner._validate_scorers()
        except BaseException as error:
            runner._closing = True
            for cleanup_error in await runner._close_owned():
                error.add_note(f"PRMRunner.create rollback: scorer cleanup failed: {cleanup_error!r}")
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
        for index, entry in enumerate(self.config.scorers):
            # Entries may have been replaced after the config was built (AReaL allows dicts there).
            spec = PRMConfig.scorer_entry(index, entry)
            if isinstance(spec, BaseScorer):
                self._scorers.append(spec)
                continue
            try:
                cls = import_from_string(spec.path)
            except ImportError as error:
                raise ImportError(f"scorers[{index}].path: cannot import {spec.path!r}: {error}") from error
            if not (isinstance(cls, type) and issubclass(cls, BaseScorer)):
                raise TypeError(f"{spec.path!r} resolved to {cls!r}, not a BaseScorer subclass")
            scorer = cls(weight=spec.weight, enabled=spec.enabled, **dict(spec.kwargs))
            self._unclosed.append(scorer)
            self._scorers.append(scorer)
        if not self._scorers:
            logger.warning("PRMRunner has no active scorer configuration")

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
        interactions: Mapping[str, Any] | Iterable[Any],
        ctx: Mapping[str, Any] | None = None,
        *,
        is_eval: bool = False,
        record_metrics: bool = True,
    ) -> list[PRMTurnResult]:
        """Score one branch and add every enabled scorer's weighted reward; returns what was committed.

        `interactions` is AReaL's `InteractionCache` (any mapping id -> turn) or a sequence of
        turns. A container with `set_token_rewards` (AReaL's cache) receives every commit through
        it, so its cached tensor dicts are invalidated. Scorers run one after another; one scorer
        scores the turns concurrently and its results are applied only once all of them validate.
        With `commit_scope: scorer` (default, AReaL's rule) a failure leaves the rewards of the
        scorers that already committed; with `run` nothing changes unless every scorer succeeds.
        Any exception propagates; a None result raises `PRMRejectedError`. Set
        `record_metrics=False` to publish the returned results yourself (`record_prm_results`)
        once a larger unit (e.g. every branch of a session) has succeeded.
        """
        if self._closing:
            raise RuntimeError("PRMRunner is closed: run() is refused once aclose() has started")
        items = _items(interactions)
        active = [scorer for scorer in self._scorers if scorer.enabled]
        if not active or not items:
            return []
        totals = [_existing_token_rewards(turn_id, turn) for turn_id, turn in items]
        score_ctx = MappingProxyType({**(ctx or {}), "is_eval": is_eval})
        # AReaL's own PRMConfig has no commit_scope: its rule, "scorer", applies.
        per_scorer = getattr(self.config, "commit_scope", "scorer") == "scorer"
        committed: list[PRMTurnResult] = []
        pending: list[_Validated] = []
        for scorer in active:
            results = await self._evaluate(scorer, items, score_ctx)
            item = _validate(scorer, items, results)
            self._check_schemas(item, pending)
            pending.append(item)
            if per_scorer:
                committed += self._commit(interactions, items, totals, pending)
                pending = []
        if pending:
            committed += self._commit(interactions, items, totals, pending)
        if record_metrics:
            record_prm_results(committed, is_eval=is_eval, metrics=self.metrics)
        return committed

    async def _evaluate(
        self, scorer: BaseScorer, items: list[tuple[str, Any]], ctx: Mapping[str, Any]
    ) -> list[PRMScorerResult]:
        turns = [turn for _, turn in items]
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
            raise PRMRejectedError(f"Scorer {scorer.name!r} returned None for {rejected}/{len(turns)} interactions")
        return outcomes

    def _check_schemas(self, item: _Validated, pending: list[_Validated]) -> None:
        """One scorer name keeps one schema per metric: across runs and across same-named scorers."""
        registered = dict(self._schemas.get(item.scorer_name, {}))
        for earlier in pending:
            if earlier.scorer_name == item.scorer_name:
                for key, schema in earlier.schemas.items():
                    registered.setdefault(key, schema)
        for key, schema in item.schemas.items():
            if registered.get(key, schema) != schema:
                raise ValueError(
                    f"structured metric schema changed across runs for scorer {item.scorer_name!r} metric {key!r}: "
                    f"{registered[key]} before, {schema} now"
                )

    def _commit(
        self,
        container: Any,
        items: list[tuple[str, Any]],
        totals: list[torch.Tensor | None],
        validated: list[_Validated],
    ) -> list[PRMTurnResult]:
        # No await from here on: checking and registering schemas cannot interleave with another run.
        combined: list[torch.Tensor] = []
        for index, (turn_id, _) in enumerate(items):
            total = totals[index]
            for item in validated:
                contribution = item.contributions[index]
                total = contribution.clone() if total is None else total + contribution
                if not torch.isfinite(total).all():
                    raise ValueError(
                        f"Combined token rewards are non-finite for interaction {turn_id!r} "
                        f"after scorer {item.scorer_name!r}"
                    )
            assert total is not None
            combined.append(total)
        for item in validated:
            registered = self._schemas.setdefault(item.scorer_name, {})
            for key, schema in item.schemas.items():
                registered.setdefault(key, schema)
        set_token_rewards = getattr(container, "set_token_rewards", None) if isinstance(container, Mapping) else None
        for index, ((turn_id, turn), total) in enumerate(zip(items, combined, strict=True)):
            if set_token_rewards is not None:
                set_token_rewards(turn_id, total)
            else:
                turn.token_rewards = total
                if getattr(turn, "_cache", None) is not None:
                    turn._cache = None  # AReaL's cached tensor dict would keep the old rewards
            totals[index] = total
        return [result for item in validated for result in item.turn_results]

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


def _items(interactions: Mapping[str, Any] | Iterable[Any]) -> list[tuple[str, Any]]:
    """(id, turn) pairs: a mapping's keys (AReaL's cache), else each turn's `interaction_id`."""
    if isinstance(interactions, Mapping):
        items = list(interactions.items())
        for turn_id, _ in items:
            if not isinstance(turn_id, str) or not turn_id:
                raise ValueError(f"interaction mapping keys must be non-empty strings, got {turn_id!r}")
    else:
        items = []
        for turn in interactions:
            turn_id = getattr(turn, "interaction_id", None)
            if not isinstance(turn_id, str) or not turn_id:
                raise ValueError(f"every interaction needs a non-empty string interaction_id, got {turn_id!r}")
            items.append((turn_id, turn))
    ids = [turn_id for turn_id, _ in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"interaction ids must be unique within one run, got {ids}")
    return items


def _existing_token_rewards(turn_id: str, turn: Any) -> torch.Tensor | None:
    """Check a turn is scorable and return its current token rewards as CPU float32."""
    response = getattr(turn, "model_response", None)
    if response is None:
        raise ValueError(f"PRM requires token-backed interactions; interaction {turn_id!r} has no model_response")
    output_len = response.output_len
    if output_len <= 0:
        raise ValueError(f"Interaction {turn_id!r} has no output token to reward (output_len {output_len})")
    output_tokens = getattr(response, "output_tokens", None)
    if isinstance(output_tokens, Sequence) and output_len != len(output_tokens):
        raise ValueError(f"interaction {turn_id!r} has output_len {output_len} for {len(output_tokens)} output tokens")
    existing = turn.token_rewards
    if existing is None:
        return None
    existing = torch.as_tensor(existing).detach().to(device="cpu", dtype=torch.float32)
    if existing.shape != (output_len,):
        raise ValueError(
            f"Existing token_rewards shape mismatch for interaction {turn_id!r}: "
            f"expected ({output_len},), got {tuple(existing.shape)}"
        )
    if not torch.isfinite(existing).all():
        raise ValueError(f"Existing token_rewards contain non-finite values for interaction {turn_id!r}")
    return existing


async def _evaluate_trajectory(
    scorer: BaseTrajectoryScorer, turns: list[Any], ctx: Mapping[str, Any]
) -> list[PRMScorerResult]:
    ids = [turn.interaction_id for turn in turns]
    if any(turn_id is None for turn_id in ids):
        raise ValueError(f"Trajectory scorer {scorer.name!r} requires every interaction to have an ID")
    if len(set(ids)) != len(ids):
        raise ValueError(f"Trajectory scorer {scorer.name!r} requires unique interaction IDs, got {ids}")
    by_id = await scorer.evaluate_trajectory(order_parents_first(turns), ctx)
    if by_id is None:
        raise PRMRejectedError(f"Scorer {scorer.name!r} returned None for {len(turns)}/{len(turns)} interactions")
    if not isinstance(by_id, Mapping):
        raise TypeError(f"{type(scorer).__name__}.evaluate_trajectory() must return a mapping, got {by_id!r}")
    unknown = sorted(str(key) for key in by_id if key not in ids)
    if unknown:
        raise ValueError(f"Trajectory scorer {scorer.name!r} returned unknown interaction IDs: {unknown!r}")
    rewards = [by_id.get(turn_id, 0.0) for turn_id in ids]
    rejected = [turn_id for turn_id, reward in zip(ids, rewards, strict=True) if reward is None]
    if rejected:
        raise PRMRejectedError(f"Scorer {scorer.name!r} returned None for {len(rejected)}/{len(ids)} interactions")
    return [scorer.prepare_result(turn, reward, ctx) for turn, reward in zip(turns, rewards, strict=True)]


def _validate(scorer: BaseScorer, items: list[tuple[str, Any]], results: Sequence[Any]) -> _Validated:
    """Check every result of one scorer before any of them is applied."""
    contributions: list[torch.Tensor] = []
    turn_results: list[PRMTurnResult] = []
    schemas: dict[SchemaKey, Schema] = {}
    seen: set[tuple[str, str, str]] = set()
    for (turn_id, turn), result in zip(items, results, strict=True):
        if not isinstance(result, PRMScorerResult):
            raise TypeError(
                f"{type(scorer).__name__}.evaluate_result() must return PRMScorerResult or None, "
                f"got {type(result).__name__}"
            )
        raw = _token_rewards(scorer, turn_id, turn, result.reward)
        contribution = raw * scorer.weight
        if not torch.isfinite(contribution).all():
            raise ValueError(
                f"Scorer {scorer.name!r} produced non-finite weighted token rewards for interaction {turn_id!r}"
            )
        observations = result.observations
        if isinstance(observations, (str, bytes)) or not isinstance(observations, Sequence):
            raise TypeError(f"{type(scorer).__name__} observations must be a sequence, got {observations!r}")
        for observation in observations:
            _check_observation(scorer, turn_id, observation, seen, schemas)
        contributions.append(contribution)
        turn_results.append(
            PRMTurnResult(
                scorer_name=scorer.name,
                reward=float(contribution.mean().item()),
                observations=tuple(observations),
            )
        )
    return _Validated(scorer.name, contributions, turn_results, schemas)


def _token_rewards(scorer: BaseScorer, turn_id: str, turn: Any, reward: Any) -> torch.Tensor:
    """A scalar (anything `float()` accepts, bools too) broadcast to every output token, or a tensor of that shape."""
    output_len = turn.model_response.output_len
    if isinstance(reward, torch.Tensor):
        tensor = reward.detach().to(device="cpu", dtype=torch.float32)
        if tensor.shape != (output_len,):
            raise ValueError(
                f"Scorer {scorer.name!r} must return shape ({output_len},) for interaction {turn_id!r}, "
                f"got {tuple(tensor.shape)}"
            )
    else:
        try:
            value = float(reward)
        except (TypeError, ValueError):
            raise TypeError(
                f"Scorer {scorer.name!r} returned {reward!r} for interaction {turn_id!r}; "
                "expected a number, a tensor or None"
            ) from None
        tensor = torch.full((output_len,), value, dtype=torch.float32)
    if not torch.isfinite(tensor).all():
        raise ValueError(f"Scorer {scorer.name!r} produced non-finite token rewards for interaction {turn_id!r}")
    return tensor


def _check_observation(
    scorer: BaseScorer,
    turn_id: str,
    observation: Any,
    seen: set[tuple[str, str, str]],
    schemas: dict[SchemaKey, Schema],
) -> None:
    if not isinstance(observation, PRMMetricObservation):
        raise TypeError(
            f"{type(scorer).__name__} observations must contain PRMMetricObservation values, got {observation!r}"
        )
    if observation.scope == "turn" and observation.target_id != turn_id:
        raise ValueError(
            f"Turn metric {observation.metric_id!r} of {scorer.name!r} targets {observation.target_id!r}, "
            f"expected {turn_id!r}"
        )
    key = (observation.scope, observation.target_id, observation.metric_id)
    if key in seen:
        raise ValueError(f"duplicate structured metric observation for scorer {scorer.name!r}: {key!r}")
    seen.add(key)
    schema = (observation.value_type, tuple(observation.aggregations))
    previous = schemas.setdefault((observation.scope, observation.metric_id), schema)
    if previous != schema:
        raise ValueError(
            f"inconsistent structured metric schema for scorer {scorer.name!r} metric "
            f"{(observation.scope, observation.metric_id)!r}: {previous} and {schema}"
        )
