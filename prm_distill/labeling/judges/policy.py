"""A judge = prompt + parse on top of one `generate.Policy`: the transport (batching, retries, endpoint
failover, health checks, vLLM engine settings) is the policy's, exactly as for rollouts.

`PolicyJudge` turns the labeler's requests into policy requests and streams the answers back: a
server policy (`OpenAIPolicy`) answers request by request, `concurrency` in flight, each delivered
the moment it arrives; a local policy answers in chunks (one `generate` call each, in a worker
thread so the event loop keeps going). Either way a stop request sends nothing new, delivers what
is in flight, then raises `Interrupted`; a policy that gives up raises `JudgeUnavailable`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from ...generate import GenRequest, Policy, PolicyUnavailable, load_policy
from ...generate.openai_backend import OpenAIPolicy
from ..config import JudgeConfig
from .base import Completion, Interrupted, JudgeUnavailable, Request

LOCAL_CHUNK = 1024  # requests per generate call of a policy that takes all at once (vLLM): answers reach the cache per chunk


def gen_request(req: Request) -> GenRequest:
    """The policy request of a judge request (same messages, seed, temperature and token budget)."""
    return GenRequest(tuple((m["role"], m["content"]) for m in req.prompt.messages), req.seed, req.temperature, req.max_tokens)


class PolicyJudge:
    """Streams a judge's requests through one policy; subclasses choose the prompt order and chunk."""

    def __init__(self, cfg: JudgeConfig, policy: Policy | None = None):
        self.name = cfg.name
        self.cfg = cfg
        try:
            self.policy: Policy = policy if policy is not None else load_policy(cfg.policy_config())
        except PolicyUnavailable as e:
            raise JudgeUnavailable(f"{self.describe()}: {e}") from None
        backend = self.policy.name.split(":")[0]
        self.chunk = cfg.batch_size if backend == "transformers" else LOCAL_CHUNK

    def describe(self) -> str:
        """How errors name this judge."""
        return f"judge {self.name}"

    def order_key(self, req: Request) -> Any:
        """Chunks of a local policy are cut from requests in this order (similar ones together)."""
        return (req.temperature, len(req.prompt.user))

    def run(self, reqs: list[Request]) -> list[Completion]:
        """One chunk through the policy (in a worker thread); latency is the chunk's, per request."""
        t0 = time.perf_counter()
        gens = self.policy.generate([gen_request(r) for r in reqs])
        latency = (time.perf_counter() - t0) / max(len(reqs), 1)
        return [Completion(g.text, g.tokens_in, g.tokens_out, latency) for g in gens]

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        if isinstance(self.policy, OpenAIPolicy):
            async with aclosing(self._each(self.policy, requests, stop)) as each:  # closed with this stream: no request left queued
                async for item in each:
                    yield item
            return
        order = sorted(range(len(requests)), key=lambda i: self.order_key(requests[i]))
        for start in range(0, len(order), self.chunk):
            if stop.is_set():
                raise Interrupted("stopped between batches")
            idx = order[start : start + self.chunk]
            try:
                comps = await asyncio.to_thread(self.run, [requests[i] for i in idx])
            except PolicyUnavailable as e:
                raise JudgeUnavailable(f"{self.describe()}: {e}") from None
            for i, c in zip(idx, comps):
                yield i, c

    async def _each(self, policy: OpenAIPolicy, requests: list[Request], stop: asyncio.Event) -> AsyncGenerator[tuple[int, Completion], None]:
        """Every request on the policy's `concurrency` threads, answers yielded as they come. A request
        takes one of `concurrency` slots until its answer has been consumed (cached by the job), so
        requests sent but not yet cached never exceed `concurrency`: what a SIGKILL can cost."""
        loop = asyncio.get_running_loop()
        cancel = threading.Event()  # set on stop or failure: queued requests are never sent, backoffs end
        slots = threading.Semaphore(policy.cfg.concurrency)

        def one(i: int) -> tuple[int, Completion]:
            while not slots.acquire(timeout=0.05):
                if cancel.is_set():
                    raise Interrupted("stop requested")
            t0 = time.perf_counter()
            try:
                g = policy.generate_one(gen_request(requests[i]), cancel)
            except PolicyUnavailable:
                cancel.set()  # before this worker takes the next request
                slots.release()
                raise
            except BaseException:
                slots.release()
                raise
            return i, Completion(g.text, g.tokens_in, g.tokens_out, time.perf_counter() - t0)

        futures = [loop.run_in_executor(policy.executor, one, i) for i in range(len(requests))]
        watcher = asyncio.ensure_future(stop.wait())
        watcher.add_done_callback(lambda _: cancel.set())
        interrupted = False
        try:
            for fut in asyncio.as_completed(futures):
                try:
                    item = await fut
                except Interrupted:
                    interrupted = True  # keep delivering the answers already in flight
                    continue
                except PolicyUnavailable as e:
                    raise JudgeUnavailable(f"{self.describe()}: {e}") from None
                yield item
                slots.release()  # the consumer has taken (and cached) this answer
        finally:
            cancel.set()
            watcher.cancel()
            await asyncio.gather(*futures, return_exceptions=True)
        if interrupted:
            raise Interrupted("stop requested")

    async def aclose(self) -> None:
        self.policy.close()
