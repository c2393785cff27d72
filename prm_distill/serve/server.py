"""`prm-distill serve`: the PRM over HTTP (FastAPI + uvicorn) for rollout workers in other processes.

Requests from concurrent clients meet in one `ScoreBatcher`, which runs them through one
`PRMEngine` call per micro-batch; a trajectory's scores never depend on its batch mates. Every bad
request gets a 4xx JSON body whose `error` names the field, and the server keeps serving.

The module's top level imports only the standard library and light package modules, so that the
CLI can build its parser from `ServerConfig` without loading torch or the `serve` extra; FastAPI,
uvicorn and the engine are imported where the app is built. (No `from __future__ import
annotations` here: FastAPI reads the handlers' annotations, which name those local imports.)
"""

import argparse
import asyncio
import dataclasses
import hmac
import json
import logging
import os
import socket
import threading
import time
import typing
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import calibration
from ..encoding import EncodingError
from ..steps import SplitConfig, StepSplitError, split_steps
from .batcher import BatcherClosedError, BatcherFullError, ScoreBatcher, SyncScoringEngine

log = logging.getLogger(__name__)

SCORE_PATH = "/v1/score"
ITEM_KEYS = frozenset({"question", "steps", "response", "split"})


@dataclass
class ServerConfig:
    """Everything `prm-distill serve` takes; each field is one command-line option."""

    model: str = field(metadata={"help": "Exported checkpoint folder (model + tokenizer + prm_distill.json)."})
    host: str = field(default="127.0.0.1", metadata={"help": "Interface to bind; the default keeps the server local to this machine."})
    port: int = field(default=8000, metadata={"help": "TCP port."})
    device: str = field(default="auto", metadata={"help": "cpu, cuda, cuda:N or auto (cuda when available)."})
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on GPUs and on CPUs with native bf16, float32 elsewhere), float32, bfloat16 or float16."})
    threads: int | None = field(default=None, metadata={"help": "torch threads for scoring (default: CPUs - 1, at least 1, so HTTP handling keeps a core: oversubscribed cores slow every forward pass)."})
    max_batch_tokens: int = field(default=16384, metadata={"help": "Token budget of one engine call (the batcher gathers up to about this much)."})
    max_wait_ms: float = field(default=2.0, metadata={"help": "How long the oldest waiting request may wait for batch mates (0: score whatever is queued at once; requests arriving while a batch runs are gathered anyway)."})
    batching: bool = field(default=True, metadata={"help": "Dynamic micro-batching; off scores one trajectory per engine call (for benchmarking)."})
    max_queue: int = field(default=1024, metadata={"help": "Trajectories that may wait; beyond this the server answers 503 with Retry-After."})
    max_body_bytes: int = field(default=4 * 1024 * 1024, metadata={"help": "Largest request body (413 beyond)."})
    max_items: int = field(default=256, metadata={"help": "Most trajectories in one request."})
    max_steps: int = field(default=512, metadata={"help": "Most steps in one trajectory (given or as split)."})
    max_step_chars: int = field(default=16000, metadata={"help": "Longest step in characters."})
    max_question_chars: int = field(default=32000, metadata={"help": "Longest question in characters."})
    max_response_chars: int = field(default=256000, metadata={"help": "Longest raw response (split by the server) in characters."})
    api_key_env: str | None = field(default=None, metadata={"help": "Name of an environment variable holding the API key; clients then send 'Authorization: Bearer KEY'."})
    retry_after_s: int = field(default=1, metadata={"help": "Retry-After (seconds) sent with 503 answers."})
    graceful_timeout_s: float = field(default=30.0, metadata={"help": "On shutdown, how long in-flight requests may take to finish."})

    def __post_init__(self) -> None:
        counts = ("max_batch_tokens", "max_queue", "max_body_bytes", "max_items", "max_steps", "max_step_chars",
                  "max_question_chars", "max_response_chars", "retry_after_s")
        bad = [name for name in counts if getattr(self, name) < 1]
        bad += ["threads"] if self.threads is not None and self.threads < 1 else []
        bad += ["max_wait_ms"] if self.max_wait_ms < 0 else []
        bad += ["port"] if not 0 <= self.port <= 65535 else []
        if bad:
            raise ValueError("out of range: " + ", ".join(f"{name}={getattr(self, name)}" for name in bad))


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per `ServerConfig` field (`--max-wait-ms`, `--no-batching`, ...), help from the field."""
    hints = typing.get_type_hints(ServerConfig)
    for f in dataclasses.fields(ServerConfig):
        flag = "--" + f.name.replace("_", "-")
        helptext = f.metadata["help"]
        if hints[f.name] is bool:
            parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false", help=f"Turn off: {helptext}")
            continue
        kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
        if f.default is dataclasses.MISSING:
            parser.add_argument(flag, dest=f.name, type=kind, required=True, help=helptext)
        else:
            shown = "" if f.default is None else f" (default: {f.default})"
            parser.add_argument(flag, dest=f.name, type=kind, default=f.default, help=helptext + shown)


def server_config_from_args(args: argparse.Namespace) -> ServerConfig:
    return ServerConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServerConfig)})


# -- request parsing (pure: no HTTP, no model) ----------------------------------------------------


class RequestError(Exception):
    """A request the server answers with `status` and `{"error": message, "kind": kind}`."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


