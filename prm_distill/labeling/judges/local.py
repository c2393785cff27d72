"""In-process judge: a local causal LM run with transformers, batched.

The offline default (SmolLM2-135M-Instruct). It is a weak judge that proves the plumbing; point the
job at a strong judge (judge.backend=openai, judge.base_url=..., judge.model=...) for real labels.
Recorded outputs show that a 135M model rarely ends free text with a "Score:" line, so besides free
generation it offers a constrained verdict: the chat prompt is followed by "Score:" (or "First
error:") and the verdict is sampled, with the request's temperature and seed, from the model's
probabilities of the allowed answers. The answer text ("Score: 0.5") goes through the same parser.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import AsyncIterator

from ...backbones import resolve_backbone
from ..config import JudgeConfig
from .base import Completion, Interrupted, Request


def _choices(req: Request) -> tuple[str, list[str]]:
    """(assistant prefix, allowed continuations) of a constrained verdict."""
    if req.prompt.mode == "prefix":
        return "Score:", [" 0", " 0.5", " 1"]
    n = req.prompt.user.count("\nStep ")
    return "First error:", [" none"] + [f" step {k}" for k in range(1, n + 1)]


class LocalJudge:
    """Batches requests `batch_size` at a time; the model runs in a worker thread so the event loop
    (progress bar, other judges) keeps going."""

    def __init__(self, cfg: JudgeConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = cfg.name
        self.cfg = cfg
        path = resolve_backbone(cfg.model)
        self.tok = AutoTokenizer.from_pretrained(path)
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()  # type: ignore[arg-type]  # transformers' stub of .to
        self._memo: dict[tuple[str, str], list[tuple[str, float, int, int]]] = {}

    def _chat(self, req: Request) -> str:
        return str(self.tok.apply_chat_template(req.prompt.messages, tokenize=False, add_generation_prompt=True))

    def _generate(self, batch: list[Request]) -> list[Completion]:
        import torch

        t0 = time.perf_counter()
        self.tok.padding_side = "left"
        enc = self.tok([self._chat(r) for r in batch], return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        temperature = batch[0].temperature
        # One seed per batch (generate has no per-row generator): the same batch gives the same answers.
        torch.manual_seed(sum(r.seed * 7919**i for i, r in enumerate(batch)) % (2**31))
        with torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max(r.max_tokens for r in batch), do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None, top_p=None, top_k=None, pad_token_id=self.tok.pad_token_id,
            )
        gen = out[:, enc["input_ids"].shape[1]:]
        latency = (time.perf_counter() - t0) / len(batch)
        comps = []
        for r, row, mask in zip(batch, gen, enc["attention_mask"]):
            ids = row[: r.max_tokens].tolist()
            if self.tok.eos_token_id in ids:
                ids = ids[: ids.index(self.tok.eos_token_id)]
            ids = [i for i in ids if i != self.tok.pad_token_id]
            comps.append(Completion(str(self.tok.decode(ids, skip_special_tokens=True)), int(mask.sum()), len(ids), latency))
        return comps

    def _options(self, req: Request) -> list[tuple[str, float, int, int]]:
        """(answer text, log-probability, tokens in, tokens out) of every allowed verdict. The prompt
        runs once; the continuations (each ending in EOS, so " 0" is not a prefix of " 0.5") reuse its
        KV cache. Votes differ only by seed, so the options are computed once per prompt."""
        import torch

        key = (req.prompt.system, req.prompt.user)
        if key in self._memo:
            return self._memo[key]
        head, cands = _choices(req)
        ctx = self.tok(self._chat(req) + head, add_special_tokens=False).input_ids
        conts = [self.tok(c, add_special_tokens=False).input_ids + [self.tok.eos_token_id] for c in cands]
        width = max(len(c) for c in conts)
        ids = torch.full((len(conts), width), self.tok.pad_token_id)
        mask = torch.zeros((len(conts), len(ctx) + width), dtype=torch.long)
        mask[:, : len(ctx)] = 1
        for k, c in enumerate(conts):
            ids[k, : len(c)] = torch.tensor(c)
            mask[k, len(ctx) : len(ctx) + len(c)] = 1
        dev = self.model.device
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ctx], device=dev), use_cache=True)
            first = torch.log_softmax(out.logits[0, -1].float(), -1)
            past = out.past_key_values
            past.batch_repeat_interleave(len(conts))
            logp = torch.log_softmax(self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev), past_key_values=past).logits.float(), -1)
        opts = []
        for k, (text, c) in enumerate(zip(cands, conts)):
            lp = float(first[c[0]]) + sum(float(logp[k, j, c[j + 1]]) for j in range(len(c) - 1))
            opts.append((head + text, lp, len(ctx), len(c)))
        if len(self._memo) > 4096:
            self._memo.clear()
        self._memo[key] = opts
        return opts

    def _constrained(self, batch: list[Request]) -> list[Completion]:
        """Sample each request's verdict with its temperature and seed (argmax at temperature 0)."""
        comps = []
        for r in batch:
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

    async def stream(self, requests: list[Request], stop: asyncio.Event) -> AsyncIterator[tuple[int, Completion]]:
        run = self._constrained if self.cfg.verdict == "constrained" else self._generate
        # Similar lengths per batch: less padding, faster.
        order = sorted(range(len(requests)), key=lambda i: (requests[i].temperature, len(requests[i].prompt.user)))
        bs = self.cfg.batch_size
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            groups: dict[float, list[int]] = {}
            for i in idx:
                groups.setdefault(requests[i].temperature, []).append(i)
            for group in groups.values():
                if stop.is_set():
                    raise Interrupted("stopped between batches")
                comps = await asyncio.to_thread(run, [requests[i] for i in group])
                for i, c in zip(group, comps):
                    yield i, c

    async def aclose(self) -> None:
        return None
