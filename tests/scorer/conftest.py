"""Shared fixtures for the scorer tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from prm_distill.scorer import Interaction, ModelResponse


def _make_turn(
    interaction_id: str,
    n_tokens: int = 3,
    *,
    parent: Interaction | None = None,
    messages: list[dict[str, Any]] | None = None,
    token_rewards: torch.Tensor | None = None,
) -> Interaction:
    return Interaction(
        interaction_id=interaction_id,
        parent=parent,
        messages=messages if messages is not None else [{"role": "user", "content": f"q-{interaction_id}"}],
        output_message_list=[{"role": "assistant", "content": f"a-{interaction_id}"}],
        model_response=ModelResponse(input_tokens=[1, 2], output_tokens=list(range(100, 100 + n_tokens))),
        reward=1.0,
        token_rewards=token_rewards,
    )


@pytest.fixture
def make_turn() -> Callable[..., Interaction]:
    """A turn with `n_tokens` output tokens and one user/assistant message pair."""
    return _make_turn
