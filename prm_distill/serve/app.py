"""The FastAPI app of `prm-distill serve`: /v1/score, /get_reward (OpenRLHF), /v1/model, /health, /metrics.

Requests from concurrent clients meet in one `ScoreBatcher`, which runs them through one engine call
per micro-batch; a trajectory's scores never depend on its batch mates. Bodies are validated by the
pydantic models of `requests.py`; every refusal is a `RequestError`, turned into `{"error", "kind"}`
with its status code (and counted) by the app's one error handler, and the server keeps serving.

(No `from __future__ import annotations` here: FastAPI reads the handlers' annotations, which name
imports made inside `create_app`.)
"""

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict
from typing import Any

from .. import calibration
from ..aggregate import aggregate
from ..atomic import json_safe
from ..encoding import EncodingError
from ..protocol import current_calibration
from .batcher import BatcherClosedError, BatcherFullError, ScoreBatcher, SyncScoringEngine
from .config import ServerConfig
from .requests import RequestError, RewardItem, ScoreItem, invalid, parse_reward_request, parse_score_request

log = logging.getLogger("prm_distill.serve.server")

SCORE_PATH = "/v1/score"
REWARD_PATH = "/get_reward"  # OpenRLHF's remote reward route (`--reward.remote_url`)


def authorized(header: str | None, api_key: bytes) -> bool:
    """`Authorization: Bearer KEY`, compared in constant time so timing reveals nothing of the key."""
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), api_key)


def api_key_from_env(name: str | None) -> bytes | None:
    """The key named by --api-key-env; a named but unset variable is an error, never an open server."""
    if name is None:
        return None
    key = os.environ.get(name, "")
    if not key.strip():
        raise ValueError(f"--api-key-env {name}: the environment variable is unset or empty")
    return key.strip().encode()


class _State:
    """What the handlers share: set once the model has loaded."""

    def __init__(self) -> None:
        self.engine: Any = None
        self.batcher: ScoreBatcher | None = None
        self.load_error: str | None = None


def _batcher(engine: SyncScoringEngine, cfg: ServerConfig) -> ScoreBatcher:
    # Batching off = a token budget of 1: the batcher then takes exactly one trajectory per call,
    # with the same queue, limits and error handling as batching on.
    if cfg.batching:
        return ScoreBatcher(engine, max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms, max_queue=cfg.max_queue,
                            max_request_tokens=cfg.max_request_tokens or None)
    return ScoreBatcher(engine, max_batch_tokens=1, max_wait_ms=0, max_queue=cfg.max_queue)


async def _score_all(batcher: ScoreBatcher, items: Sequence[ScoreItem]) -> list[list[float]]:
    """Every item through the batcher at once (they batch together, as one request for the fairness
    cap); one failure cancels the rest."""
    group = object()

    async def one(i: int, item: ScoreItem) -> list[float]:
        try:
            return await batcher.score(item.question, item.steps, group=group)
        except EncodingError as e:
            raise invalid(f"items[{i}]: {e}") from None

    tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(items)]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


async def _reward_all(batcher: ScoreBatcher, items: Sequence[RewardItem]) -> list[list[float] | str]:
    """Per-step scores of every scorable item, or the fallback reason of each that is not.

    Unlike /v1/score, one query's failure to encode costs only that query its score (OpenRLHF
    sends a whole rollout batch in one request); a full queue or a failed forward pass still fails
    the request."""
    group = object()

    async def one(item: RewardItem) -> list[float] | str:
        if item.fallback is not None:
            return item.fallback
        try:
            return await batcher.score(item.question, list(item.steps), group=group)
        except EncodingError:
            return "encoding"

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def default_loader(cfg: ServerConfig) -> Callable[[], SyncScoringEngine]:
    def load() -> SyncScoringEngine:
        import torch

        from .engine import PRMEngine

        torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 2) - 1))
        return PRMEngine.from_checkpoint(cfg.model, device=cfg.device, dtype=cfg.dtype, max_batch_tokens=cfg.max_batch_tokens)

    return load


