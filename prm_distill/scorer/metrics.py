"""PRM metrics with AReaL's names and reductions, kept per worker and mergeable across workers.

A mean (turn and trajectory rewards, `mean` and `rate` observations) is published with its
sample count as `<key>__count`, like AReaL's `stats_tracker` scalars, so a consumer merging
workers weights each worker's mean by what it saw; counts, sums and `observed_count` add.
Reward keys keep the scorer name as written (AReaL does the same); observation path segments
are URL-quoted so a user-defined id stays one path level. When AReaL's `stats_tracker` is
importable, every record is also published there, so AReaL's loggers see our runner's metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from prm_distill.scorer.contract import PRMMetricObservation, PRMTurnResult

StatKind = Literal["mean", "sum"]
COUNT_SUFFIX = "__count"
_MEAN_AGGREGATIONS = frozenset({"mean", "rate"})


def metric_segment(value: str) -> str:
    """URL-quote a user-defined id so it stays one path level of the metric key."""
    return quote(value, safe="-_.:")


def metric_namespace(is_eval: bool) -> str:
    return "eval-rollout" if is_eval else "rollout"


@functools.cache
def _areal_stats_tracker() -> Any:
    """AReaL's `stats_tracker` module, or None; looked up once per process."""
    try:
        from areal.utils import stats_tracker  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - absent, or an AReaL that fails to import: metrics stay local
        return None
    return stats_tracker


@dataclass
class _Stat:
    kind: StatKind
    total: float = 0.0
    count: int = 0


class PRMMetrics:
    """Scorer metrics of one worker: `prm_turn_reward`, `prm_trajectory_reward`, `prm_metric`."""

    def __init__(self) -> None:
        self._stats: dict[str, _Stat] = {}

    def record_turns(self, results: Iterable[PRMTurnResult], *, is_eval: bool = False) -> None:
        """Turn rewards (weighted) and observations (unweighted) of committed results."""
        namespace = metric_namespace(is_eval)
        for result in results:
            self._add(f"{namespace}/prm_turn_reward/{result.scorer_name}", "mean", result.reward, 1)
            for observation in result.observations:
                self._record_observation(namespace, result.scorer_name, observation)

    def record_trajectory_rewards(self, totals: Iterable[tuple[str, float]], *, is_eval: bool = False) -> None:
        """One `(scorer name, sum of its turn rewards)` per scored branch."""
        namespace = metric_namespace(is_eval)
        for scorer_name, total in totals:
            self._add(f"{namespace}/prm_trajectory_reward/{scorer_name}", "mean", total, 1)

    def _record_observation(self, namespace: str, scorer_name: str, observation: PRMMetricObservation) -> None:
        base = "/".join(
            (
                namespace,
                "prm_metric",
                observation.scope,
                metric_segment(scorer_name),
                metric_segment(observation.metric_id),
            )
        )
        self._add(f"{base}/observed_count", "sum", 1.0, 1)
        for aggregation in observation.aggregations:
            kind: StatKind = "mean" if aggregation in _MEAN_AGGREGATIONS else "sum"
            self._add(f"{base}/{aggregation}", kind, float(observation.value), 1)

    def _add(self, key: str, kind: StatKind, total: float, count: int) -> None:
        stat = self._stats.setdefault(key, _Stat(kind))
        if stat.kind != kind:
            raise ValueError(f"metric {key!r} is a {stat.kind}, cannot add a {kind}")
        stat.total += total
        stat.count += count

    def merge(self, other: PRMMetrics) -> None:
        """Add another worker's metrics into these (means weighted by their counts)."""
        for key, stat in other._stats.items():
            self._add(key, stat.kind, stat.total, stat.count)

    def summary(self) -> dict[str, float]:
        """Flat `{key: value}`: means with their `__count`, counts and sums as totals."""
        flat: dict[str, float] = {}
        for key, stat in sorted(self._stats.items()):
            if stat.kind == "mean":
                flat[key] = stat.total / stat.count
                flat[key + COUNT_SUFFIX] = stat.count
            else:
                flat[key] = stat.total
        return flat

    @classmethod
    def from_summary(cls, summary: Mapping[str, float]) -> PRMMetrics:
        """Rebuild a worker's metrics from its `summary()` (e.g. sent as JSON), to merge them."""
        metrics = cls()
        for key, value in summary.items():
            if key.endswith(COUNT_SUFFIX):
                if key.removesuffix(COUNT_SUFFIX) not in summary:
                    raise ValueError(f"{key!r} has no mean {key.removesuffix(COUNT_SUFFIX)!r} beside it")
                continue
            count = summary.get(key + COUNT_SUFFIX)
            if count is None:
                metrics._add(key, "sum", float(value), 0)
            else:
                metrics._add(key, "mean", float(value) * int(count), int(count))
        return metrics


_PROCESS_METRICS = PRMMetrics()


def process_metrics() -> PRMMetrics:
    """The process-wide sink of `record_prm_results` calls that name no `metrics` (AReaL's global tracker)."""
    return _PROCESS_METRICS


def record_prm_results(
    results: Iterable[PRMTurnResult], *, is_eval: bool = False, metrics: PRMMetrics | None = None
) -> None:
    """Publish committed turn results: into `metrics` (default: `process_metrics()`), and AReaL's tracker.

    Call it only once the unit the results belong to (a branch, a session) has succeeded, so a
    rejected trajectory never leaves half of its metrics behind.
    """
    results = list(results)
    (process_metrics() if metrics is None else metrics).record_turns(results, is_eval=is_eval)
    tracker_module = _areal_stats_tracker()
    if tracker_module is not None:
        _publish_to_areal(tracker_module, results, [], is_eval=is_eval)


def record_trajectory_rewards(
    totals: Iterable[tuple[str, float]], *, is_eval: bool = False, metrics: PRMMetrics | None = None
) -> None:
    """Publish per-branch scorer totals, as AReaL's branch export does."""
    totals = list(totals)
    (process_metrics() if metrics is None else metrics).record_trajectory_rewards(totals, is_eval=is_eval)
    tracker_module = _areal_stats_tracker()
    if tracker_module is not None:
        _publish_to_areal(tracker_module, [], totals, is_eval=is_eval)


def _publish_to_areal(
    tracker_module: Any, results: list[PRMTurnResult], totals: list[tuple[str, float]], *, is_eval: bool
) -> None:
    """The same tracker calls AReaL's recorders make, so its reductions and `__count` keys apply."""
    import torch

    tracker = tracker_module.get(metric_namespace(is_eval))
    for result in results:
        tracker.scalar(**{f"prm_turn_reward/{result.scorer_name}": result.reward})
        for observation in result.observations:
            base = "/".join(
                (
                    "prm_metric",
                    observation.scope,
                    metric_segment(result.scorer_name),
                    metric_segment(observation.metric_id),
                )
            )
            denominator = f"{base}/observed_count"
            tracker.denominator(**{denominator: torch.ones(1, dtype=torch.bool)})
            value = torch.tensor([float(observation.value)], dtype=torch.float32)
            for aggregation in observation.aggregations:
                if aggregation in _MEAN_AGGREGATIONS:
                    tracker.scalar(**{f"{base}/{aggregation}": float(observation.value)})
                else:
                    tracker.stat(denominator, tracker_module.ReduceType.SUM, **{f"{base}/{aggregation}": value})
    for scorer_name, total in totals:
        tracker.scalar(**{f"prm_trajectory_reward/{scorer_name}": total})
