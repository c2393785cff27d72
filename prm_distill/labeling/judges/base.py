"""The one interface every LLM judge backend implements: requests in, completions streamed out.

A stream (rather than one batch call) lets the job cache each answer the moment it arrives, so a
killed job loses at most the requests in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Protocol

from ...exits import Interrupted, Unavailable
from ..prompts import Prompt

__all__ = ["Completion", "Interrupted", "Judge", "JudgeUnavailable", "Request"]


class JudgeUnavailable(Unavailable):
    """The judge could not answer after bounded retries; the job stops, keeping completed work."""


@dataclass(frozen=True)
class Request:
    """One sampled answer: a prompt with its sampling parameters (the seed makes each vote distinct)."""

    prompt: Prompt
    seed: int
    temperature: float
    max_tokens: int

    def sampling(self) -> dict[str, float | int]:
        return {"seed": self.seed, "temperature": self.temperature, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int
    latency_s: float


class Judge(Protocol):
    name: str

    def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        """Yield (index into requests, completion) in any order. Raise JudgeUnavailable when the judge
        fails; once `stop` is set, send nothing new, deliver what is in flight, then raise Interrupted."""
        ...

    async def aclose(self) -> None: ...
