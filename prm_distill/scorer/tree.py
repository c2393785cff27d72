"""Conversation trees: parent-first order, root-to-leaf chains and isolated chain copies.

The runner (trajectory scorers see parents first) and branch scoring (each branch on its own
copies) both need these, so they live below both and neither imports the other.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def order_parents_first(interactions: Sequence[T]) -> list[T]:
    """Stable topological order by `parent` links, so a scorer always sees ancestors first."""
    remaining = list(interactions)
    ordered: list[T] = []
    while remaining:
        pending = {id(turn) for turn in remaining}
        ready = [turn for turn in remaining if id(turn.parent) not in pending]  # type: ignore[attr-defined]
        if not ready:
            raise ValueError("Interaction parent links contain a cycle")
        ordered.extend(ready)
        done = {id(turn) for turn in ready}
        remaining = [turn for turn in remaining if id(turn) not in done]
    return ordered


def chain_to_root(leaf: Any) -> list[Any]:
    """The turns from the root down to `leaf`; refuses cycles and repeated or missing ids."""
    chain: list[Any] = []
    seen_objects: set[int] = set()
    seen_ids: set[str] = set()
    node = leaf
    while node is not None:
        if id(node) in seen_objects:
            raise ValueError(f"Interaction parent chain contains a cycle at {leaf.interaction_id!r}")
        seen_objects.add(id(node))
        turn_id = node.interaction_id
        if turn_id is None:
            raise ValueError("Interaction parent chain contains an ID-less turn")
        if turn_id in seen_ids:
            raise ValueError(f"Interaction parent chain contains duplicate ID {turn_id!r}")
        seen_ids.add(turn_id)
        chain.append(node)
        node = node.parent
    return chain[::-1]


def clone_turn(turn: Any, parent: Any) -> Any:
    """A copy of one turn that scoring may change without reaching the original.

    Shallow copy (the model response stays shared and read-only), relinked to `parent`, with its
    own `token_rewards`, deep-copied messages (scorers must not edit another branch's history)
    and, for AReaL interactions, a cleared tensor cache so later rewards reach `to_tensor_dict()`.
    """
    clone = copy.copy(turn)
    clone.parent = parent
    for name in ("messages", "output_message_list", "input_data"):
        if hasattr(turn, name):
            setattr(clone, name, copy.deepcopy(getattr(turn, name)))
    if hasattr(turn, "_cache"):
        clone._cache = None
    if turn.token_rewards is not None:
        clone.token_rewards = turn.token_rewards.detach().clone()
    return clone


def clone_chain(leaf: Any) -> list[Any]:
    """Isolated copies of the root-to-leaf chain of `leaf`, root first, parents relinked."""
    clones: list[Any] = []
    for turn in chain_to_root(leaf):
        clones.append(clone_turn(turn, clones[-1] if clones else None))
    return clones


def leaves(interactions: Sequence[Any]) -> list[Any]:
    """The interactions that are no other's parent, in input order."""
    parents = {id(turn.parent) for turn in interactions if turn.parent is not None}
    return [turn for turn in interactions if id(turn) not in parents]
