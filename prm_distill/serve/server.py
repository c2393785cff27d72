"""`prm-distill serve`: the PRM over HTTP (FastAPI + uvicorn) for rollout workers in other processes.

Split by job; this module keeps the names users and tests import from `prm_distill.serve.server`:

- `config.py`   `ServerConfig` and its command-line options (standard library only: the CLI builds
                its parser without torch or the `serve` extra)
- `requests.py` the /v1/score body as pydantic models with the server's limits; `RequestError`
- `app.py`      the FastAPI app: handlers, the one error handler, API key, model loading
- `runner.py`   `run_server` (foreground, graceful shutdown) and `BackgroundServer` (a thread)
"""

from .app import SCORE_PATH, api_key_from_env, authorized, create_app, default_loader
from .config import ServerConfig, add_server_arguments, server_config_from_args
from .requests import ITEM_KEYS, RequestError, ScoreItem, parse_score_request
from .runner import BackgroundServer, run_server

__all__ = [
    "ITEM_KEYS",
    "SCORE_PATH",
    "BackgroundServer",
    "RequestError",
    "ScoreItem",
    "ServerConfig",
    "add_server_arguments",
    "api_key_from_env",
    "authorized",
    "create_app",
    "default_loader",
    "parse_score_request",
    "run_server",
    "server_config_from_args",
]
