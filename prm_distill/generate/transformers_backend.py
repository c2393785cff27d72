"""The policy in process with transformers: batched `generate`, anywhere torch runs."""

from __future__ import annotations

from typing import Any

from .base import Generation, GenerationStopped, GenRequest, PolicyError, Watch
from .config import PolicyConfig
from .fingerprint import fingerprint, local_path
from .prompts import render


class _Watcher:
    """A `transformers` stopping criterion that reports and stops, checked after every token: each
    row as it finishes (EOS or its own max_new_tokens) goes to `watch.on_sample`, the step's new
    tokens to `watch.on_tokens`, and `watch.should_stop()` ends every row at once (the unfinished
    ones are then dropped by the caller). It never stops a row on its own, so the tokens generated
    are those of a call without it."""

    def __init__(self, policy: "TransformersPolicy", batch: list[GenRequest], indices: list[int], prompt_len: int,
                 tokens_in: list[int], watch: Watch) -> None:
        self.policy, self.batch, self.indices, self.prompt_len, self.tokens_in, self.watch = policy, batch, indices, prompt_len, tokens_in, watch
        self.done: dict[int, Generation] = {}
        self.stopped = False

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[:, self.prompt_len:]
        step = new.shape[1]
        last = new[:, -1].tolist()
        running = [row for row in range(len(self.batch)) if row not in self.done]
        self.watch.tokens(len(running))
        for row in running:
            if last[row] in self.policy.eos or step >= self.batch[row].max_new_tokens:
                gen = self.policy._generation(self.batch[row], new[row].tolist(), self.tokens_in[row])
                if gen is not None:
                    self.done[row] = gen
                    self.watch.sample(self.indices[row], gen)
        self.stopped = self.stopped or self.watch.stop()
        return torch.full((input_ids.shape[0],), self.stopped, dtype=torch.bool, device=input_ids.device)


class TransformersPolicy:
    """Batched `generate` with left padding; one seed per batch (generate has no per-row generator),
    so the same requests in the same batches give the same samples. With a `Watch`, progress is
    reported per token and per finished sample, and a stop request ends the call within a token."""

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

    def _generation(self, r: GenRequest, row: list[int], tokens_in: int) -> Generation | None:
        """The sample in `row` (its new tokens so far): cut at the first EOS ("stop") or at its
        max_new_tokens ("length"); None while it is neither (a row cut short by a stop request)."""
        ids = row[: r.max_new_tokens]
        for j, i in enumerate(ids):
            if i in self.eos:
                return Generation(str(self.tok.decode(ids[:j], skip_special_tokens=True)), tokens_in, j, "stop")
        if len(ids) < r.max_new_tokens:
            return None
        return Generation(str(self.tok.decode(ids, skip_special_tokens=True)), tokens_in, len(ids), "length")

    def _batch(self, batch: list[GenRequest], indices: list[int], watch: Watch | None = None) -> list[Generation]:
        import torch
        from transformers import StoppingCriteriaList

        enc = self.tok([render(self.tok, r) for r in batch], return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        t = batch[0].temperature
        prompt_len = enc["input_ids"].shape[1]
        tokens_in = [int(m.sum()) for m in enc["attention_mask"]]
        watcher = _Watcher(self, batch, indices, prompt_len, tokens_in, watch) if watch is not None else None
        torch.manual_seed(sum(r.seed * 7919**i for i, r in enumerate(batch)) % (2**31))
        with torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max(r.max_new_tokens for r in batch), do_sample=t > 0, temperature=t if t > 0 else None,
                top_p=self.cfg.top_p if t > 0 and self.cfg.top_p < 1 else None, top_k=None, pad_token_id=self.tok.pad_token_id,
                **({"stopping_criteria": StoppingCriteriaList([watcher])} if watcher is not None else {}),
            )
        gens: list[Generation] = []
        for k, (r, row) in enumerate(zip(batch, out[:, prompt_len:].tolist())):
            gen = watcher.done.get(k) if watcher is not None else None
            gen = gen or self._generation(r, row, tokens_in[k])
            if gen is None:  # cut short by a stop request: what finished was reported, the rest is dropped
                raise GenerationStopped(f"stopped after {len(watcher.done) if watcher else 0} of {len(batch)} samples of a batch")
            if watcher is not None and k not in watcher.done:
                watcher.watch.sample(indices[k], gen)
            gens.append(gen)
        return gens  # whole (even when a stop came on the step its last row finished: the next check raises)

    def generate(self, requests: list[GenRequest], watch: Watch | None = None) -> list[Generation]:
        """One generation per request, in batches of `batch_size` (per temperature). With `watch`:
        progress per token and per finished sample; `GenerationStopped` within a token of
        `watch.should_stop()`, once every finished sample has been reported."""
        out: list[Generation | None] = [None] * len(requests)
        by_temp: dict[float, list[int]] = {}
        for i, r in enumerate(requests):
            by_temp.setdefault(r.temperature, []).append(i)
        for idx in by_temp.values():
            for start in range(0, len(idx), self.cfg.batch_size):
                if watch is not None and watch.stop():
                    raise GenerationStopped("stopped between batches")
                chunk = idx[start : start + self.cfg.batch_size]
                for i, g in zip(chunk, self._batch([requests[i] for i in chunk], chunk, watch)):
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
