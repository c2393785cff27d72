"""What every policy backend shares: one request, one generation, the `Policy` interface, its errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..exits import Unavailable


class PolicyError(ValueError):
    """The policy cannot be used (not found, not a causal LM, no chat template, unknown backend)."""


class PolicyUnavailable(Unavailable):
    """A policy server did not answer after bounded retries on every endpoint; finished work is kept."""


@dataclass(frozen=True)
class GenRequest:
    """One sample: chat messages (a final assistant message is a prefix to continue) and its sampling."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs: hashable, so requests can be cache keys
    seed: int
    temperature: float
    max_new_tokens: int

    @property
    def chat(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    @property
    def prefix(self) -> str | None:
        """The assistant text to continue, or None for a fresh answer."""
        return self.messages[-1][1] if self.messages and self.messages[-1][0] == "assistant" else None


@dataclass(frozen=True)
class Generation:
    text: str  # the new text only (never the prefix)
    tokens_in: int
    tokens_out: int
    finish_reason: str  # "stop" (end of sequence) or "length" (max_new_tokens reached)


class Policy(Protocol):
    name: str  # "<backend>:<policy>", written as metadata.generator
    version: str

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        """One generation per request, in order. Raises PolicyUnavailable when a server gives up."""
        ...

    def close(self) -> None: ...
