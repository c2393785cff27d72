"""Every in-process vLLM engine gets the host's settings from `generate.vllm_engine_kwargs`: the PRM's
pooling engine too (it used to force fp32 on GPU and skip the in-process engine core on CPU).
Checked on the arguments themselves: vLLM need not be installed."""

from __future__ import annotations

import os

from prm_distill.checkpoint import Sidecar
from prm_distill.generate import CPU_VLLM_KWARGS
from prm_distill.serve.vllm_backend import engine_options

SIDECAR = Sidecar(step_tag="<step>", step_tag_id=42, max_length=1024)
POOLING = {"runner": "pooling", "max_model_len": 1024, "enforce_eager": True, "pooler_config": {"pooling_type": "STEP", "step_tag_id": 42}}


def test_the_pooling_engine_gets_the_hosts_vllm_settings(monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    on_gpu = engine_options(SIDECAR, gpu=True)
    assert on_gpu == {"dtype": "auto", **POOLING}  # no fp32 forced on a GPU
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    on_cpu = engine_options(SIDECAR, gpu=False)
    assert on_cpu == {"dtype": "float32", **CPU_VLLM_KWARGS, **POOLING}  # the window length is the sidecar's, not 4096
    assert on_cpu["max_model_len"] == 1024 and on_cpu["enable_chunked_prefill"] is False
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the engine core runs in this process on CPU
    chosen = engine_options(SIDECAR, "bfloat16", gpu=False, enable_prefix_caching=True, max_model_len=512)
    assert chosen["dtype"] == "bfloat16" and chosen["enable_prefix_caching"] is True and chosen["max_model_len"] == 512  # the caller's last
