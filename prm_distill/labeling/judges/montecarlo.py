"""The Monte-Carlo "judge": completes step prefixes with the policy (any backend of `generate`).

It answers requests like the LLM judges (so the response cache, resume and progress work the same),
but its answer is the policy's continuation, not a verdict: the labeler checks that continuation
against the gold answer (see ..montecarlo). The judge itself never sees the answer key.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from ...generate import GenRequest, PolicyConfig, PolicyUnavailable, load_policy
from ..config import JudgeConfig
from .base import Completion, Interrupted, JudgeUnavailable, Request


def policy_config(cfg: JudgeConfig) -> PolicyConfig:
    return PolicyConfig(policy=cfg.policy, backend=cfg.policy_backend, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
                        device=cfg.device, batch_size=cfg.batch_size, concurrency=cfg.concurrency, timeout_s=cfg.timeout_s,
                        max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, instruction=cfg.instruction,
                        vllm=dict(cfg.vllm))


class MonteCarloJudge:
    """Sends requests to the policy in chunks (one generate call each) so answers reach the cache as
    they come and a stop request is honoured between chunks."""

    def __init__(self, cfg: JudgeConfig):
        self.name = cfg.name
        self.cfg = cfg
        self.policy = load_policy(policy_config(cfg))
        # a chunk is answered (and cached) as a whole: for a server at most `concurrency` answers are in flight, as with the LLM judges
        self.chunk = {"transformers": cfg.batch_size, "openai": cfg.concurrency}.get(self.policy.name.split(":")[0], 1024)

    def _run(self, reqs: list[Request]) -> list[Completion]:
        t0 = time.perf_counter()
        gens = self.policy.generate([GenRequest(tuple((m["role"], m["content"]) for m in r.prompt.messages), r.seed, r.temperature, r.max_tokens)
                                     for r in reqs])
        latency = (time.perf_counter() - t0) / max(len(reqs), 1)
        return [Completion(g.text, g.tokens_in, g.tokens_out, latency) for g in gens]

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        # same prefix together: the transformers backend pads less, vLLM shares the prefix cache
        order = sorted(range(len(requests)), key=lambda i: (requests[i].temperature, requests[i].prompt.messages[-1]["content"]))
        for start in range(0, len(order), self.chunk):
            if stop.is_set():
                raise Interrupted("stopped between batches")
            idx = order[start : start + self.chunk]
            try:
                comps = await asyncio.to_thread(self._run, [requests[i] for i in idx])
            except PolicyUnavailable as e:
                raise JudgeUnavailable(f"Monte-Carlo policy {self.cfg.policy!r}: {e}") from None
            for i, c in zip(idx, comps):
                yield i, c

    async def aclose(self) -> None:
        self.policy.close()
