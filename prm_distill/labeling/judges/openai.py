"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, hosted APIs), asynchronously.

Bounded concurrency, a per-request timeout, and retries with exponential backoff on 429, 5xx,
timeouts and connection errors; other 4xx answers (a wrong model name, a bad key) are not retried,
since asking again cannot fix them. The API key comes from an environment variable and is only
ever placed in the Authorization header: never in messages, logs or outputs.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import AsyncIterator

from ..config import JudgeConfig
from .base import Completion, Interrupted, JudgeUnavailable, Request


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.retry_after = retry_after


def _retry_after(headers) -> float | None:
    try:
        return min(float(headers.get("retry-after", "")), 60.0)
    except ValueError:
        return None


class OpenAIJudge:
    def __init__(self, cfg: JudgeConfig):
        import httpx

        self.name = cfg.name
        self.cfg = cfg
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.AsyncClient(base_url=cfg.base_url.rstrip("/"), headers=headers, timeout=cfg.timeout_s)
        self.sem = asyncio.Semaphore(cfg.concurrency)
        self.sent = 0  # HTTP requests sent (retries included)

    async def _once(self, body: dict) -> Completion:
        import httpx

        t0 = time.perf_counter()
        try:
            self.sent += 1
            r = await self.client.post("/chat/completions", json=body)
        except httpx.TimeoutException:
            raise _Retryable(f"no answer within {self.cfg.timeout_s:g} s") from None
        except httpx.TransportError as e:
            raise _Retryable(f"connection error ({type(e).__name__}: {e})") from None
        if r.status_code == 429 or r.status_code >= 500:
            raise _Retryable(f"HTTP {r.status_code}", _retry_after(r.headers))
        if r.status_code != 200:
            raise JudgeUnavailable(f"judge {self.name} at {self.cfg.base_url}: HTTP {r.status_code} (not retried): {r.text[:300]}")
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
                    reason, wait = str(e), e.retry_after
            if attempt < self.cfg.max_retries:
                await asyncio.sleep(wait if wait is not None else self.cfg.backoff_s * 2**attempt)
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
