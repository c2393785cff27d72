"""Judge backends behind one interface (see base.Judge); heavy imports happen only in the one chosen."""

from __future__ import annotations

from ..config import JudgeConfig
from .base import Completion, Interrupted, Judge, JudgeUnavailable, Request


def make_judge(cfg: JudgeConfig) -> Judge:
    if cfg.backend == "openai":
        from .openai import OpenAIJudge

        return OpenAIJudge(cfg)
    if cfg.backend == "local":
        from .local import LocalJudge

        return LocalJudge(cfg)
    if cfg.backend == "reference":
        from .reference import ReferenceJudge

        return ReferenceJudge(cfg)
    if cfg.backend == "montecarlo":
        from .montecarlo import MonteCarloJudge

        return MonteCarloJudge(cfg)
    from .vllm_offline import VLLMJudge

    return VLLMJudge(cfg)


__all__ = ["Completion", "Interrupted", "Judge", "JudgeUnavailable", "Request", "make_judge"]
