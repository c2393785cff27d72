"""vLLM offline batch generation (`vllm.LLM.generate`) as a judge: the high-throughput backend on a GPU box.

Optional (extra `vllm`); imported only when a job asks for backend=vllm. The engine is
`generate.VLLMPolicy`'s (its settings from `vllm_engine_kwargs`, `judge.vllm` last); up to 1024
prompts per `generate` call, so vLLM's scheduler batches them.
"""

from __future__ import annotations

from .policy import PolicyJudge


class VLLMJudge(PolicyJudge):
    """An LLM judge under vLLM's offline engine (`judge.backend=vllm`)."""
