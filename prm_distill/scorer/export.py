"""Branch-isolated scoring of exported leaves, with AReaL's `score_prm_branches` signature.

Every root-to-leaf branch is cloned and scored on its own (a later turn can change what an
earlier step is worth); the caller's objects are never modified. Statistics come back unpublished,
so the caller records them only once the whole session succeeded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prm_distill.scorer.contract import PRMTurnResult
from prm_distill.scorer.metrics import PRMMetrics, record_prm_results, record_trajectory_rewards
from prm_distill.scorer.tree import clone_chain

if TYPE_CHECKING:
    from prm_distill.scorer.runner import PRMRunner


@dataclass
class PRMExportStats:
    """Committed turn results and per-branch scorer totals of scored branches, not yet published.

    Shared ancestors count once per branch they were scored in. `trajectory_rewards` holds one
    `(scorer name, sum of its turn rewards)` per branch and scorer: the only source of the
    `prm_trajectory_reward/<scorer>` metric.
    """

    turns: list[PRMTurnResult] = field(default_factory=list)
    trajectory_rewards: list[tuple[str, float]] = field(default_factory=list)

    def extend(self, other: PRMExportStats) -> None:
        self.turns.extend(other.turns)
        self.trajectory_rewards.extend(other.trajectory_rewards)

    def record(self, *, is_eval: bool, metrics: PRMMetrics | None = None) -> None:
        """Publish into `metrics` (default: the process-wide sink) and AReaL's tracker when present."""
        record_prm_results(self.turns, is_eval=is_eval, metrics=metrics)
        record_trajectory_rewards(self.trajectory_rewards, is_eval=is_eval, metrics=metrics)


async def score_chain(chain: list[Any], runner: PRMRunner, *, is_eval: bool) -> PRMExportStats:
    """Score one cloned root-to-leaf chain with `ctx["messages"]` = the leaf's whole conversation."""
    leaf = chain[-1]
    messages = [*(leaf.messages or []), *(leaf.output_message_list or [])]
    cache = {turn.interaction_id: turn for turn in chain}
    results = await runner.run(cache, {"messages": messages}, is_eval=is_eval, record_metrics=False)
    totals: dict[str, float] = {}
    for result in results:
        totals[result.scorer_name] = totals.get(result.scorer_name, 0.0) + result.reward
    return PRMExportStats(turns=list(results), trajectory_rewards=list(totals.items()))


async def score_prm_branches(
    interactions: Mapping[str, Any], runner: PRMRunner, *, session_id: str, is_eval: bool
) -> tuple[dict[str, Any], PRMExportStats]:
    """Score the branch of every exported leaf (`{leaf id: leaf}`); returns the scored leaf clones and stats.

    As AReaL's export: inputs are never modified, and nothing is published. Any failure
    propagates; the caller applies its error policy and records `stats` only on success.
    """
    scored: dict[str, Any] = {}
    stats = PRMExportStats()
    for leaf_id, leaf in interactions.items():
        chain = clone_chain(leaf)
        if chain[-1].interaction_id != leaf_id:
            raise ValueError(
                f"PRM exported leaf ID mismatch in session {session_id!r}: mapping key {leaf_id!r}, "
                f"interaction ID {chain[-1].interaction_id!r}"
            )
        stats.extend(await score_chain(chain, runner, is_eval=is_eval))
        scored[leaf_id] = chain[-1]
    return scored, stats
