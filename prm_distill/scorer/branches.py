"""Conversation trees as root-to-leaf branches, each scored on its own copies.

A turn shared by two branches must get an independent score in each (a later turn can change
what an earlier step is worth), so every branch is cloned before scoring and the caller's objects
are never modified.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from prm_distill.scorer.runner import PRMRunner

logger = logging.getLogger(__name__)
T = TypeVar("T")


def order_parents_first(interactions: Sequence[T]) -> list[T]:
    """Stable topological order by `parent` links, so a scorer always sees ancestors first."""
    remaining = list(interactions)
    ordered: list[T] = []
    while remaining:
        pending = {id(turn) for turn in remaining}
        ready = [turn for turn in remaining if id(turn.parent) not in pending]
        if not ready:
            raise ValueError("interaction parent links contain a cycle")
        ordered.extend(ready)
        done = {id(turn) for turn in ready}
        remaining = [turn for turn in remaining if id(turn) not in done]
    return ordered


def _chain(leaf: Any) -> list[Any]:
    chain, seen, node = [], set(), leaf
    while node is not None:
        if id(node) in seen:
            raise ValueError(f"interaction parent links contain a cycle at {leaf.interaction_id!r}")
        seen.add(id(node))
        chain.append(node)
        node = node.parent
    return chain[::-1]


def clone_branches(interactions: Sequence[Any]) -> dict[str, list[Any]]:
    """Copies of every root-to-leaf chain, keyed by leaf id, in input order.

    A leaf is an interaction that is no other's parent. Each branch gets its own shallow copies
    with re-linked parents and cloned `token_rewards`, so scoring one never reaches another.
    """
    parents = {id(turn.parent) for turn in interactions if turn.parent is not None}
    branches: dict[str, list[Any]] = {}
    for leaf in interactions:
        if id(leaf) in parents:
            continue
        if leaf.interaction_id in branches:
            raise ValueError(f"duplicate leaf interaction id {leaf.interaction_id!r}")
        clones: list[Any] = []
        for turn in _chain(leaf):
            clone = copy.copy(turn)
            clone.parent = clones[-1] if clones else None
            if turn.token_rewards is not None:
                clone.token_rewards = turn.token_rewards.detach().clone()
            clones.append(clone)
        branches[leaf.interaction_id] = clones
    return branches


async def score_branches(
    interactions: Sequence[Any], runner: PRMRunner, *, is_eval: bool = False
) -> dict[str, list[Any]]:
    """Score every branch of a conversation tree; returns the scored clones per leaf id.

    Branches are scored one after another with `ctx["messages"]` = the leaf's messages plus its
    output. Metrics are published only once every branch succeeded. On failure the error
    propagates (`error_policy: reject`), or, with `keep_original`, fresh unscored clones are
    returned; cancellation always propagates.
    """
    branches = clone_branches(interactions)
    scored = []
    try:
        for chain in branches.values():
            leaf = chain[-1]
            ctx = {"messages": [*leaf.messages, *leaf.output_message_list]}
            scored.append(await runner.run(chain, ctx, is_eval=is_eval, record_metrics=False))
    except Exception:
        if runner.config.error_policy != "keep_original":
            raise
        logger.warning("PRM scoring failed; keeping pre-scoring rewards (error_policy: keep_original)", exc_info=True)
        return clone_branches(interactions)
    for results in scored:
        runner.metrics.record_branch(results, is_eval=is_eval)
    return branches