@dataclass(frozen=True)
class ScoreItem:
    question: str
    steps: list[str]


def _invalid(message: str) -> RequestError:
    return RequestError(422, "invalid_request", message)


def _text(value: Any, where: str, limit: int, limit_name: str) -> str:
    if not isinstance(value, str):
        raise _invalid(f"{where}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise _invalid(f"{where}: must not be empty")
    if len(value) > limit:
        raise _invalid(f"{where}: {len(value)} characters, more than {limit_name}={limit}")
    return value


def _check_steps(steps: Any, where: str, cfg: ServerConfig, split: bool = False) -> list[str]:
    """Steps as given (`where` = items[i].steps) or as split from a response (`where` = items[i].response)."""
    if not isinstance(steps, list):
        raise _invalid(f"{where}: expected a list of strings, got {type(steps).__name__}")
    if not steps:
        raise _invalid(f"{where}: needs at least one step")
    after = " after splitting" if split else ""
    if len(steps) > cfg.max_steps:
        raise _invalid(f"{where}: {len(steps)} steps{after}, more than max_steps={cfg.max_steps}")
    return [
        _text(step, f"{where} (step {k}{after})" if split else f"{where}[{k}]", cfg.max_step_chars, "max_step_chars")
        for k, step in enumerate(steps)
    ]


def _split_config(value: Any, where: str) -> SplitConfig:
    if value is None:
        return SplitConfig()
    if not isinstance(value, dict):
        raise _invalid(f"{where}: expected an object of SplitConfig fields, got {type(value).__name__}")
    known = {f.name for f in dataclasses.fields(SplitConfig)}
    for key, v in value.items():
        if key not in known:
            raise _invalid(f"{where}.{key}: unknown option (known: {', '.join(sorted(known))})")
        if isinstance(v, bool) or not isinstance(v, int):
            raise _invalid(f"{where}.{key}: expected an integer, got {v!r}")
    try:
        return SplitConfig(**value)
    except ValueError as e:
        raise _invalid(f"{where}: {e}") from None


def _parse_item(item: Any, where: str, cfg: ServerConfig) -> ScoreItem:
    if not isinstance(item, dict):
        raise _invalid(f"{where}: expected an object with question and steps (or response)")
    unknown = sorted(set(item) - ITEM_KEYS)
    if unknown:
        raise _invalid(f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(ITEM_KEYS))})")
    question = _text(item.get("question"), f"{where}.question", cfg.max_question_chars, "max_question_chars")
    if ("steps" in item) == ("response" in item):
        raise _invalid(f"{where}: give exactly one of steps (list of strings) or response (string)")
    if "steps" in item:
        if "split" in item:
            raise _invalid(f"{where}.split: only applies to a response")
        return ScoreItem(question, _check_steps(item["steps"], f"{where}.steps", cfg))
    response = _text(item["response"], f"{where}.response", cfg.max_response_chars, "max_response_chars")
    split = _split_config(item.get("split"), f"{where}.split")
    try:
        steps = split_steps(response, split)
    except StepSplitError as e:
        raise _invalid(f"{where}.response: {e}") from None
    return ScoreItem(question, _check_steps(steps, f"{where}.response", cfg, split=True))


