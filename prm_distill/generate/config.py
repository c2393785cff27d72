"""Where a policy runs and how requests reach it (the sampling parameters travel per request)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..retry import JUDGE_RETRY_STATUSES, RetryPolicy
from .base import PolicyError
from .prompts import DEFAULT_INSTRUCTION

BACKENDS = ("auto", "transformers", "vllm", "openai")


@dataclass
class PolicyConfig:
    """Where the policy runs and how requests reach it (the sampling parameters travel per request)."""

    policy: str = field(default="smollm2", metadata={"help": (
        "Model folder or hub name ('smollm2' = the embedded SmolLM2-135M-Instruct); for backend=openai the model name "
        "sent to the server.")})
    backend: str = field(default="auto", metadata={"choices": BACKENDS, "help": "auto (vllm when importable, else transformers) | transformers | vllm | openai."})
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": (
        "backend=openai: base URL ending in /v1; several comma-separated URLs are used round robin, skipping those that"
        " fail their health check.")})
    api_key_env: str = field(default="PRM_POLICY_API_KEY", metadata={"help": (
        "backend=openai: environment variable holding the API key (Bearer token, never logged).")})
    device: str = field(default="cpu", metadata={"help": "backend=transformers: cpu, cuda or auto."})
    batch_size: int = field(default=16, metadata={"help": "backend=transformers: sequences per generate call."})
    concurrency: int = field(default=8, metadata={"help": "backend=openai: requests in flight at once (over all endpoints)."})
    timeout_s: float = field(default=300.0, metadata={"help": "backend=openai: per-request timeout in seconds."})
    max_retries: int = field(default=3, metadata={"help": (
        "backend=openai: retries of a request (on another endpoint when there is one) before PolicyUnavailable.")})
    backoff_s: float = field(default=0.5, metadata={"help": "backend=openai: first retry delay in seconds, doubling each retry (a Retry-After header wins)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1 = off)."})
    instruction: str = field(default=DEFAULT_INSTRUCTION, metadata={"help": (
        "Text after the question in the user message (how to lay out steps and the answer).")})
    vllm: dict[str, Any] = field(default_factory=dict, metadata={"help": (
        "backend=vllm: extra vllm.LLM(...) arguments passed through, e.g. {tensor_parallel_size: 2, data_parallel_size:"
        " 2, gpu_memory_utilization: 0.8}.")})
    version: str = field(default="", metadata={"help": (
        "Policy version written into every record; empty = a fingerprint of the weights (local) or the server's model "
        "root (openai).")})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PolicyError(f"policy backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.batch_size < 1 or self.concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise PolicyError("policy: batch_size, concurrency >= 1, max_retries >= 0, timeout_s > 0 and backoff_s >= 0 are required")
        if not 0 < self.top_p <= 1:
            raise PolicyError(f"policy: top_p must be in (0, 1], got {self.top_p}")

    def retry_policy(self) -> RetryPolicy:
        """The package's one retry policy for a generation server: 429, 5xx, timeouts, connection
        errors and malformed bodies are retried; delays double from `backoff_s` (no jitter: a
        Retry-After header already spreads clients out), capped at 60 s."""
        return RetryPolicy(max_retries=self.max_retries, backoff_s=self.backoff_s, max_backoff_s=60.0,
                           retry_statuses=JUDGE_RETRY_STATUSES, jitter=False)


def sampling_metadata(cfg: PolicyConfig, temperature: float, max_new_tokens: int, seed: int, **extra: Any) -> dict[str, Any]:
    """The sampling parameters as recorded next to every sample (JSON-ready)."""
    return {"temperature": temperature, "top_p": cfg.top_p, "max_new_tokens": max_new_tokens, "seed": seed, **extra}
