"""Sampling from a policy behind one small interface: `load_policy(cfg).generate(requests)`.

Fresh rollouts (`prm-distill rollout`) and Monte-Carlo step labels both need the *current policy's*
samples, on whatever the user has: vLLM's offline `LLM.generate` on a GPU box, transformers batched
generation anywhere, or an OpenAI-compatible server (vLLM, SGLang, llama.cpp, hosted) reached over
HTTP, round robin over several with health checks. Every backend renders the same chat prompt
(`problem_messages`), so a rollout and a Monte-Carlo completion of its prefix see the same context.

A request whose last message is from the assistant is a prefix to continue (Monte-Carlo): local
backends append it to the rendered prompt; servers get vLLM's `continue_final_message` extension.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .backbones import BackboneError, resolve_backbone
from .retry import JUDGE_RETRY_STATUSES, RetryPolicy

BACKENDS = ("auto", "transformers", "vllm", "openai")
DEFAULT_INSTRUCTION = "Solve the problem step by step, one step per paragraph, and end with the line 'The answer is <number>.'"


class PolicyError(ValueError):
    """The policy cannot be used (not found, not a causal LM, no chat template, unknown backend)."""


class PolicyUnavailable(RuntimeError):
    """A policy server did not answer after bounded retries on every endpoint; finished work is kept."""


@dataclass
class PolicyConfig:
    """Where the policy runs and how requests reach it (the sampling parameters travel per request)."""

    policy: str = field(default="smollm2", metadata={"help": (
        "Model folder or hub name ('smollm2' = the embedded SmolLM2-135M-Instruct); for backend=openai the model name "
        "sent to the server.")})
    backend: str = field(default="auto", metadata={"help": "auto (vllm when importable, else transformers) | transformers | vllm | openai."})
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": (
        "backend=openai: base URL ending in /v1; several comma-separated URLs are used round robin, skipping those that"
        " fail their health check.")})
    api_key_env: str = field(default="PRM_POLICY_API_KEY", metadata={"help": (
        "backend=openai: environment variable holding the API key (Bearer token, never logged).")})
    device: str = field(default="cpu", metadata={"help": "backend=transformers: cpu, cuda or auto."})
    batch_size: int = field(default=16, metadata={"help": "backend=transformers: sequences per generate call."})
    concurrency: int = field(default=8, metadata={"help": "backend=openai: requests in flight at once (over all endpoints)."})
    timeout_s: float = field(default=300.0, metadata={"help": "backend=openai: per-request timeout in seconds."})
    max_retries: int = field(default=3, metadata={"help": (
        "backend=openai: retries of a request (on another endpoint when there is one) before PolicyUnavailable.")})
    backoff_s: float = field(default=0.5, metadata={"help": "backend=openai: first retry delay in seconds, doubling each retry (a Retry-After header wins)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1 = off)."})
    instruction: str = field(default=DEFAULT_INSTRUCTION, metadata={"help": (
        "Text after the question in the user message (how to lay out steps and the answer).")})
    vllm: dict[str, Any] = field(default_factory=dict, metadata={"help": (
        "backend=vllm: extra vllm.LLM(...) arguments passed through, e.g. {tensor_parallel_size: 2, data_parallel_size:"
        " 2, gpu_memory_utilization: 0.8}.")})
    version: str = field(default="", metadata={"help": (
        "Policy version written into every record; empty = a fingerprint of the weights (local) or the server's model "
        "root (openai).")})

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PolicyError(f"policy backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.batch_size < 1 or self.concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise PolicyError("policy: batch_size, concurrency >= 1, max_retries >= 0, timeout_s > 0 and backoff_s >= 0 are required")
        if not 0 < self.top_p <= 1:
            raise PolicyError(f"policy: top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class GenRequest:
    """One sample: chat messages (a final assistant message is a prefix to continue) and its sampling."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs: hashable, so requests can be cache keys
    seed: int
    temperature: float
    max_new_tokens: int

    @property
    def chat(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    @property
    def prefix(self) -> str | None:
        """The assistant text to continue, or None for a fresh answer."""
        return self.messages[-1][1] if self.messages and self.messages[-1][0] == "assistant" else None


@dataclass(frozen=True)
class Generation:
    text: str  # the new text only (never the prefix)
    tokens_in: int
    tokens_out: int
    finish_reason: str  # "stop" (end of sequence) or "length" (max_new_tokens reached)


class Policy(Protocol):
    name: str  # "<backend>:<policy>", written as metadata.generator
    version: str

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        """One generation per request, in order. Raises PolicyUnavailable when a server gives up."""
        ...

    def close(self) -> None: ...


def problem_messages(question: str, instruction: str = DEFAULT_INSTRUCTION, prefix_steps: list[str] | None = None) -> tuple[tuple[str, str], ...]:
    """The one prompt a policy sees for a problem; with `prefix_steps` the assistant has already
    written those steps (blank-line separated, as the splitter reads them) and continues."""
    msgs: list[tuple[str, str]] = [("user", f"{question.strip()}\n\n{instruction}".strip())]
    if prefix_steps:
        msgs.append(("assistant", "\n\n".join(s.strip() for s in prefix_steps) + "\n\n"))
    return tuple(msgs)


def fingerprint(path: str | Path) -> str:
    """A short, stable version of a local model folder: config + weight file names, sizes and edges
    (hashing gigabytes of weights on every run would cost more than the rollouts)."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(root.iterdir()):
        if f.name == "config.json":
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".gguf"):
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 16))
                fh.seek(max(0, size - (1 << 16)))
                h.update(fh.read(1 << 16))
    return "sha256:" + h.hexdigest()[:16]


def check_causal_lm(path: str) -> None:
    """Raise PolicyError unless `path` holds a causal LM (a PRM checkpoint or an encoder is refused)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as e:
        where = "folder" if Path(path).exists() else "model (not a local folder, and the hub copy could not be loaded)"
        raise PolicyError(f"policy {path!r}: cannot read a model config from this {where}: {str(e).splitlines()[0]}") from None
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    archs = list(getattr(config, "architectures", None) or [])
    if archs and not any(a in causal or a.endswith("ForCausalLM") for a in archs):
        raise PolicyError(f"policy {path!r} is a {', '.join(archs)} checkpoint, not a causal LM: point --policy at the model that "
                          "writes the solutions (a PRM checkpoint scores steps, it cannot generate them)")
    if not archs and config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PolicyError(f"policy {path!r}: model type {config.model_type!r} has no causal-LM head in transformers")


def _local_path(name: str) -> str:
    try:
        path = resolve_backbone(name)
    except BackboneError as e:
        raise PolicyError(f"policy {name!r}: {e}") from None
    check_causal_lm(path)
    return path


def _render(tok, req: GenRequest) -> str:
    """Chat template with the generation prompt, then the assistant prefix (if any) verbatim."""
    msgs = req.chat[:-1] if req.prefix is not None else req.chat
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return text + (req.prefix or "")


class TransformersPolicy:
    """Batched `generate` with left padding; one seed per batch (generate has no per-row generator),
    so the same requests in the same batches give the same samples."""

    def __init__(self, cfg: PolicyConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = _local_path(cfg.policy)
        self.cfg = cfg
        self.name = f"transformers:{cfg.policy}"
        self.version = cfg.version or fingerprint(path)
        self.tok = AutoTokenizer.from_pretrained(path)
        if not self.tok.chat_template:
            raise PolicyError(f"policy {cfg.policy!r} has no chat template: use an instruct/chat model (its tokenizer must define one)")
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.tok.padding_side = "left"
        device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32 if device == "cpu" else "auto")
        self.model = model.to(device).eval()  # type: ignore[arg-type]
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos]) | {self.tok.eos_token_id}
        self.eos.discard(None)

    def _batch(self, batch: list[GenRequest]) -> list[Generation]:
        import torch

        enc = self.tok([_render(self.tok, r) for r in batch], return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
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

    def close(self) -> None:
        return None


# vLLM 0.32 on CPU: eager mode, and no chunked prefill: a seeded request whose prompt is split over
# steps crashes its CPU runner ("CPU Generator does not use offset"), e.g. 64 samples at once.
CPU_VLLM_KWARGS: dict[str, Any] = {"enforce_eager": True, "max_model_len": 4096, "enable_chunked_prefill": False}


def use_inprocess_vllm_on_cpu(engine_kwargs: dict[str, Any]) -> None:
    """On CPU, run vLLM's engine core in this process unless the user chose otherwise: as its own
    process it busy-polls a whole core, which on a small machine is half the compute (measured on 2
    cores: 64 seeded GSM8K samples at 131 generated tokens/s with it, 210 without, same samples).
    Parallel engines keep their processes."""
    parallel = any(int(engine_kwargs.get(k, 1) or 1) > 1 for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
    if not parallel:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def vllm_engine_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """`vllm.LLM` arguments for this host, `options` (the user's `*.vllm`) last: on GPU dtype auto; on
    CPU fp32 (2-4x faster than bf16 there: ../shared/notes/vllm-on-cpu.md), `CPU_VLLM_KWARGS`, and
    the engine core in process. The one place the rollout policy and the offline judge get them."""
    import torch

    if torch.cuda.is_available():
        return {"dtype": "auto", **options}
    kwargs = {"dtype": "float32", **CPU_VLLM_KWARGS, **options}
    use_inprocess_vllm_on_cpu(kwargs)
    return kwargs


class VLLMPolicy:
    """vLLM offline batch generation: every request goes to one `LLM.generate` call so its scheduler
    batches them; `cfg.vllm` passes tensor/data parallel sizes and other engine options through."""

    def __init__(self, cfg: PolicyConfig):
        try:
            from vllm import LLM
        except ImportError:
            raise PolicyError("policy backend vllm needs vLLM (pip install 'prm_distill[vllm]'); use --backend transformers or openai") from None

        path = _local_path(cfg.policy)
        self.cfg = cfg
        self.name = f"vllm:{cfg.policy}"
        self.version = cfg.version or fingerprint(path)
        self.llm = LLM(model=path, **vllm_engine_kwargs(cfg.vllm))
        self.tok = self.llm.get_tokenizer()

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        from vllm import SamplingParams

        params = [SamplingParams(temperature=r.temperature, seed=r.seed, max_tokens=r.max_new_tokens, top_p=self.cfg.top_p) for r in requests]
        prompts = [_render(self.tok, r) for r in requests]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [Generation(o.outputs[0].text, len(o.prompt_token_ids or []), len(o.outputs[0].token_ids),
                           "length" if o.outputs[0].finish_reason == "length" else "stop") for o in outs]

    def close(self) -> None:
        return None


class EndpointPool:
    """Round robin over OpenAI-compatible endpoints; an endpoint that fails is skipped for
    `cooldown_s`, and when all are down the one down longest is tried (a restart may have fixed it)."""

    def __init__(self, urls: list[str], cooldown_s: float = 30.0):
        if not urls:
            raise PolicyError("no endpoint URL given")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown_s = cooldown_s
        self.down_since: dict[str, float] = {}
        self._cycle = itertools.cycle(self.urls)
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, base_url: str, cooldown_s: float = 30.0) -> "EndpointPool":
        return cls([u.strip() for u in base_url.split(",") if u.strip()], cooldown_s)

    def pick(self) -> str:
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.urls)):
                u = next(self._cycle)
                if now - self.down_since.get(u, -1e18) >= self.cooldown_s:
                    return u
            return min(self.urls, key=lambda u: self.down_since[u])

    def mark_down(self, url: str) -> None:
        with self._lock:
            self.down_since[url] = time.monotonic()

    def mark_up(self, url: str) -> None:
        with self._lock:
            self.down_since.pop(url, None)


