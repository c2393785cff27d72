"""STAND-IN for AReaL's `InteractionCache` (see ../../../../README.md)."""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch


class InteractionCache(OrderedDict):
    """Interaction id -> interaction; `set_token_rewards` clears the cached tensor dicts it affects."""

    def __init__(self, *args, session_id: str = "unknown", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._session_id = session_id

    @classmethod
    def from_dict(cls, items: dict, *, session_id: str = "unknown") -> InteractionCache:
        cache = cls(session_id=session_id)
        for key, value in items.items():
            OrderedDict.__setitem__(cache, key, value)
        return cache

    @classmethod
    def clone_chain(cls, leaf, *, session_id: str = "unknown"):
        chain = []
        node = leaf
        while node is not None:
            chain.append(node)
            node = node.parent
        cache, parent = cls(session_id=session_id), None
        for source in reversed(chain):
            clone = copy.copy(source)
            clone.parent, clone._cache = parent, None
            clone.messages = copy.deepcopy(source.messages)
            clone.output_message_list = copy.deepcopy(source.output_message_list)
            if source.token_rewards is not None:
                clone.token_rewards = source.token_rewards.detach().clone()
            OrderedDict.__setitem__(cache, source.interaction_id, clone)
            parent = clone
        return cache, parent

    def set_token_rewards(self, interaction_id: str, token_rewards: torch.Tensor) -> None:
        interaction = self[interaction_id]
        rewards = token_rewards.detach().to(device="cpu", dtype=torch.float32)
        if rewards.shape != (interaction.model_response.output_len,) or not torch.isfinite(rewards).all():
            raise ValueError("token_rewards must be a finite [output_len] tensor")
        interaction.token_rewards = rewards.clone()
        stale = {id(interaction)}
        for candidate in self.values():  # parents come first in a cache built from a chain
            if id(candidate) in stale or id(candidate.parent) in stale:
                stale.add(id(candidate))
                candidate._cache = None
