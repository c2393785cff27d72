"""The policy behind one or more OpenAI-compatible servers (vLLM, SGLang, llama.cpp, hosted APIs).

Used by rollouts and by every judge that talks to a server, so both get the same transport: the
start-up health check (`EndpointPool.check_models`), round robin with failover, and the package's
one retry policy (`PolicyConfig.retry_policy`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from ..exits import Interrupted
from ..health import Unhealthy
from ..retry import Retryable
from .base import Generation, GenerationStopped, GenRequest, PolicyError, PolicyUnavailable, Watch
from .config import PolicyConfig
from .endpoints import EndpointPool


class OpenAIPolicy:
    """Chat completions against one or more OpenAI-compatible servers, `concurrency` in flight.
    Health check at start (GET /models, retried like any request): endpoints that fail it are
    skipped; none healthy is `PolicyUnavailable`, a model the server does not list is `PolicyError`."""

    def __init__(self, cfg: PolicyConfig):
        import httpx

        self.cfg = cfg
        self.name = f"openai:{cfg.policy}"
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        self.client = httpx.Client(headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=cfg.timeout_s)
        self.pool = EndpointPool.parse(cfg.base_url)
        self.retry = cfg.retry_policy()

        def check() -> dict[str, dict[str, Any]]:
            try:
                return self.pool.check_models(self.client, min(cfg.timeout_s, 10.0))
            except Unhealthy as e:
                raise Retryable(str(e)) from None

        try:
            served_by = self.retry.call(check)
        except Retryable as e:
            self.client.close()
            raise PolicyUnavailable(f"no endpoint answered GET /models at {', '.join(self.pool.urls)}: "
                                    f"failed after {self.retry.attempts} attempts: {e}") from None
        url, served = next(iter(served_by.items()))
        if served and cfg.policy not in served:
            self.client.close()
            raise PolicyError(f"server {url} does not serve model {cfg.policy!r}; it serves {sorted(served)}")
        self.version = cfg.version or str(served.get(cfg.policy) or cfg.policy)
        self.executor = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="policy-http")

    def _attempt(self, body: dict[str, Any], cancel: threading.Event | None) -> Generation:
        """One try on the next endpoint: `Retryable` for what another try may fix."""
        import httpx

        if cancel is not None and cancel.is_set():
            raise Interrupted("stop requested")
        url = self.pool.pick()
        try:
            r = self.client.post(f"{url}/chat/completions", json=body)
        except httpx.TimeoutException:  # the next attempt goes to another endpoint
            self.pool.mark_down(url)
            raise Retryable(f"no answer within {self.cfg.timeout_s:g} s from {url}") from None
        except httpx.TransportError as e:
            self.pool.mark_down(url)
            raise Retryable(f"connection error at {url} ({type(e).__name__}: {e})") from None
        if self.retry.retries_status(r.status_code):
            self.pool.mark_down(url)
            raise Retryable(f"HTTP {r.status_code} from {url}", r.headers)
        if r.status_code != 200:
            raise PolicyUnavailable(f"server {url}: HTTP {r.status_code} (not retried): {r.text[:300]}")
        try:
            data = r.json()
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            text = str(choice["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError):
            raise Retryable(f"malformed response body from {url}: {r.text[:120]!r}") from None
        self.pool.mark_up(url)
        return Generation(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          "length" if choice.get("finish_reason") == "length" else "stop")

    def generate_one(self, req: GenRequest, cancel: threading.Event | None = None) -> Generation:
        """One request with bounded retries (thread-safe). A set `cancel` stops it before its next
        attempt (`Interrupted`); a request already sent is answered."""
        body: dict[str, Any] = {"model": self.cfg.policy, "messages": req.chat, "n": 1, "seed": req.seed,
                                "temperature": req.temperature, "max_tokens": req.max_new_tokens, "top_p": self.cfg.top_p}
        if req.prefix is not None:  # vLLM/SGLang extension: continue the assistant's partial answer
            body |= {"continue_final_message": True, "add_generation_prompt": False}
        try:
            return self.retry.call(lambda: self._attempt(body, cancel), cancel)
        except Retryable as e:
            raise PolicyUnavailable(f"model {self.cfg.policy!r} failed after {self.retry.attempts} attempts: {e}") from None

    def generate(self, requests: list[GenRequest], watch: Watch | None = None) -> list[Generation]:
        """One generation per request, `concurrency` in flight. With `watch`: each answer is reported
        as it arrives, and after `watch.should_stop()` nothing new is sent; the requests in flight
        are answered and reported, then `GenerationStopped`."""
        if watch is None:
            return list(self.executor.map(self.generate_one, requests))
        cancel = threading.Event()
        index = {self.executor.submit(self.generate_one, r, cancel): i for i, r in enumerate(requests)}
        out: list[Generation | None] = [None] * len(requests)
        pending = set(index)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.cancelled() or (cancel.is_set() and isinstance(future.exception(), Interrupted)):
                        continue  # never sent
                    out[index[future]] = gen = future.result()
                    watch.sample(index[future], gen)
                if not cancel.is_set() and watch.stop():
                    cancel.set()
                    for future in pending:
                        future.cancel()
        finally:
            cancel.set()  # a failure (or an interrupt) here: send nothing more for this call
        if any(g is None for g in out):
            raise GenerationStopped(f"stopped after {sum(g is not None for g in out)} of {len(requests)} requests")
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.client.close()
