"""The one health check: is a server up, and what does it say? (no retries: the caller decides).

`probe` (sync) is what the generation clients ask at start-up of every endpoint (GET /models: up,
and which models it serves); `ready` (async) is what `PRMClient.health` asks (GET /health: the
model is loaded); `wait_until_ready` polls `ready` for a server that is starting (`prm-distill
serve`, whose model loads after the socket opens, or `vllm serve`): the demo, the benchmarks and
the tests all wait through it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx


class Unhealthy(Exception):
    """The server did not answer 2xx with a JSON body (the message says what it did)."""


def probe(client: httpx.Client, url: str, timeout_s: float = 10.0) -> Any:
    """The JSON body of GET `url` when it answers 2xx; `Unhealthy` otherwise."""
    try:
        r = client.get(url, timeout=timeout_s)
    except httpx.TimeoutException:
        raise Unhealthy(f"no answer within {timeout_s:g} s from {url}") from None
    except httpx.TransportError as e:
        raise Unhealthy(f"connection error at {url} ({type(e).__name__}: {e})") from None
    if not r.is_success:
        raise Unhealthy(f"HTTP {r.status_code} from {url}")
    try:
        return r.json()
    except ValueError:
        raise Unhealthy(f"malformed response body from {url}: {r.text[:120]!r}") from None


async def ready(client: httpx.AsyncClient, url: str) -> bool:
    """True when GET `url` answers 200."""
    try:
        return (await client.get(url)).status_code == 200
    except httpx.TransportError:
        return False


async def wait_until_ready(url: str, timeout_s: float = 120.0, interval_s: float = 0.1,
                           alive: Callable[[], bool] | None = None, path: str = "/health") -> bool:
    """Poll `url` + `path` until it answers 200: True; False after `timeout_s`, or as soon as
    `alive()` says the server process has exited."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url, timeout=max(interval_s, 2.0)) as client:
        while not await ready(client, path):
            if time.monotonic() >= deadline or (alive is not None and not alive()):
                return False
            await asyncio.sleep(interval_s)
    return True


__all__ = ["Unhealthy", "probe", "ready", "wait_until_ready"]
