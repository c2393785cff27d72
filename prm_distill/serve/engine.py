"""In-process batched scoring engine over an exported checkpoint.

Loads through `checkpoint.py` (safetensors only, no remote code) and scores through the shared
encoder and `inference.score_encoded`, so its numbers are the evaluation path's numbers.

Speed on CPU (`cpu_kernels`): `fused` runs Llama-family models through `fused.py` (oneDNN-prepacked
weights, q/k/v as one matmul, SiLU, gate product and residual adds fused into the projections,
mask-free causal attention on right-padded batches); other architectures fall back to `onednn`,
which runs fp32 `Linear` layers through oneDNN (`torch.utils.mkldnn`: on some CPUs MKL's fp32 path
is half as fast); `torch` is the plain `transformers` forward. All three give the evaluation path's
scores (fp32 within 1e-5, tested). `auto` (the default) picks per dtype and CPU vendor
(`AUTO_CPU_KERNELS`): the kernels that were faster side by side with vLLM's pooling runner
(benchmarks/engine_vs_vllm.py).
bf16 is another 2-3x on CPUs with native bf16 (AVX512-BF16/AMX); `dtype="auto"` picks it there and
on GPUs, fp32 elsewhere.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from .. import calibration as calib
from ..checkpoint import CalibrationWatch, Sidecar, load_checkpoint, pad_token_id
from ..encoding import EncodedTrajectory, encoder_for
from ..inference import score_encoded
from ..steps import SplitConfig, split_steps, splitter_config
from ..verify import apply_rule
from .cpu import cpu_has_native_bf16, cpu_vendor
from .fused import FusedTokenClassifier, fused_support

log = logging.getLogger(__name__)
DTYPES = ("auto", "float32", "bfloat16", "float16")
CPU_KERNELS = ("auto", "fused", "onednn", "torch")
# What `cpu_kernels="auto"` runs on CPU, by (dtype, CPU vendor; None = any other), measured side by
# side with vLLM's pooling runner on the same cores (benchmarks/engine_vs_vllm.py, docs/serving-vllm.md).
# bf16: the fused runner (AMD EPYC, AVX512-BF16: 1.16x vLLM per CPU-second, the plain forward 0.93x;
# Intel Xeon with AMX, an earlier build: 1.06x). fp32 on Intel: the plain forward, whose matmuls are
# MKL's (1.07x vLLM; the fused runner then 0.94x, 0.95-0.99x with the tags-only last layer since).
# fp32 elsewhere: the fused runner, on oneDNN (AMD EPYC: 1.05x vLLM per CPU-second, the plain forward
# 0.93x). Other dtypes run the plain forward.
AUTO_CPU_KERNELS: dict[tuple[torch.dtype, str | None], str] = {
    (torch.bfloat16, None): "fused",
    (torch.float32, "GenuineIntel"): "torch",
    (torch.float32, None): "fused",
}
# On CPU one forward pass takes at most this many tokens (batch x longest window), so activations
# stay in cache: 96 ProcessBench GSM8K items (44k tokens), fp32, 2 cores, the 16-layer student:
# 50.2 s in passes of up to 16384 tokens, 35.3 s at 4096, 36.4 s at 2048, 37.4 s at 1024
# (benchmarks/forward_tokens.py; a scratch run gave 53.4 / 38.2 / 31.1 / 32.4 s and 36.7 s at 512).
CPU_FORWARD_TOKENS = 2048


def _pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str | None, device: str) -> torch.dtype:
    """None = bf16 on GPU, float32 on CPU (exact: the evaluation default); auto = bf16 wherever the
    hardware multiplies it natively (GPU, AVX512-BF16/AMX CPUs), float32 elsewhere."""
    if dtype is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {'|'.join(DTYPES)}, got {dtype!r}")
    if dtype == "auto":
        fast_bf16 = device.startswith("cuda") or (device == "cpu" and cpu_has_native_bf16())
        return torch.bfloat16 if fast_bf16 else torch.float32
    return getattr(torch, dtype)


def onednn_linears(model: torch.nn.Module) -> torch.nn.Module:
    """fp32 CPU model with its Linear layers run by oneDNN (inference only; weights are repacked)."""
    if not torch.backends.mkldnn.is_available():
        return model
    from torch.utils.mkldnn import to_mkldnn

    return to_mkldnn(model)


def auto_cpu_kernels(dtype: torch.dtype, vendor: str | None = None) -> str:
    """The CPU kernels `cpu_kernels="auto"` picks for a model in `dtype` on a CPU from `vendor`
    (None = this one's), from `AUTO_CPU_KERNELS`."""
    vendor = vendor or cpu_vendor()
    return AUTO_CPU_KERNELS.get((dtype, vendor)) or AUTO_CPU_KERNELS.get((dtype, None)) or "torch"


def cpu_runner(model: torch.nn.Module, kernels: str) -> torch.nn.Module:
    """The model to run on CPU for `kernels` (see the module doc); auto picks by the model's dtype;
    falls back fused -> onednn -> torch."""
    if kernels not in CPU_KERNELS:
        raise ValueError(f"cpu_kernels must be one of {'|'.join(CPU_KERNELS)}, got {kernels!r}")
    if kernels == "auto":
        kernels = auto_cpu_kernels(next(model.parameters()).dtype)
        log.info("engine: %s kernels on CPU (cpu_kernels=auto)", kernels)
    if kernels == "fused":
        reason = fused_support(model)
        if reason is None:
            return FusedTokenClassifier(model)
        log.info("engine: not fused (%s); oneDNN linears instead", reason)
        kernels = "onednn"
    if kernels == "onednn" and next(model.parameters()).dtype == torch.float32:
        return onednn_linears(model)
    return model


class PRMEngine:
    """Score (question, steps) pairs with one forward pass per trajectory window.

    `calibration()` is the checkpoint's current calibration: when loaded from a folder it is
    re-read whenever the sidecar changes (`recalibrate --adopt`), so a server picks up a new
    calibration without a restart. `score` returns raw P(good); `calibrate` maps it.
    """

    def __init__(self, model, tokenizer, sidecar: Sidecar, *, max_batch_tokens: int = 16384, model_id: str = "prm",
                 model_dir: str | Path | None = None, verifier: bool = True, forward_tokens: int | None = None):
        if max_batch_tokens < 1 or (forward_tokens is not None and forward_tokens < 1):
            raise ValueError("max_batch_tokens and forward_tokens must be >= 1")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.sidecar = sidecar
        self.model_id = model_id
        self.max_batch_tokens = max_batch_tokens
        # tokens of one forward pass; a longer batch is run in several passes (same scores)
        self.forward_tokens = min(max_batch_tokens, forward_tokens or max_batch_tokens)
        self.encoder = encoder_for(tokenizer, sidecar)
        self.pad_id = pad_token_id(tokenizer)
        # the checkpoint's verifier rule (a refuted step is capped), unless switched off to compare
        self.verifier_rule = sidecar.verifier if verifier else None
        self._watch = CalibrationWatch(model_dir, sidecar.calibration) if model_dir is not None else None

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path, *, device: str = "auto", dtype: str | None = None,
                        max_batch_tokens: int = 16384, cpu_kernels: str = "auto", verifier: bool = True,
                        forward_tokens: int | None = None) -> "PRMEngine":
        """`dtype`: None, auto, float32, bfloat16, float16 (see `resolve_dtype`). `cpu_kernels`: auto
        (per dtype and CPU vendor: `AUTO_CPU_KERNELS`) | fused | onednn | torch.
        `forward_tokens`: most tokens in one forward pass (default: `CPU_FORWARD_TOKENS` on CPU, else
        `max_batch_tokens`)."""
        if cpu_kernels not in CPU_KERNELS:
            raise ValueError(f"cpu_kernels must be one of {'|'.join(CPU_KERNELS)}, got {cpu_kernels!r}")
        device = _pick_device(device)
        torch_dtype = resolve_dtype(dtype, device)
        model, tok, sidecar = load_checkpoint(model_dir, device=device, dtype=torch_dtype)
        if device == "cpu":
            model = cpu_runner(model, cpu_kernels)
        calib.validate(sidecar.calibration, f"{model_dir}: calibration")
        log.info("engine: %s on %s in %s", Path(model_dir).name, device, str(torch_dtype).removeprefix("torch."))
        if forward_tokens is None and device == "cpu":
            forward_tokens = CPU_FORWARD_TOKENS
        return cls(model, tok, sidecar, max_batch_tokens=max_batch_tokens, model_id=Path(model_dir).name, model_dir=model_dir, verifier=verifier,
                   forward_tokens=forward_tokens)

    def encode(self, question: str, steps: Sequence[str]) -> EncodedTrajectory:
        return self.encoder.encode(question, list(steps))

    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """Per-step P(good) for each (question, steps): the model's, with the checkpoint's verifier
        rule applied (a step with a refuted statement is capped; every other score is the model's)."""
        encoded = [self.encode(q, s) for q, s in items]
        raw = score_encoded(self.model, encoded, self.pad_id, self.forward_tokens)
        return apply_rule(self.verifier_rule, items, raw)

    def calibration(self) -> dict[str, Any] | None:
        """The calibration in force now (re-read from the sidecar when it changed)."""
        return self._watch.current() if self._watch is not None else self.sidecar.calibration

    def calibrate(self, scores: Sequence[Sequence[float]], calibration: dict[str, Any] | None = None) -> list[list[float]]:
        """Calibrated copies of per-step scores (the current calibration unless one is given)."""
        cal = self.calibration() if calibration is None else calibration
        return [calib.apply(s, cal).tolist() for s in scores]

    def score_response(self, question: str, response: str, splitter: SplitConfig | None = None,
                       split: SplitConfig | None = None) -> tuple[list[str], list[float]]:
        """Split a raw response with the shared splitter, then score it (`split` is `splitter`'s old name)."""
        steps = split_steps(response, splitter_config(splitter, split))
        return steps, self.score([(question, steps)])[0]
