"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, hosted APIs), asynchronously.

Bounded concurrency, a per-request timeout, and retries (the package's one `retry.RetryPolicy`)
on 429, 5xx, timeouts and connection errors; other 4xx answers (a wrong model name, a bad key) are not retried,
since asking again cannot fix them. The API key comes from an environment variable and is only
ever placed in the Authorization header: never in messages, logs or outputs.

Several comma-separated base URLs are used round robin (`generate.EndpointPool`): the ones that
fail a health check (GET /models) at start are skipped, and one that fails mid-job is rested for a
while and its requests retried on the others.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping

from ...generate import EndpointPool
from ...retry import JUDGE_RETRY_STATUSES, RetryPolicy
from ..config import JudgeConfig
from .base import Completion, Interrupted, JudgeUnavailable, Request


class _Retryable(Exception):
    def __init__(self, reason: str, headers: Mapping[str, str] | None = None):
        super().__init__(reason)
        self.headers = headers


class OpenAIJudge:
    def __init__(self, cfg: JudgeConfig):
        import httpx

        self.name = cfg.name
        self.cfg = cfg
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.pool = EndpointPool.parse(cfg.base_url)
        if len(self.pool.urls) > 1:
            self._health_check(headers)
        self.client = httpx.AsyncClient(headers=headers, timeout=cfg.timeout_s)
        self.sem = asyncio.Semaphore(cfg.concurrency)
        self.sent = 0  # HTTP requests sent (retries included)
        self.retry = RetryPolicy(max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, max_backoff_s=60.0,
                                 retry_statuses=JUDGE_RETRY_STATUSES, jitter=False)

    def _health_check(self, headers: dict[str, str]) -> None:
        """Skip endpoints that do not answer GET /models; none answering is an error before any work."""
        import httpx

        for url in self.pool.urls:
            try:
                httpx.get(f"{url}/models", headers=headers, timeout=min(self.cfg.timeout_s, 10.0)).raise_for_status()
            except httpx.HTTPError:
                self.pool.mark_down(url)
        if len(self.pool.down_since) == len(self.pool.urls):
            raise JudgeUnavailable(f"judge {self.name}: no endpoint answered GET /models ({self.cfg.base_url})")

    async def _once(self, body: dict) -> Completion:
        import httpx

        t0 = time.perf_counter()
        url = self.pool.pick()
        try:
            self.sent += 1
            r = await self.client.post(f"{url}/chat/completions", json=body)
        except httpx.TimeoutException:
            self.pool.mark_down(url)
            raise _Retryable(f"no answer within {self.cfg.timeout_s:g} s from {url}") from None
        except httpx.TransportError as e:
            self.pool.mark_down(url)
            raise _Retryable(f"connection error at {url} ({type(e).__name__}: {e})") from None
        if self.retry.retries_status(r.status_code):
            self.pool.mark_down(url)
            raise _Retryable(f"HTTP {r.status_code} from {url}", r.headers)
        if r.status_code != 200:
            raise JudgeUnavailable(f"judge {self.name} at {self.cfg.base_url}: HTTP {r.status_code} (not retried): {r.text[:300]}")
        self.pool.mark_up(url)
        try:
            data = r.json()
            text = data["choices"][0]["message"]["content"] or ""
            usage = data.get("usage") or {}
            return Completion(str(text), int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)), time.perf_counter() - t0)
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Retryable(f"malformed response body: {r.text[:120]!r}") from None

    async def complete(self, req: Request, stop: asyncio.Event) -> Completion:
        body = {"model": self.cfg.model, "messages": req.prompt.messages, "n": 1, **req.sampling()}
        reason = ""
        for attempt in range(self.cfg.max_retries + 1):
            async with self.sem:
                if stop.is_set():
                    raise Interrupted("stop requested")
                try:
                    return await self._once(body)
                except _Retryable as e:
                    reason, headers = str(e), e.headers
            if attempt < self.cfg.max_retries:
                await asyncio.sleep(self.retry.delay(attempt, headers))
        raise JudgeUnavailable(f"judge {self.name} at {self.cfg.base_url} failed after {self.cfg.max_retries + 1} attempts: {reason}")

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        async def one(i: int) -> tuple[int, Completion]:
            return i, await self.complete(requests[i], stop)

        tasks = [asyncio.create_task(one(i)) for i in range(len(requests))]
        interrupted = False
        try:
            for fut in asyncio.as_completed(tasks):
                try:
                    yield await fut
                except Interrupted:
                    interrupted = True  # keep delivering the answers already in flight
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if interrupted:
            raise Interrupted("stop requested")

    async def aclose(self) -> None:
        await self.client.aclose()
