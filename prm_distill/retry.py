"""The one retry policy for HTTP: the judge client (labeling) and the PRM client (scoring) both use it.

Bounded retries with exponential backoff (jittered, so many clients do not retry in lock-step),
a Retry-After header honoured (it wins over the backoff), every delay capped. Which answers are
worth retrying is the caller's choice (`retry_statuses`): a judge retries 429 and 5xx; the PRM
client retries 503 (queue full, model loading). Connection failures are always retried.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

JUDGE_RETRY_STATUSES = frozenset({429, *range(500, 600)})
SCORE_RETRY_STATUSES = frozenset({503})


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

    def retries_status(self, status: int) -> bool:
        """True when an answer with this status is worth asking again."""
        return status in self.retry_statuses

    def delay(self, attempt: int, headers: Mapping[str, str] | None = None) -> float:
        """Seconds to wait before retry number `attempt + 1` (attempt counts from 0)."""
        after = retry_after_s(headers)
        if after is None:
            after = self.backoff_s * 2**attempt * (random.uniform(0.5, 1.0) if self.jitter else 1.0)
        return min(after, self.max_backoff_s)


__all__ = ["JUDGE_RETRY_STATUSES", "SCORE_RETRY_STATUSES", "RetryPolicy", "retry_after_s"]
