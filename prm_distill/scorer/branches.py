"""Score a whole conversation tree: every root-to-leaf branch on its own copies.

A turn shared by two branches must get an independent score in each (a later turn can change
what an earlier step is worth), so every branch is cloned before scoring and the caller's objects
are never modified. `score_prm_branches` (in `export`) is the same with AReaL's signature.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm_distill.scorer.export import PRMExportStats, score_chain
from prm_distill.scorer.tree import clone_chain, leaves, order_parents_first

if TYPE_CHECKING:
    from prm_distill.scorer.runner import PRMRunner

logger = logging.getLogger(__name__)

__all__ = ["clone_branches", "order_parents_first", "score_branches"]


def clone_branches(interactions: Sequence[Any]) -> dict[str, list[Any]]:
    """Copies of every root-to-leaf chain, keyed by leaf id, in input order.

    A leaf is an interaction that is no other's parent. Each branch gets its own copies (see
    `tree.clone_turn`) with re-linked parents, so scoring one never reaches another.
    """
    branches: dict[str, list[Any]] = {}
    for leaf in leaves(interactions):
        if leaf.interaction_id in branches:
            raise ValueError(f"duplicate leaf interaction id {leaf.interaction_id!r}")
        branches[leaf.interaction_id] = clone_chain(leaf)
    return branches


async def score_branches(
    interactions: Sequence[Any], runner: PRMRunner, *, is_eval: bool = False
) -> dict[str, list[Any]]:
    """Score every branch of a conversation tree; returns the scored clones per leaf id.

    Branches are scored one after another with `ctx["messages"]` = the leaf's messages plus its
    output. Metrics (turn and trajectory rewards, observations) are published into
    `runner.metrics` only once every branch succeeded. On failure the error propagates
    (`error_policy: reject`), or, with `keep_original`, fresh unscored clones are returned;
    cancellation always propagates.
    """
    branches = clone_branches(interactions)
    stats = PRMExportStats()
    try:
        for chain in branches.values():
            stats.extend(await score_chain(chain, runner, is_eval=is_eval))
    except Exception:
        if runner.config.error_policy != "keep_original":
            raise
        logger.warning("PRM scoring failed; keeping pre-scoring rewards (error_policy: keep_original)", exc_info=True)
        return clone_branches(interactions)
    stats.record(is_eval=is_eval, metrics=runner.metrics)
    return branches
