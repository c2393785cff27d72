"""What every policy backend shares: one request, one generation, the `Policy` interface, its errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..exits import Interrupted, Unavailable


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


@dataclass
class Watch:
    """What a long caller (rollout) hands a backend's `generate(requests, watch=...)` to see progress
    and stop early; every callback is optional and is called from the thread that runs `generate`.

    A call of minutes (16 samples x 512 tokens on a CPU) otherwise shows nothing until it returns
    and can only be stopped by losing all of it."""

    on_sample: Callable[[int, Generation], None] | None = None  # request index, its generation: as each finishes
    on_tokens: Callable[[int], None] | None = None  # tokens generated since the last call (backends that see them)
    should_stop: Callable[[], bool] | None = None  # polled between tokens (transformers) or between requests (openai)

    def sample(self, index: int, gen: Generation) -> None:
        if self.on_sample is not None:
            self.on_sample(index, gen)

    def tokens(self, n: int) -> None:
        if self.on_tokens is not None and n:
            self.on_tokens(n)

    def stop(self) -> bool:
        return self.should_stop is not None and bool(self.should_stop())


class GenerationStopped(Interrupted):
    """`generate` ended early because `watch.should_stop()` said so; every finished sample was
    reported through `watch.on_sample` first (the unfinished ones are dropped, not truncated)."""


class Policy(Protocol):
    name: str  # "<backend>:<policy>", written as metadata.generator
    version: str

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        """One generation per request, in order. Raises PolicyUnavailable when a server gives up."""
        ...

    def close(self) -> None: ...