def create_app(
    cfg: ServerConfig,
    load_engine: Callable[[], SyncScoringEngine] | None = None,
    *,
    api_key: bytes | None = None,
    on_load_error: Callable[[str], None] | None = None,
):
    """The FastAPI app. The model loads in a thread after start-up, so /health can say 503 meanwhile.

    `load_engine` returns a `protocol.StepScorer` (anything with `score(items)`, `model_id` and
    `sidecar`; default: a `PRMEngine` from `cfg.model`); `on_load_error` is told when loading fails.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    from .metrics import MeteredEngine, ServerMetrics

    loader = load_engine or default_loader(cfg)
    state = _State()
    metrics = ServerMetrics()
    busy = {"Retry-After": str(cfg.retry_after_s)}

    async def load() -> None:
        try:
            engine = await asyncio.to_thread(loader)
        except Exception as e:  # noqa: BLE001 - any failure leaves the server unready, with the reason
            state.load_error = f"{type(e).__name__}: {e}"
            log.error("model failed to load: %s", state.load_error)
            if on_load_error is not None:
                on_load_error(state.load_error)
            return
        state.engine = engine
        state.batcher = _batcher(MeteredEngine(engine, metrics), cfg)
        metrics.ready.set(1)
        log.info("model %s ready", getattr(engine, "model_id", "?"))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        loading = asyncio.create_task(load())
        yield
        # uvicorn has stopped accepting and waited for in-flight requests; finish what is queued.
        loading.cancel()
        if state.batcher is not None:
            await state.batcher.aclose()

    app = FastAPI(title="prm-distill", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.prm = state

    def answer(endpoint: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
        metrics.requests.labels(endpoint, str(status)).inc()
        return JSONResponse(json_safe(body), status_code=status, headers=headers)  # strict JSON: NaN -> null

    def not_ready() -> RequestError:
        if state.load_error is not None:
            return RequestError(503, "not_ready", f"the model failed to load: {state.load_error}")
        return RequestError(503, "not_ready", "the model is loading", busy)

    def fail(endpoint: str, error: RequestError) -> JSONResponse:
        metrics.errors.labels(error.kind).inc()
        return answer(endpoint, error.status, {"error": error.message, "kind": error.kind}, error.headers)

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        """The one error handler: every refusal answers `{"error", "kind"}` with its status, counted."""
        return fail(request.url.path, error)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """Unknown paths and methods answer in the same shape, counted under endpoint "other"."""
        kind = "not_found" if exc.status_code == 404 else "bad_method" if exc.status_code == 405 else "http_error"
        return fail("other", RequestError(exc.status_code, kind, f"{request.method} {request.url.path}: {exc.detail}"))

    async def read_body(request: Request) -> bytes:
        limit = cfg.max_body_bytes
        too_large = RequestError(413, "body_too_large", f"body: more than max_body_bytes={limit} bytes")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    def check_access(request: Request) -> None:
        if api_key is not None and not authorized(request.headers.get("authorization"), api_key):
            raise RequestError(401, "unauthorized", "authorization: missing or wrong API key (send 'Authorization: Bearer KEY')",
                               {"WWW-Authenticate": "Bearer"})
        if state.batcher is None:
            raise not_ready()

    @contextmanager
    def batcher_errors() -> Iterator[None]:
        """A full queue or a closing batcher answers 503 with Retry-After, on every scoring route."""
        try:
            yield
        except BatcherFullError as e:
            raise RequestError(503, "queue_full", f"server busy: {e}", busy) from None
        except BatcherClosedError:
            raise RequestError(503, "shutting_down", "the server is shutting down", busy) from None

    @app.post(SCORE_PATH)
    async def score(request: Request) -> JSONResponse:
        start = time.perf_counter()
        accepted = 0
        try:
            check_access(request)
            items = parse_score_request(await read_body(request), cfg)
            accepted = len(items)
            metrics.queue_depth.inc(accepted)
            with batcher_errors():
                scores = await _score_all(state.batcher, items)  # type: ignore[arg-type]  # check_access: not None
        except RequestError:
            raise
        except Exception as e:  # a failed forward pass answers 500 and the server goes on
            log.exception("scoring failed")
            raise RequestError(500, "scoring_failed", f"scoring failed: {type(e).__name__}: {e}") from None
        finally:
            metrics.queue_depth.dec(accepted)
            metrics.latency.observe(time.perf_counter() - start)
        metrics.steps_scored.inc(sum(len(s) for s in scores))
        cal = current_calibration(state.engine)
        results: list[dict[str, Any]] = [{"step_scores": s, "steps": item.steps} for item, s in zip(items, scores, strict=True)]
        if cal is not None:
            for result in results:
                result["calibrated_scores"] = calibration.apply(result["step_scores"], cal).tolist()
        timing_ms = round((time.perf_counter() - start) * 1000, 3)
        return answer(SCORE_PATH, 200, {"results": results, "model": state.engine.model_id, "timing_ms": timing_ms,
                                        "calibration_version": calibration.version_of(cal)})

    @app.post(REWARD_PATH)
    async def get_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward: `{"query", "prompts", "labels"}` -> one aggregated PRM score per query.

        The response is `query` minus its prompt; its steps' calibrated scores are aggregated with
        `--agg`. A query that cannot be scored gets 0.0, logged with its reason, counted in
        `extra_logs.prm_fallback` and in /metrics (`prm_errors{kind="reward_fallback_<reason>"}`)."""
        start = time.perf_counter()
        accepted = 0
        try:
            check_access(request)
            items = parse_reward_request(await read_body(request), cfg)
            accepted = sum(item.fallback is None for item in items)
            metrics.queue_depth.inc(accepted)
            with batcher_errors():
                outcomes = await _reward_all(state.batcher, items)  # type: ignore[arg-type]
        except RequestError:
            raise
        except Exception as e:  # a failed forward pass answers 500 and the server goes on
            log.exception("scoring failed")
            raise RequestError(500, "scoring_failed", f"scoring failed: {type(e).__name__}: {e}") from None
        finally:
            metrics.queue_depth.dec(accepted)
            metrics.latency.observe(time.perf_counter() - start)
        cal = current_calibration(state.engine)
        rewards: list[float] = []
        fallback: list[float] = []
        n_steps: list[float] = []
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, str):
                log.warning("/get_reward: query %d gets the fallback 0.0 (%s)", i, outcome)
                metrics.errors.labels(f"reward_fallback_{outcome}").inc()
                rewards.append(0.0)
                fallback.append(1.0)
                n_steps.append(0.0)
                continue
            metrics.steps_scored.inc(len(outcome))
            scores = calibration.apply(outcome, cal) if cal is not None else outcome
            rewards.append(aggregate(scores, cfg.agg))
            fallback.append(0.0)
            n_steps.append(float(len(outcome)))
        return answer(REWARD_PATH, 200, {"rewards": rewards, "scores": list(rewards),
                                         "extra_logs": {"prm_fallback": fallback, "prm_num_steps": n_steps}})

    @app.get("/health")
    async def health() -> JSONResponse:
        if state.engine is None:
            error = not_ready()
            return answer("/health", 503, {"status": "failed" if state.load_error else "loading", "error": error.message}, error.headers)
        return answer("/health", 200, {"status": "ok", "model": state.engine.model_id})

    @app.get("/v1/model")
    async def model_info() -> JSONResponse:
        """Model id and sidecar (step tag, threshold, calibration), so a remote scorer calibrates as a local one."""
        if state.engine is None:
            raise not_ready()
        sidecar = {**asdict(state.engine.sidecar), "calibration": current_calibration(state.engine)}
        return answer("/v1/model", 200, {"model": state.engine.model_id, "sidecar": sidecar})

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.requests.labels("/metrics", "200").inc()
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
