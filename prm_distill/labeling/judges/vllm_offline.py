"""vLLM offline batch generation (`vllm.LLM.generate`): the high-throughput backend on a GPU machine.

Optional (extra `vllm`); imported only when a job asks for backend=vllm. One `generate` call per
stream takes every prompt, so vLLM's scheduler can batch them all.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from ...backbones import resolve_backbone
from ...generate import vllm_engine_kwargs
from ..config import JudgeConfig
from .base import Completion, Interrupted, Request


class VLLMJudge:
    def __init__(self, cfg: JudgeConfig):
        try:
            from vllm import LLM
        except ImportError:
            raise RuntimeError("judge.backend=vllm needs vLLM (pip install 'prm_distill[vllm]', or scripts/setup_vllm.sh for a CPU venv)") from None
        self.name = cfg.name
        # eager and 4096 tokens on GPU too; judge.vllm: tensor/data parallel, ...
        kwargs = vllm_engine_kwargs({"enforce_eager": True, "max_model_len": 4096, **cfg.vllm})
        self.llm = LLM(model=resolve_backbone(cfg.model), **kwargs)

    def _generate(self, requests: list[Request]) -> list[Completion]:
        from vllm import SamplingParams

        t0 = time.perf_counter()
        params = [SamplingParams(temperature=max(r.temperature, 0.01), seed=r.seed, max_tokens=r.max_tokens, n=1) for r in requests]
        outs = self.llm.chat([r.prompt.messages for r in requests], params, use_tqdm=False)
        latency = (time.perf_counter() - t0) / max(len(requests), 1)
        return [Completion(o.outputs[0].text, len(o.prompt_token_ids or []), len(o.outputs[0].token_ids), latency) for o in outs]

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        if stop.is_set():
            raise Interrupted("stop requested")
        for i, c in enumerate(await asyncio.to_thread(self._generate, requests)):
            yield i, c

    async def aclose(self) -> None:
        return None