class OpenAIPolicy:
    """Chat completions against one or more OpenAI-compatible servers, `concurrency` in flight.
    Health check at start (GET /models): endpoints that fail it are skipped; none healthy is an error."""

    def __init__(self, cfg: PolicyConfig):
        import httpx

        self.cfg = cfg
        self.name = f"openai:{cfg.policy}"
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        self.client = httpx.Client(headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=cfg.timeout_s)
        self.pool = EndpointPool.parse(cfg.base_url)
        roots: dict[str, dict[str, Any] | None] = {}
        last = ""
        for url in self.pool.urls:
            try:
                r = self.client.get(f"{url}/models", timeout=min(cfg.timeout_s, 10.0))
                r.raise_for_status()
                roots[url] = {m.get("id"): m.get("root") for m in r.json().get("data", [])}
            except (httpx.HTTPError, ValueError, AttributeError) as e:
                self.pool.mark_down(url)
                roots[url] = None
                last = f"{type(e).__name__}: {e}"
        healthy = [u for u in self.pool.urls if roots[u] is not None]
        if not healthy:
            raise PolicyUnavailable(f"no policy server answered GET /models at {', '.join(self.pool.urls)} ({last})")
        served = roots[healthy[0]]
        if served and cfg.policy not in served:
            raise PolicyError(f"policy server {healthy[0]} does not serve model {cfg.policy!r}; it serves {sorted(served)}")
        self.version = cfg.version or str((served or {}).get(cfg.policy) or cfg.policy)
        self.executor = ThreadPoolExecutor(cfg.concurrency)
        self.retry = RetryPolicy(max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, retry_statuses=JUDGE_RETRY_STATUSES)

    def _one(self, req: GenRequest) -> Generation:
        import httpx

        body: dict[str, Any] = {"model": self.cfg.policy, "messages": req.chat, "n": 1, "seed": req.seed,
                                "temperature": req.temperature, "max_tokens": req.max_new_tokens, "top_p": self.cfg.top_p}
        if req.prefix is not None:  # vLLM/SGLang extension: continue the assistant's partial answer
            body |= {"continue_final_message": True, "add_generation_prompt": False}
        reason = ""
        for attempt in range(self.cfg.max_retries + 1):
            url, headers = self.pool.pick(), None
            try:
                r = self.client.post(f"{url}/chat/completions", json=body)
            except httpx.TransportError as e:  # timeouts included: the next attempt goes to another endpoint
                self.pool.mark_down(url)
                reason = f"{url}: {type(e).__name__}: {e}"
            else:
                if self.retry.retries_status(r.status_code):
                    self.pool.mark_down(url)
                    reason, headers = f"{url}: HTTP {r.status_code}", r.headers
                elif r.status_code != 200:
                    raise PolicyUnavailable(f"policy server {url}: HTTP {r.status_code} (not retried): {r.text[:300]}")
                else:
                    try:
                        data = r.json()
                        choice = data["choices"][0]
                        usage = data.get("usage") or {}
                        text = str(choice["message"]["content"] or "")
                    except (ValueError, KeyError, IndexError, TypeError):
                        reason = f"{url}: malformed response body {r.text[:120]!r}"
                    else:
                        self.pool.mark_up(url)
                        return Generation(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                                          "length" if choice.get("finish_reason") == "length" else "stop")
            if attempt < self.cfg.max_retries:
                time.sleep(self.retry.delay(attempt, headers))
        raise PolicyUnavailable(f"policy {self.cfg.policy!r} failed after {self.cfg.max_retries + 1} attempts: {reason}")

    def generate(self, requests: list[GenRequest]) -> list[Generation]:
        return list(self.executor.map(self._one, requests))

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.client.close()


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def load_policy(cfg: PolicyConfig) -> Policy:
    """The policy on the chosen backend (auto: vLLM when importable, else transformers)."""
    backend = cfg.backend
    if backend == "auto":
        backend = "vllm" if vllm_available() else "transformers"
    if backend == "openai":
        return OpenAIPolicy(cfg)
    if backend == "vllm":
        return VLLMPolicy(cfg)
    return TransformersPolicy(cfg)


def sampling_metadata(cfg: PolicyConfig, temperature: float, max_new_tokens: int, seed: int, **extra: Any) -> dict[str, Any]:
    """The sampling parameters as recorded next to every sample (JSON-ready)."""
    return {"temperature": temperature, "top_p": cfg.top_p, "max_new_tokens": max_new_tokens, "seed": seed, **extra}
