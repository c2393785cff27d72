"""PRM metrics, accumulated per worker and merged across workers without averaging averages.

Every key keeps a running total and an observation count, so a mean or rate merged from several
workers is weighted by how much each one saw, while counts and sums simply add.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from prm_distill.scorer.contract import PRMMetricObservation, PRMTurnResult

StatKind = Literal["mean", "sum"]
_MEAN_AGGREGATIONS = frozenset({"mean", "rate"})


def metric_segment(value: str) -> str:
    """URL-quote a user-defined id so it stays one path level of the metric key."""
    return quote(value, safe="-_.:")


def metric_namespace(is_eval: bool) -> str:
    return "eval-rollout" if is_eval else "rollout"


@dataclass
class _Stat:
    kind: StatKind
    total: float = 0.0
    count: int = 0


class PRMMetrics:
    """Scorer metrics of one worker: `prm_turn_reward`, `prm_trajectory_reward`, `prm_metric`."""

    def __init__(self) -> None:
        self._stats: dict[str, _Stat] = {}

    def record_branch(self, results: Iterable[PRMTurnResult], *, is_eval: bool = False) -> None:
        """Record one successfully scored branch: turn rewards, its per-scorer total, observations."""
        namespace = metric_namespace(is_eval)
        branch_totals: dict[str, float] = {}
        for result in results:
            scorer = metric_segment(result.scorer_name)
            self._add(f"{namespace}/prm_turn_reward/{scorer}", "mean", result.reward, 1)
            branch_totals[scorer] = branch_totals.get(scorer, 0.0) + result.reward
            for observation in result.observations:
                self._record_observation(namespace, scorer, observation)
        for scorer, total in branch_totals.items():
            self._add(f"{namespace}/prm_trajectory_reward/{scorer}", "mean", total, 1)

    def _record_observation(self, namespace: str, scorer: str, observation: PRMMetricObservation) -> None:
        base = f"{namespace}/prm_metric/{observation.scope}/{scorer}/{metric_segment(observation.metric_id)}"
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
        """Add another worker's metrics into these."""
        for key, stat in other._stats.items():
            self._add(key, stat.kind, stat.total, stat.count)

    def summary(self) -> dict[str, float]:
        """Flat `{key: value}`: means and rates divided by their counts, counts and sums as totals."""
        return {
            key: stat.total / stat.count if stat.kind == "mean" else stat.total
            for key, stat in sorted(self._stats.items())
        }

    def export(self) -> dict[str, dict[str, Any]]:
        """A JSON-ready form that keeps the counts, so another process can merge it."""
        return {key: {"kind": s.kind, "total": s.total, "count": s.count} for key, s in self._stats.items()}

    @classmethod
    def from_export(cls, data: Mapping[str, Mapping[str, Any]]) -> PRMMetrics:
        metrics = cls()
        for key, stat in data.items():
            if stat["kind"] not in ("mean", "sum"):
                raise ValueError(f"metric {key!r} has unknown kind {stat['kind']!r}")
            metrics._add(key, stat["kind"], float(stat["total"]), int(stat["count"]))
        return metrics
