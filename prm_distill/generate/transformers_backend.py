"""The policy in process with transformers: batched `generate`, anywhere torch runs."""

from __future__ import annotations

from typing import Any

from .base import Generation, GenRequest, PolicyError
from .config import PolicyConfig
from .fingerprint import fingerprint, local_path
from .prompts import render


class TransformersPolicy:
    """Batched `generate` with left padding; one seed per batch (generate has no per-row generator),
    so the same requests in the same batches give the same samples."""

    def __init__(self, cfg: PolicyConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = local_path(cfg.policy)
        self.cfg = cfg
        self.name = f"transformers:{cfg.policy}"
        self.version = cfg.version or fingerprint(path)
        self.tok: Any = AutoTokenizer.from_pretrained(path)
        if not self.tok.chat_template:
            raise PolicyError(f"policy {cfg.policy!r} has no chat template: use an instruct/chat model (its tokenizer must define one)")
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.tok.padding_side = "left"
        device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32 if device == "cpu" else "auto")
        self.model: Any = model.to(device).eval()  # type: ignore[arg-type]
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) | {self.tok.eos_token_id}
        self.eos.discard(None)

    def _batch(self, batch: list[GenRequest]) -> list[Generation]:
        import torch

        enc = self.tok([render(self.tok, r) for r in batch], return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        t = batch[0].temperature
        torch.manual_seed(sum(r.seed * 7919**i for i, r in enumerate(batch)) % (2**31))
        with torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max(r.max_new_tokens for r in batch), do_sample=t > 0, temperature=t if t > 0 else None,
                top_p=self.cfg.top_p if t > 0 and self.cfg.top_p < 1 else None, top_k=None, pad_token_id=self.tok.pad_token_id,
            )
        gens = []
        for r, row, mask in zip(batch, out[:, enc["input_ids"].shape[1]:].tolist(), enc["attention_mask"]):
            ids, reason = row[: r.max_new_tokens], "length"
            for j, i in enumerate(ids):
                if i in self.eos:
                    ids, reason = ids[:j], "stop"
                    break
            gens.append(Generation(str(self.tok.decode(ids, skip_special_tokens=True)), int(mask.sum()), len(ids), reason))
        return gens

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        by_temp: dict[float, list[int]] = {}
        for i, r in enumerate(requests):
            by_temp.setdefault(r.temperature, []).append(i)
        for idx in by_temp.values():
            for start in range(0, len(idx), self.cfg.batch_size):
                chunk = idx[start : start + self.cfg.batch_size]
                for i, g in zip(chunk, self._batch([requests[i] for i in chunk])):
                    out[i] = g
        return out  # type: ignore[return-value]

    def option_logprobs(self, req: GenRequest, options: list[str]) -> list[tuple[float, int, int]]:
        """(log-probability, tokens in, tokens out) of each option as the whole continuation of `req`
        (its rendered chat, prefix included), each option ending in EOS so that " 0" is not counted
        as a prefix of " 0.5". The prompt runs once; the options reuse its KV cache."""
        import torch

        ctx = self.tok(render(self.tok, req), add_special_tokens=False).input_ids
        conts = [self.tok(c, add_special_tokens=False).input_ids + [self.tok.eos_token_id] for c in options]
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
        return [(float(first[c[0]]) + sum(float(logp[k, j, c[j + 1]]) for j in range(len(c) - 1)), len(ctx), len(c))
                for k, c in enumerate(conts)]

    def close(self) -> None:
        return None
