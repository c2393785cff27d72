"""`vllm.LLM(...)` arguments for this host: the one place every in-process vLLM engine gets them
(the rollout policy, the offline judge, and the PRM's pooling engine in `serve.vllm_backend`)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

# vLLM 0.32 on CPU: eager mode, and no chunked prefill: a seeded request whose prompt is split over
# steps crashes its CPU runner ("CPU Generator does not use offset"), e.g. 64 samples at once.
CPU_VLLM_KWARGS: dict[str, Any] = {"enforce_eager": True, "max_model_len": 4096, "enable_chunked_prefill": False}


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def use_inprocess_vllm_on_cpu(engine_kwargs: dict[str, Any]) -> None:
    """On CPU, run vLLM's engine core in this process unless the user chose otherwise: as its own
    process it busy-polls a whole core, which on a small machine is half the compute (measured on 2
    cores: 64 seeded GSM8K samples at 131 generated tokens/s with it, 210 without, same samples).
    Parallel engines keep their processes."""
    parallel = any(int(engine_kwargs.get(k, 1) or 1) > 1 for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
    if not parallel:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def vllm_engine_kwargs(options: dict[str, Any], *, gpu: bool | None = None) -> dict[str, Any]:
    """`vllm.LLM` arguments for this host, `options` (the caller's and the user's `*.vllm`) last: on
    GPU dtype auto; on CPU fp32 (2-4x faster than bf16 there: ../shared/notes/vllm-on-cpu.md),
    `CPU_VLLM_KWARGS`, and the engine core in process. `gpu` None = ask torch."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    if gpu:
        return {"dtype": "auto", **options}
    kwargs = {"dtype": "float32", **CPU_VLLM_KWARGS, **options}
    use_inprocess_vllm_on_cpu(kwargs)
    return kwargs
