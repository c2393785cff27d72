"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, hosted APIs) as a judge.

The transport is `generate.OpenAIPolicy`'s, the same as for rollouts: bounded concurrency, a
per-request timeout, the package's one retry policy on 429, 5xx, timeouts, connection errors and
malformed bodies (a Retry-After header wins); other 4xx answers (a wrong model name, a bad key) are
not retried, since asking again cannot fix them. The API key comes from `judge.api_key_env` and is
only ever placed in the Authorization header: never in messages, logs or outputs. Several
comma-separated base URLs are used round robin: those failing the health check (GET /models) at
start are skipped, one that fails mid-job is rested while its requests are retried on the others.
"""

from __future__ import annotations

from .policy import PolicyJudge


class OpenAIJudge(PolicyJudge):
    """An LLM judge behind an OpenAI-compatible server (`judge.backend=openai`)."""