def parse_score_request(body: bytes, cfg: ServerConfig) -> list[ScoreItem]:
    """The items of a /v1/score body, or a RequestError naming the first bad field."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(422, "malformed_json", f"body: not valid JSON ({e})") from None
    if not isinstance(payload, dict) or "items" not in payload:
        raise _invalid('body: expected a JSON object {"items": [...]}')
    unknown = sorted(set(payload) - {"items"})
    if unknown:
        raise _invalid(f"{unknown[0]}: unknown field (known: items)")
    items = payload["items"]
    if not isinstance(items, list) or not items:
        raise _invalid("items: expected a non-empty list of objects")
    if len(items) > cfg.max_items:
        raise _invalid(f"items: {len(items)} items, more than max_items={cfg.max_items}")
    return [_parse_item(item, f"items[{i}]", cfg) for i, item in enumerate(items)]


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


# -- the app --------------------------------------------------------------------------------------


def current_calibration(engine: Any) -> dict[str, Any] | None:
    """The engine's calibration now (a `PRMEngine` re-reads a changed sidecar), else its sidecar's."""
    read = getattr(engine, "calibration", None)
    return read() if callable(read) else engine.sidecar.calibration


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
        return ScoreBatcher(engine, max_batch_tokens=cfg.max_batch_tokens, max_wait_ms=cfg.max_wait_ms, max_queue=cfg.max_queue)
    return ScoreBatcher(engine, max_batch_tokens=1, max_wait_ms=0, max_queue=cfg.max_queue)


async def _score_all(batcher: ScoreBatcher, items: Sequence[ScoreItem]) -> list[list[float]]:
    """Every item through the batcher at once (they batch together); one failure cancels the rest."""
    async def one(i: int, item: ScoreItem) -> list[float]:
        try:
            return await batcher.score(item.question, item.steps)
        except EncodingError as e:
            raise _invalid(f"items[{i}]: {e}") from None

    tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(items)]
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

    `load_engine` returns anything with `score(items)`, `model_id` and `sidecar` (default: a
    `PRMEngine` from `cfg.model`); `on_load_error` is told when loading fails.
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
        return JSONResponse(body, status_code=status, headers=headers)

    def fail(endpoint: str, error: RequestError) -> JSONResponse:
        metrics.errors.labels(error.kind).inc()
        return answer(endpoint, error.status, {"error": error.message, "kind": error.kind}, error.headers)

    def not_ready() -> RequestError:
        if state.load_error is not None:
            return RequestError(503, "not_ready", f"the model failed to load: {state.load_error}")
        return RequestError(503, "not_ready", "the model is loading", busy)

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

    @app.post(SCORE_PATH)
    async def score(request: Request) -> JSONResponse:
        start = time.perf_counter()
        accepted = 0
        try:
            if api_key is not None and not authorized(request.headers.get("authorization"), api_key):
                raise RequestError(401, "unauthorized", "authorization: missing or wrong API key (send 'Authorization: Bearer KEY')",
                                   {"WWW-Authenticate": "Bearer"})
            if state.batcher is None:
                raise not_ready()
            items = parse_score_request(await read_body(request), cfg)
            accepted = len(items)
            metrics.queue_depth.inc(accepted)
            try:
                scores = await _score_all(state.batcher, items)
            except BatcherFullError as e:
                raise RequestError(503, "queue_full", f"server busy: {e}", busy) from None
            except BatcherClosedError:
                raise RequestError(503, "shutting_down", "the server is shutting down", busy) from None
        except RequestError as e:
            return fail(SCORE_PATH, e)
        except Exception as e:  # noqa: BLE001 - a failed forward pass answers 500 and the server goes on
            log.exception("scoring failed")
            return fail(SCORE_PATH, RequestError(500, "scoring_failed", f"scoring failed: {type(e).__name__}: {e}"))
        finally:
            metrics.queue_depth.dec(accepted)
            metrics.latency.observe(time.perf_counter() - start)
        metrics.steps_scored.inc(sum(len(s) for s in scores))
        cal = current_calibration(state.engine)
        results = [{"step_scores": s, "steps": item.steps} for item, s in zip(items, scores, strict=True)]
        if cal is not None:
            for result in results:
                result["calibrated_scores"] = calibration.apply(result["step_scores"], cal).tolist()
        timing_ms = round((time.perf_counter() - start) * 1000, 3)
        return answer(SCORE_PATH, 200, {"results": results, "model": state.engine.model_id, "timing_ms": timing_ms,
                                        "calibration_version": calibration.version_of(cal)})

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
            return fail("/v1/model", not_ready())
        sidecar = {**asdict(state.engine.sidecar), "calibration": current_calibration(state.engine)}
        return answer("/v1/model", 200, {"model": state.engine.model_id, "sidecar": sidecar})

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.requests.labels("/metrics", "200").inc()
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found" if exc.status_code == 404 else "bad_method" if exc.status_code == 405 else "http_error"
        return fail("other", RequestError(exc.status_code, kind, f"{request.method} {request.url.path}: {exc.detail}"))

    return app


def _uvicorn_server(app, cfg: ServerConfig):
    import uvicorn

    return uvicorn.Server(uvicorn.Config(
        app, host=cfg.host, port=cfg.port, lifespan="on", access_log=False,
        timeout_graceful_shutdown=cfg.graceful_timeout_s,
    ))


def run_server(cfg: ServerConfig, load_engine: Callable[[], SyncScoringEngine] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (in-flight requests finish first); 1 when the model failed to load.

    uvicorn re-raises the stopping signal after its graceful shutdown, as any process stopped by it
    would end: SIGTERM ends the process with that status, Ctrl-C returns 130 without a traceback.
    """
    server: Any = None

    def stop(_reason: str) -> None:
        server.should_exit = True

    app = create_app(cfg, load_engine, api_key=api_key_from_env(cfg.api_key_env), on_load_error=stop)
    server = _uvicorn_server(app, cfg)
    try:
        server.run()
    except KeyboardInterrupt:
        return 130
    return 1 if app.state.prm.load_error else 0


class BackgroundServer:
    """A real uvicorn server in a daemon thread, for a demo, a notebook or tests.

    `port=0` picks a free port (bound before start, so nothing can take it). `app` can be extended
    (middleware) before `start()`. `stop()` shuts down as SIGTERM would: in-flight requests finish.

        with BackgroundServer(ServerConfig(model=DIR, port=0)) as srv:
            ...  # talk to srv.url
    """

    def __init__(self, cfg: ServerConfig, load_engine: Callable[[], SyncScoringEngine] | None = None) -> None:
        self.app = create_app(cfg, load_engine, api_key=api_key_from_env(cfg.api_key_env))
        self._server = _uvicorn_server(self.app, cfg)
        # Bound, not yet listening: until start(), connections are refused rather than left hanging.
        self._socket = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((cfg.host, cfg.port))
        self.url = f"http://{cfg.host}:{self._socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True, name="prm-server")

    def start(self, timeout_s: float = 30.0) -> "BackgroundServer":
        """Return once the server accepts connections (the model may still be loading: see /health)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self._socket.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
