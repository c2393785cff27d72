"""STAND-IN for AReaL's `InteractionWithTokenLogpReward` (see ../../../../README.md)."""

from __future__ import annotations

from typing import Any

import torch


class InteractionWithTokenLogpReward:
    """One turn; `to_tensor_dict()` is cached in `_cache` until a reward update clears it."""

    def __init__(
        self,
        model_response: Any = None,
        reward: float | None = None,
        parent: InteractionWithTokenLogpReward | None = None,
        chat_template_type: str = "hf",
        messages: list[dict] | None = None,
        output_message_list: list[dict] | None = None,
        input_data: Any = None,
    ) -> None:
        self.model_response = model_response
        self.reward = reward
        self.parent = parent
        self.chat_template_type = chat_template_type
        self.messages = messages if messages is not None else []
        self.output_message_list = output_message_list
        self.input_data = input_data
        self.token_rewards: torch.Tensor | None = None
        self._interaction_id: str | None = None
        self._cache: dict[str, torch.Tensor] | None = None

    @property
    def interaction_id(self) -> str | None:
        return self._interaction_id

    @interaction_id.setter
    def interaction_id(self, value: str) -> None:
        self._interaction_id = value

    def to_tensor_dict(self) -> dict[str, torch.Tensor]:
        """Prompt zeros then this turn's rewards, as `[1, seq]`; computed once, then served from `_cache`."""
        if self._cache is None:
            prompt = len(self.model_response.input_tokens)
            data = {"input_ids": torch.tensor([self.model_response.input_tokens + self.model_response.output_tokens])}
            if self.token_rewards is not None:
                data["token_rewards"] = torch.cat([torch.zeros(prompt), self.token_rewards]).unsqueeze(0)
            self._cache = data
        return self._cache
