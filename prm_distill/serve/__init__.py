"""Serving: the in-process batched engine, the HTTP server and its client, and the vLLM backend.

Names load on first use (PEP 562), so `import prm_distill.serve` needs neither torch nor the
optional `serve` (FastAPI, uvicorn, httpx) and `vllm` extras until the part that uses them is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PRMEngine": "engine",
    "ScoreBatcher": "batcher",
    "ServerConfig": "config",
    "create_app": "app",
    "run_server": "runner",
    "BackgroundServer": "runner",
    "PRMClient": "client",
    "wait_until_ready": "client",
    "ClientConfig": "client",
    "PRMServerError": "client",
    "VLLMOfflineEngine": "vllm_backend",
    "VLLMPoolingClient": "vllm_backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
