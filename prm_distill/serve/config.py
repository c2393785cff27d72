"""`prm-distill serve` settings: one dataclass, one command-line option per field.

Standard library (and `config.py`) only, so the CLI builds its parser without loading torch, FastAPI or pydantic.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from ..config import add_options, from_options


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
    max_request_tokens: int = field(default=2048, metadata={"help": "Fairness: the most tokens one HTTP request adds to one engine call (at least one trajectory), so a large request is scored over several calls and small requests arriving meanwhile join the next call instead of waiting behind all of it (0: no cap, first come first served). The default is one CPU forward pass; on a GPU serving few large requests, raise it toward --max-batch-tokens."})
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
    agg: str = field(default="min", metadata={"help": "POST /get_reward (OpenRLHF's remote reward): how a response's step scores become its one reward: min, prod, last, mean or discounted."})

    def __post_init__(self) -> None:
        counts = ("max_batch_tokens", "max_queue", "max_body_bytes", "max_items", "max_steps", "max_step_chars",
                  "max_question_chars", "max_response_chars", "retry_after_s")
        bad = [name for name in counts if getattr(self, name) < 1]
        bad += ["threads"] if self.threads is not None and self.threads < 1 else []
        bad += ["max_wait_ms"] if self.max_wait_ms < 0 else []
        bad += ["max_request_tokens"] if self.max_request_tokens < 0 else []
        bad += ["port"] if not 0 <= self.port <= 65535 else []
        if self.agg not in ("min", "prod", "last", "mean", "discounted"):  # aggregate.AGGREGATIONS, without importing numpy here
            bad += ["agg"]
        if bad:
            raise ValueError("out of range: " + ", ".join(f"{name}={getattr(self, name)}" for name in bad))


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per `ServerConfig` field (`--max-wait-ms`, `--no-batching`, ...), help from the field."""
    add_options(parser, ServerConfig)


def server_config_from_args(args: argparse.Namespace) -> ServerConfig:
    return from_options(ServerConfig, args)
