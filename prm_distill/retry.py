"""The one retry policy for HTTP: the policy/judge client (generation) and the PRM client (scoring).

Bounded retries with exponential backoff (optionally jittered, so many clients do not retry in
lock-step), a Retry-After header honoured (it wins over the backoff), every delay capped; tenacity
runs the loop. Which answers are worth retrying is the caller's choice (`retry_statuses`): a
generation server retries 429 and 5xx; the PRM client retries 503 (queue full, model loading).

A caller writes one attempt that raises `Retryable` for a failure worth another try (a connection
error, a retried status, a malformed body) and anything else for a final one; `call` / `acall`
run it and, when the retries are spent, re-raise the last `Retryable` for the caller to word.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity

JUDGE_RETRY_STATUSES = frozenset({429, *range(500, 600)})
SCORE_RETRY_STATUSES = frozenset({503})
T = TypeVar("T")


class Retryable(Exception):
    """One attempt failed in a way that another attempt may fix; `headers` may carry Retry-After,
    `payload` what the caller needs to word the final error (e.g. the last HTTP response)."""

    def __init__(self, reason: str, headers: Mapping[str, str] | None = None, payload: Any = None) -> None:
        super().__init__(reason)
        self.headers = headers
        self.payload = payload


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from a Retry-After header (the delta-seconds form), or None."""
    try:
        value = float((headers or {}).get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 60.0
    retry_statuses: frozenset[int] = JUDGE_RETRY_STATUSES
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("RetryPolicy: max_retries, backoff_s and max_backoff_s must be >= 0")

    @property
    def attempts(self) -> int:
        """Most attempts of one request (the first one and its retries)."""
        return self.max_retries + 1

    def retries_status(self, status: int) -> bool:
        """True when an answer with this status is worth asking again."""
        return status in self.retry_statuses

    def delay(self, attempt: int, headers: Mapping[str, str] | None = None) -> float:
        """Seconds to wait before retry number `attempt + 1` (attempt counts from 0)."""
        after = retry_after_s(headers)
        if after is None:
            after = self.backoff_s * 2**attempt * (random.uniform(0.5, 1.0) if self.jitter else 1.0)
        return min(after, self.max_backoff_s)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        return self.delay(state.attempt_number - 1, getattr(error, "headers", None))

    def _options(self) -> dict[str, Any]:
        return {"stop": tenacity.stop_after_attempt(self.attempts), "wait": self._wait,
                "retry": tenacity.retry_if_exception_type(Retryable), "reraise": True}

    def call(self, attempt: Callable[[], T], cancel: threading.Event | None = None) -> T:
        """`attempt()` until it returns or raises something other than `Retryable`; the last
        `Retryable` is re-raised once the retries are spent. A set `cancel` cuts a backoff short
        (the attempt that follows is expected to check it and give up)."""
        def sleep(seconds: float) -> None:
            if cancel is None:
                time.sleep(seconds)
            else:
                cancel.wait(seconds)

        return tenacity.Retrying(sleep=sleep, **self._options())(attempt)

    async def acall(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`call` for a coroutine attempt (the backoff is an asyncio sleep)."""
        return await tenacity.AsyncRetrying(**self._options())(attempt)


__all__ = ["JUDGE_RETRY_STATUSES", "SCORE_RETRY_STATUSES", "RetryPolicy", "Retryable", "retry_after_s"]
