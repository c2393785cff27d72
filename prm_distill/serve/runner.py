"""Running the app: `prm-distill serve` in the foreground, or `BackgroundServer` in a thread."""

from __future__ import annotations

import errno
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..checkpoint import read_sidecar
from ..exits import Unavailable
from .app import api_key_from_env, create_app, default_loader
from .batcher import SyncScoringEngine
from .config import ServerConfig


def _uvicorn_server(app: Any, cfg: ServerConfig) -> Any:
    import uvicorn

    return uvicorn.Server(uvicorn.Config(
        app, host=cfg.host, port=cfg.port, lifespan="on", access_log=False,
        timeout_graceful_shutdown=math.ceil(cfg.graceful_timeout_s),
    ))


class ModelUnavailable(Unavailable):
    """The model failed to load for a reason other than a bad checkpoint (memory, device, backend): exit 4."""


def check_port(host: str, port: int) -> None:
    """Refuse a busy address before anything loads, as bad input (exit 2: the --port option), in
    words; uvicorn alone logs the OS error and exits 3, which the table reserves for drift."""
    if port == 0:
        return  # any free port
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ValueError(f"{host}:{port} is in use: pick another --port") from None
            raise ValueError(f"cannot listen on {host}:{port} ({e.strerror}): check --host and --port") from None


def run_server(cfg: ServerConfig, load_engine: Callable[[], SyncScoringEngine] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (in-flight requests finish first); 0, or 130 on Ctrl-C.

    A busy port or a folder that is not a checkpoint raises ValueError (bad input, exit 2) before
    the server starts; a model that fails to load stops the server and raises what failed: its
    ValueError/FileNotFoundError (a bad checkpoint, exit 2) or `ModelUnavailable` (exit 4).
    uvicorn re-raises the stopping signal after its graceful shutdown, as any process stopped by it
    would end: SIGTERM ends the process with that status, Ctrl-C returns 130 without a traceback.
    """
    check_port(cfg.host, cfg.port)
    if load_engine is None:
        read_sidecar(cfg.model)  # CheckpointError naming the folder (and the export, for a training folder)
    server: Any = None
    failed: list[Exception] = []
    loader = load_engine or default_loader(cfg)

    def load() -> SyncScoringEngine:
        try:
            return loader()
        except Exception as e:
            failed.append(e)
            raise

    def stop(_reason: str) -> None:
        server.should_exit = True

    app = create_app(cfg, load, api_key=api_key_from_env(cfg.api_key_env), on_load_error=stop)
    server = _uvicorn_server(app, cfg)
    try:
        server.run()
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:  # uvicorn's own start-up failure (its message is logged above): never exit 3, "drift"
        raise Unavailable(f"the HTTP server did not start on {cfg.host}:{cfg.port} (uvicorn exited {e.code})") from None
    if failed:
        if isinstance(failed[0], (ValueError, FileNotFoundError)):
            raise failed[0]
        raise ModelUnavailable(f"the model failed to load: {app.state.prm.load_error}") from failed[0]
    return 0


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

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
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

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
