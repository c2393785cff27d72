"""In-process judge: a local causal LM run with transformers (`generate.TransformersPolicy`), batched.

The offline default (SmolLM2-135M-Instruct). It is a weak judge that proves the plumbing; point the
job at a strong judge (judge.backend=openai, judge.base_url=..., judge.model=...) for real labels.
Recorded outputs show that a 135M model rarely ends free text with a "Score:" line, so besides free
generation it offers a constrained verdict: the chat prompt is followed by "Score:" (or "First
error:") and the verdict is sampled, with the request's temperature and seed, from the model's
probabilities of the allowed answers. The answer text ("Score: 0.5") goes through the same parser.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

from ...generate.transformers_backend import TransformersPolicy
from ..config import JudgeConfig
from .base import Completion, Request
from .policy import PolicyJudge, gen_request


def _choices(req: Request) -> tuple[str, list[str]]:
    """(assistant prefix, allowed continuations) of a constrained verdict."""
    if req.prompt.mode == "prefix":
        return "Score:", [" 0", " 0.5", " 1"]
    n = req.prompt.user.count("\nStep ")
    return "First error:", [" none"] + [f" step {k}" for k in range(1, n + 1)]


class LocalJudge(PolicyJudge):
    """Batches requests `batch_size` at a time (similar prompt lengths together: less padding); the
    model runs in a worker thread so the event loop (progress bar, other judges) keeps going."""

    def __init__(self, cfg: JudgeConfig):
        self.local = TransformersPolicy(cfg.policy_config())
        super().__init__(cfg, self.local)
        self._memo: dict[tuple[str, str], list[tuple[str, float, int, int]]] = {}

    def _chat(self, req: Request) -> str:
        return str(self.local.tok.apply_chat_template(req.prompt.messages, tokenize=False, add_generation_prompt=True))

    def _options(self, req: Request) -> list[tuple[str, float, int, int]]:
        """(answer text, log-probability, tokens in, tokens out) of every allowed verdict, from the
        policy's sequence probabilities after the chat and the verdict's head. Votes differ only by
        seed, so the options are computed once per prompt."""
        key = (req.prompt.system, req.prompt.user)
        if key in self._memo:
            return self._memo[key]
        head, cands = _choices(req)
        gen = gen_request(req)
        scored = self.local.option_logprobs(replace(gen, messages=(*gen.messages, ("assistant", head))), cands)
        opts = [(head + text, lp, n_in, n_out) for text, (lp, n_in, n_out) in zip(cands, scored)]
        if len(self._memo) > 4096:
            self._memo.clear()
        self._memo[key] = opts
        return opts

    def run(self, reqs: list[Request]) -> list[Completion]:
        if self.cfg.verdict != "constrained":
            return super().run(reqs)
        comps = []  # each request's verdict sampled with its temperature and seed (argmax at temperature 0)
        for r in reqs:
            t0 = time.perf_counter()
            opts = self._options(r)
            if r.temperature <= 0:
                text, _, n_in, n_out = max(opts, key=lambda o: o[1])
            else:
                top = max(o[1] for o in opts)
                weights = [math.exp((o[1] - top) / r.temperature) for o in opts]
                text, _, n_in, n_out = random.Random(r.seed).choices(opts, weights)[0]
            comps.append(Completion(text, n_in, n_out, time.perf_counter() - t0))
        return comps
