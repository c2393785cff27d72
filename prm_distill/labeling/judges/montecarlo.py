"""The Monte-Carlo "judge": completes step prefixes with the policy (any backend of `generate`).

It answers requests like the LLM judges (so the response cache, resume and progress work the same),
but its answer is the policy's continuation, not a verdict: the labeler checks that continuation
against the gold answer (see ..montecarlo). The judge itself never sees the answer key.
"""

from __future__ import annotations

from typing import Any

from .base import Request
from .policy import PolicyJudge


class MonteCarloJudge(PolicyJudge):
    """Completions of step prefixes from `judge.policy` on `judge.policy_backend`."""

    def describe(self) -> str:
        return f"Monte-Carlo policy {self.cfg.policy!r}"

    def order_key(self, req: Request) -> Any:
        # same prefix together: the transformers backend pads less, vLLM shares the prefix cache
        return (req.temperature, req.prompt.messages[-1]["content"])
