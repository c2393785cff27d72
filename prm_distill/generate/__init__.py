"""Sampling from a policy behind one small interface: `load_policy(cfg).generate(requests)`.

Fresh rollouts (`prm-distill rollout`), Monte-Carlo step labels and the LLM judges all sample
through it, on whatever the user has: vLLM's offline `LLM.generate` on a GPU box, transformers
batched generation anywhere, or an OpenAI-compatible server (vLLM, SGLang, llama.cpp, hosted)
reached over HTTP, round robin over several with health checks. One job per module:

- `base`: `GenRequest`, `Generation`, the `Policy` interface and its errors, and `Watch` (progress
  and an early stop for a long `generate(requests, watch=...)` call: rollout's bar and Ctrl-C);
- `config`: `PolicyConfig` (where the policy runs), `sampling_metadata`;
- `prompts`: the one prompt of a problem (`problem_messages`) and its rendering;
- `fingerprint`: a local model's version, and the check that it is a causal LM;
- `transformers_backend`, `vllm_backend`, `openai_backend`: one backend each;
- `engine_kwargs`: `vllm.LLM(...)` settings for this host (every in-process vLLM engine's);
- `endpoints`: the round-robin pool of servers with its start-up health check.

A request whose last message is from the assistant is a prefix to continue (Monte-Carlo): local
backends append it to the rendered prompt; servers get vLLM's `continue_final_message` extension.
Backends import their heavy dependencies (torch, transformers, vllm, httpx) only when loaded.
"""

from __future__ import annotations

from .base import Generation, GenerationStopped, GenRequest, Policy, PolicyError, PolicyUnavailable, Watch
from .config import BACKENDS, PolicyConfig, sampling_metadata
from .endpoints import EndpointPool
from .engine_kwargs import CPU_VLLM_KWARGS, use_inprocess_vllm_on_cpu, vllm_available, vllm_engine_kwargs
from .fingerprint import check_causal_lm, fingerprint
from .prompts import DEFAULT_INSTRUCTION, problem_messages


def load_policy(cfg: PolicyConfig) -> Policy:
    """The policy on the chosen backend (auto: vLLM when importable, else transformers)."""
    backend = cfg.backend
    if backend == "auto":
        backend = "vllm" if vllm_available() else "transformers"
    if backend == "openai":
        from .openai_backend import OpenAIPolicy

        return OpenAIPolicy(cfg)
    if backend == "vllm":
        from .vllm_backend import VLLMPolicy

        return VLLMPolicy(cfg)
    from .transformers_backend import TransformersPolicy

    return TransformersPolicy(cfg)


__all__ = [
    "BACKENDS", "CPU_VLLM_KWARGS", "DEFAULT_INSTRUCTION", "EndpointPool", "GenRequest", "Generation", "GenerationStopped", "Policy",
    "PolicyConfig", "PolicyError", "PolicyUnavailable", "Watch", "check_causal_lm", "fingerprint", "load_policy", "problem_messages",
    "sampling_metadata", "use_inprocess_vllm_on_cpu", "vllm_available", "vllm_engine_kwargs",
]
