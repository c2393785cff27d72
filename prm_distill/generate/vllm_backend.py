"""The policy under vLLM's offline engine (`LLM.generate`): the high-throughput backend on a GPU box."""

from __future__ import annotations

from typing import Any

from .base import Generation, GenerationStopped, GenRequest, PolicyError, Watch
from .config import PolicyConfig
from .engine_kwargs import vllm_engine_kwargs
from .fingerprint import fingerprint, local_path
from .prompts import render


class VLLMPolicy:
    """vLLM offline batch generation: every request goes to one `LLM.generate` call so its scheduler
    batches them; `cfg.vllm` passes tensor/data parallel sizes and other engine options through.
    Prompts go in as token ids of the rendered chat (no special tokens added, as with transformers:
    a chat template that starts with BOS must not get a second one)."""

    def __init__(self, cfg: PolicyConfig):
        try:
            from vllm import LLM
        except ImportError:
            raise PolicyError("backend vllm needs vLLM (pip install 'prm_distill[vllm]', or scripts/setup_vllm.sh for a CPU venv); "
                              "use backend transformers or openai") from None

        path = local_path(cfg.policy)
        self.cfg = cfg
        self.name = f"vllm:{cfg.policy}"
        self.version = cfg.version or fingerprint(path)
        self.llm = LLM(model=path, **vllm_engine_kwargs(cfg.vllm))
        self.tok: Any = self.llm.get_tokenizer()

    def generate(self, requests: list[GenRequest], watch: Watch | None = None) -> list[Generation]:
        """All requests in one `LLM.generate` call (its scheduler batches them). With `watch`: a stop
        requested before the call sends nothing; the samples are reported when the call returns
        (vLLM's offline call can be neither watched nor cut short: on a GPU it takes seconds)."""
        from vllm import SamplingParams

        if watch is not None and watch.stop():
            raise GenerationStopped("stopped before the call")

        params = [SamplingParams(temperature=r.temperature, seed=r.seed, max_tokens=r.max_new_tokens, top_p=self.cfg.top_p) for r in requests]
        prompts: Any = [{"prompt_token_ids": self.tok(render(self.tok, r), add_special_tokens=False).input_ids} for r in requests]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        gens = [Generation(o.outputs[0].text, len(o.prompt_token_ids or []), len(o.outputs[0].token_ids),
                           "length" if o.outputs[0].finish_reason == "length" else "stop") for o in outs]
        if watch is not None:
            for i, gen in enumerate(gens):
                watch.sample(i, gen)
        return gens

    def close(self) -> None:
        return None
