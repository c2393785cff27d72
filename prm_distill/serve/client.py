"""Async HTTP client of `prm-distill serve`: the remote form of the scorer's backend seam.

`await PRMClient.connect(url)` fetches the model's sidecar, so `DistilledPRMScorer(engine=client)`
applies the same threshold and calibration as with the in-process engine. One `httpx.AsyncClient`
keeps connections alive across calls; 503 answers (queue full, model loading) and connection
failures are retried a bounded number of times with jittered exponential backoff, honouring
Retry-After (the package's one `retry.RetryPolicy`). Scoring is idempotent, so a retried request
can never count twice. `wait_until_ready` (from `prm_distill.health`, the one readiness wait) polls
/health of a server that is starting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from .. import calibration
from ..checkpoint import Sidecar
from ..health import ready, wait_until_ready
from ..protocol import Item
from ..retry import SCORE_RETRY_STATUSES, Retryable, RetryPolicy
from ..steps import SplitConfig, splitter_config
from .batcher import ScoreBatcher

__all__ = ["ClientConfig", "PRMClient", "PRMServerError", "request_json", "wait_until_ready"]
RETRYABLE_ERRORS = (httpx.NetworkError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


@dataclass
class ClientConfig:
    """Timeouts, retries and connection pool of a client."""

    timeout_s: float = field(default=60.0, metadata={"help": "Longest wait for one answer (read, write, pool)."})
    connect_timeout_s: float = field(default=5.0, metadata={"help": "Longest wait to open a connection."})
    max_retries: int = field(default=3, metadata={"help": "Retries after a 503 or a connection failure (0: none)."})
    backoff_s: float = field(default=0.05, metadata={"help": "First retry delay; doubles each retry (with jitter)."})
    max_backoff_s: float = field(default=2.0, metadata={"help": "Cap on one retry delay, Retry-After included."})
    max_connections: int = field(default=64, metadata={"help": "Connections kept open to the server (concurrent requests beyond wait for one)."})
    coalesce: bool = field(default=True, metadata={"help": (
        "Send the trajectories of concurrent `score` calls together, as one request of many items "
        "(far less HTTP work per trajectory than one request each); a bad item still fails alone.")})
    max_items_per_request: int = field(default=64, metadata={
        "help": "With coalesce: most trajectories in one request (keep it at or below the server's max_items)."})
    max_requests_in_flight: int = field(default=4, metadata={
        "help": "With coalesce: coalesced requests outstanding at once (overlaps the network with scoring)."})

    def __post_init__(self) -> None:
        if (self.timeout_s <= 0 or self.connect_timeout_s <= 0 or self.max_retries < 0 or self.backoff_s < 0
                or min(self.max_connections, self.max_items_per_request, self.max_requests_in_flight) < 1):
            raise ValueError("ClientConfig: timeouts > 0, max_retries >= 0, backoff_s >= 0, and max_connections, "
                             "max_items_per_request and max_requests_in_flight >= 1 are required")

    def retry_policy(self) -> RetryPolicy:
        """The package's one retry policy, retrying 503 (queue full, model loading) and connection failures."""
        return RetryPolicy(max_retries=self.max_retries, backoff_s=self.backoff_s, max_backoff_s=self.max_backoff_s,
                           retry_statuses=SCORE_RETRY_STATUSES)

    def http_client(self, base_url: str, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
            limits=httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections),
        )


class PRMServerError(RuntimeError):
    """The server refused or failed a request (or could not be reached); `status` is None for the latter."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _error_message(response: httpx.Response) -> str:
    """The server's own words: `{"error": "..."}` (ours) or `{"error": {"message": ...}}` (vLLM)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        error = error.get("message", error)
    return str(error)


async def request_json(
    http: httpx.AsyncClient, config: ClientConfig, method: str, path: str, payload: Any = None
) -> Any:
    """The JSON answer of one request, retried on 503 and connection failures; PRMServerError otherwise."""
    policy = config.retry_policy()

    async def attempt() -> httpx.Response:
        try:
            response = await http.request(method, path, json=payload)
        except RETRYABLE_ERRORS as e:
            raise Retryable(f"{method} {http.base_url.join(path)}: {type(e).__name__}: {e}") from e
        if policy.retries_status(response.status_code):
            raise Retryable(f"HTTP {response.status_code}", response.headers, payload=response)
        return response

    try:
        response = await policy.acall(attempt)
    except Retryable as e:
        if e.payload is None:  # the connection failed every time
            raise PRMServerError(f"{e} (after {policy.attempts} attempts)") from e.__cause__
        response = e.payload  # the last retried answer (503) is the error
    if response.is_error:
        raise PRMServerError(f"{method} {path}: HTTP {response.status_code}: {_error_message(response)}", response.status_code)
    return response.json()


