"""The distilled PRM on OpenRLHF's two reward paths: the remote URL and the Python `reward_func`.

- Remote: `prm-distill serve --model runs/prm --agg min`, then OpenRLHF with
  `--reward.remote_url http://HOST:8000/get_reward`. It posts `{"query", "prompts", "labels"}` and
  reads `{"rewards", "scores", "extra_logs"}`: one score per sample, which OpenRLHF places at the
  last token. Nothing of this module runs in the trainer.
- Python: point `--reward.remote_url` at this file (`python -c "import prm_distill.integrations.openrlhf
  as m; print(m.__file__)"`); OpenRLHF imports it and calls `reward_func(queries, prompts, labels)`.
  It scores in-process (`PRM_DISTILL_MODEL=<checkpoint>`) or through a server (`PRM_DISTILL_URL`),
  aggregating with `PRM_DISTILL_AGG` (default `min`). `make_reward_func(...)` builds the same
  function from arguments.

Each query is the prompt followed by the response; the response is `query[len(prompt):]` and the
question the last user turn of the rendered prompt. A sample that cannot be scored (the query does
not start with its prompt, no text, no steps, refused) gets 0.0, logged with its reason and marked
in `extra_logs["prm_fallback"]`; a server that cannot be reached raises, naming its URL.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from prm_distill.integrations.common import FallbackCounter, PRMBackend, UnscorableError, aggregated, check_agg
from prm_distill.serve.prompts import prompt_question, strip_end_markers

__all__ = ["make_reward_func", "reward_func", "split_query"]

log = logging.getLogger("prm_distill.integrations.openrlhf")


def split_query(query: str, prompt: str) -> tuple[str, str]:
    """(question, response) of one OpenRLHF sample, or UnscorableError when the query is not prompt + response."""
    if not isinstance(query, str) or not isinstance(prompt, str):
        raise UnscorableError("not_text", f"query and prompt must be strings, got {type(query).__name__} and {type(prompt).__name__}")
    if not query.startswith(prompt):
        raise UnscorableError("prompt_mismatch", "the query does not start with its prompt")
    return prompt_question(prompt), strip_end_markers(query[len(prompt) :])


def make_reward_func(
    model: str | None = None,
    url: str | None = None,
    *,
    agg: str = "min",
    backend: PRMBackend | None = None,
    **backend_options: Any,
) -> Callable[..., dict[str, Any]]:
    """`reward_func(queries, prompts, labels=None, **kwargs)` -> `{"rewards", "scores", "extra_logs"}` (tensors)."""
    check_agg(agg)
    prm = backend if backend is not None else PRMBackend(model=model, url=url, **backend_options)
    counter = FallbackCounter()

    def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        if len(queries) != len(prompts):
            raise ValueError(f"got {len(queries)} queries for {len(prompts)} prompts")
        pairs: list[tuple[str, str] | UnscorableError] = []
        for query, prompt in zip(queries, prompts, strict=True):
            try:
                pairs.append(split_query(query, prompt))
            except UnscorableError as e:
                pairs.append(e)
        results = iter(prm.score_responses([p for p in pairs if not isinstance(p, UnscorableError)]))
        rewards, fallback, n_steps, reasons = [], [], [], []
        for i, pair in enumerate(pairs):
            result = pair if isinstance(pair, UnscorableError) else next(results)
            score = aggregated(result, agg)
            n_steps.append(0.0 if isinstance(result, UnscorableError) else float(len(result.scores)))
            if score is None:
                assert isinstance(result, UnscorableError)
                log.warning("reward_func: sample %d gets the fallback 0.0 (%s: %s)", i, result.reason, result)
                reasons.append(result.reason)
            rewards.append(0.0 if score is None else score)
            fallback.append(float(score is None))
        counter.count(scored=len(pairs) - len(reasons), reasons=reasons)
        tensor = torch.tensor(rewards, dtype=torch.float32)
        # the same extra_logs keys as `prm-distill serve`'s /get_reward
        extra_logs = {"prm_fallback": torch.tensor(fallback), "prm_num_steps": torch.tensor(n_steps)}
        return {"rewards": tensor, "scores": tensor.clone(), "extra_logs": extra_logs}

    reward_func.fallbacks = counter  # type: ignore[attr-defined]
    reward_func.backend = prm  # type: ignore[attr-defined]
    return reward_func


_default: Callable[..., dict[str, Any]] | None = None
_default_lock = threading.Lock()


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's Python reward hook, configured from the environment (built on first call):
    `PRM_DISTILL_MODEL` (a checkpoint folder) or `PRM_DISTILL_URL` (a server), `PRM_DISTILL_AGG`."""
    global _default
    with _default_lock:
        if _default is None:
            model, url = os.environ.get("PRM_DISTILL_MODEL"), os.environ.get("PRM_DISTILL_URL")
            if (model is None) == (url is None):
                raise RuntimeError("set exactly one of PRM_DISTILL_MODEL (a checkpoint folder) or PRM_DISTILL_URL (a prm-distill serve server)")
            _default = make_reward_func(model=model, url=url, agg=os.environ.get("PRM_DISTILL_AGG", "min"),
                                        device=os.environ.get("PRM_DISTILL_DEVICE", "auto"))
    return _default(queries, prompts, labels, **kwargs)
