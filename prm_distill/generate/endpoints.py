"""Round robin over OpenAI-compatible endpoints, with the start-up health check (GET /models)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from ..health import Unhealthy, probe
from .base import PolicyError


class EndpointPool:
    """Round robin over OpenAI-compatible endpoints; an endpoint that fails is skipped for
    `cooldown_s`, and when all are down the one down longest is tried (a restart may have fixed it)."""

    def __init__(self, urls: list[str], cooldown_s: float = 30.0):
        if not urls:
            raise PolicyError("no endpoint URL given")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown_s = cooldown_s
        self.down_since: dict[str, float] = {}
        self._cycle = itertools.cycle(self.urls)
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, base_url: str, cooldown_s: float = 30.0) -> "EndpointPool":
        return cls([u.strip() for u in base_url.split(",") if u.strip()], cooldown_s)

    def pick(self) -> str:
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.urls)):
                u = next(self._cycle)
                if now - self.down_since.get(u, -1e18) >= self.cooldown_s:
                    return u
            return min(self.urls, key=lambda u: self.down_since[u])

    def mark_down(self, url: str) -> None:
        with self._lock:
            self.down_since[url] = time.monotonic()

    def mark_up(self, url: str) -> None:
        with self._lock:
            self.down_since.pop(url, None)

    def check_models(self, client: Any, timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
        """GET /models of every endpoint once (the health check): {url: {model id: root}} of those that
        answered; the others are marked down. Raises `Unhealthy` (the last reason) when none answered."""
        served: dict[str, dict[str, Any]] = {}
        last = ""
        for url in self.urls:
            try:
                body = probe(client, f"{url}/models", timeout_s)
                served[url] = {m.get("id"): m.get("root") for m in body.get("data", [])}
            except (Unhealthy, AttributeError, TypeError) as e:
                self.mark_down(url)
                last = str(e) if isinstance(e, Unhealthy) else f"malformed /models answer from {url}"
            else:
                self.mark_up(url)
        if not served:
            raise Unhealthy(last)
        return served