class PRMClient:
    """`await client.score(question, steps)` -> per-step P(good), from a `prm-distill serve` server."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", *, api_key: str | None = None,
                 config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._http = self.config.http_client(base_url, headers)
        self.model_id: str | None = None
        self.sidecar: Sidecar | None = None
        self._coalescer = (
            ScoreBatcher(self, max_batch_tokens=2**31 - 1, max_wait_ms=0, max_queue=2**31 - 1,
                         max_items=self.config.max_items_per_request, max_in_flight=self.config.max_requests_in_flight)
            if self.config.coalesce else None
        )

    @classmethod
    async def connect(cls, base_url: str = "http://127.0.0.1:8000", **kwargs: Any) -> "PRMClient":
        """A client that knows the served model's id and sidecar (retries while the model loads)."""
        client = cls(base_url, **kwargs)
        try:
            info = await request_json(client._http, client.config, "GET", "/v1/model")
        except BaseException:
            await client.aclose()
            raise
        client._set_model_info(info)
        return client

    def _set_model_info(self, info: dict[str, Any]) -> None:
        self.model_id = info["model"]
        self.sidecar = Sidecar.from_dict(info["sidecar"], source="/v1/model")
        calibration.validate(self.sidecar.calibration, "/v1/model: calibration")

    def calibration(self) -> dict[str, Any] | None:
        """The served model's calibration as of the last answer (refetched when the server's changes)."""
        return self.sidecar.calibration if self.sidecar is not None else None

    async def score(self, question: str, steps: Sequence[str]) -> list[float]:
        """Per-step scores of one trajectory (the scorer's backend seam); concurrent calls are
        coalesced into shared requests unless `config.coalesce` is off."""
        if self._coalescer is not None:
            return await self._coalescer.score(question, steps)
        [scores] = await self.score_batch([(question, steps)])
        return scores

    async def score_batch(self, items: Sequence[Item]) -> list[list[float]]:
        """Per-step scores of several trajectories in one request, in order."""
        results = await self._score([{"question": q, "steps": list(s)} for q, s in items])
        for (_, steps), result in zip(items, results, strict=True):
            if len(result["step_scores"]) != len(steps):
                raise PRMServerError(f"the server returned {len(result['step_scores'])} scores for {len(steps)} steps")
        return [result["step_scores"] for result in results]

    async def score_response(self, question: str, response: str, splitter: SplitConfig | None = None,
                             split: SplitConfig | None = None) -> tuple[list[str], list[float]]:
        """Let the server split a raw response with the shared splitter; (steps, scores). `split` is
        `splitter`'s old name; on the wire the item's key is `split`."""
        item: dict[str, Any] = {"question": question, "response": response}
        if splitter is not None or split is not None:
            item["split"] = asdict(splitter_config(splitter, split))
        [result] = await self._score([item])
        return result["steps"], result["step_scores"]

    async def _score(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = await request_json(self._http, self.config, "POST", "/v1/score", {"items": items})
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list) or len(results) != len(items):
            raise PRMServerError(f"malformed answer: expected {len(items)} results, got {str(body)[:200]}")
        version = body.get("calibration_version", 0)
        if self.sidecar is not None and version != calibration.version_of(self.sidecar.calibration):
            # `recalibrate --adopt` changed the served calibration: learn the new one.
            self._set_model_info(await request_json(self._http, self.config, "GET", "/v1/model"))
        return results

    async def health(self) -> bool:
        """True when the server answers and its model is loaded (no retries)."""
        return await ready(self._http, "/health")

    async def aclose(self) -> None:
        if self._coalescer is not None:
            await self._coalescer.aclose()
        await self._http.aclose()

    async def __aenter__(self) -> "PRMClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

