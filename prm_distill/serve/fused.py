"""A scoring forward pass for Llama-family token classifiers on CPU, with oneDNN's fused linears.

Why: on CPU the engine's time goes to the linear layers and to what sits between them. Generic
`transformers` modules run each projection, the SiLU, the gate product and every residual add as
separate passes over memory, and `torch.utils.mkldnn` adds a layout conversion around every
linear. This runner does what vLLM's CPU model runner does, with ops torch already ships:
- weights prepacked once for oneDNN (`mkldnn._reorder_linear_weight`), activations stay dense;
- q, k and v as one matmul;
- SiLU fused into the gate projection, the gate product into the up projection, and each residual
  add into the projection before it (oneDNN post-ops: `mkldnn._linear_pointwise`);
- causal attention without a mask: batches are right-padded, so a real token never attends to a
  pad (pads only follow it), and only real positions (the step tags) are ever read;
- grouped-query attention without copying k and v per query head;
- bf16 attention in blocks of query rows (`_causal_attention`) on CPUs without AMX: there torch's
  CPU flash kernel runs bf16 no faster than fp32 (a quarter of a bf16 forward pass); bf16 matmuls
  over 64-row blocks with a softmax that accumulates in fp32, as `transformers`' eager attention
  computes it, take 35-50% less time at 128-1024 tokens on an AVX512-BF16 EPYC. fp32, and bf16 on AMX CPUs (where
  the flash kernel's measured 1.06x vLLM came from), keep the flash kernel;
- `logits_at`: the scorer reads the logits of the step tags only, so the last layer runs its query,
  attention output and MLP at those positions alone (keys and values still at every position): the
  last layer's cost nearly vanishes (1/L of the forward pass for an L-layer model). vLLM's pooling
  runner computes every position's hidden state before the pooler picks the tags.
A window's scores depend on the batch it is scored in by float rounding only (< 1e-6 in fp32,
tested): `logits_at`'s sums run over the window's own positions, not the batch's padded length.
Scores equal the `transformers` forward's within float rounding (fp32: < 1e-5, tested).

Inference only, CPU only; `fused_support` says why a model cannot use it (the engine then keeps
the generic path).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import TokenClassifierOutput

from .cpu import cpu_has_amx, cpu_has_onednn_bf16

ARCHITECTURES = ("llama", "qwen2", "mistral")
DTYPES = (torch.float32, torch.bfloat16)


def fused_support(model: Any) -> str | None:
    """None when `model` can run fused on CPU, else the reason it cannot."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in ARCHITECTURES:
        return f"architecture {getattr(cfg, 'model_type', None)!r} is not one of {', '.join(ARCHITECTURES)}"
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise") or not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN linear kernels"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {cfg.hidden_act!r} (only silu is fused)"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    window = getattr(cfg, "sliding_window", None)
    if window is not None and getattr(cfg, "use_sliding_window", True):
        return f"sliding-window attention ({window} tokens)"
    param = next(model.parameters())
    if param.device.type != "cpu":
        return f"device {param.device} (the fused runner is for CPU)"
    if param.dtype not in DTYPES:
        return f"dtype {param.dtype} (float32 and bfloat16 are fused)"
    if param.dtype == torch.bfloat16 and not cpu_has_onednn_bf16():
        return "bfloat16 on a CPU without AVX512 BW/VL/DQ or AVX-NE-CONVERT (oneDNN's bf16 linears need them)"
    if not hasattr(model, "score") or not hasattr(getattr(model, "model", None), "layers"):
        return "not a *ForTokenClassification model with .model.layers and .score"
    return None


def _pack(*linears: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One oneDNN-prepacked weight (and bias) for linears that read the same input, stacked by output."""
    weight = torch.cat([lin.weight.detach() for lin in linears], dim=0).contiguous()
    biases = [lin.bias for lin in linears]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([b.detach() if b is not None else weight.new_zeros(lin.out_features)
                          for b, lin in zip(biases, linears, strict=True)]).contiguous()
    return torch.ops.mkldnn._reorder_linear_weight(weight, None), bias


def _linear(x: torch.Tensor, packed: tuple[torch.Tensor, torch.Tensor | None], post: str = "none") -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed[0], packed[1], post, [], "")


def _linear_then(x: torch.Tensor, other: torch.Tensor, packed: tuple[torch.Tensor, torch.Tensor | None], op: str) -> torch.Tensor:
    """linear(x) `op` other in one pass (op: add | mul)."""
    return torch.ops.mkldnn._linear_pointwise(x, other, packed[0], packed[1], op)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As `transformers`' LlamaRMSNorm: normalised in fp32, cast back, then scaled."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


ATTENTION_BLOCK = 64  # query rows per block of the bf16 attention


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, blocked: bool | None = None) -> torch.Tensor:
    """Causal attention, q [b, heads, n, d], k and v [b, kv_heads, n, d] (query head h reads kv head
    h // (heads / kv_heads), as `transformers`' repeat_kv does) -> [b, heads, n, d]. `blocked`: the
    row blocks instead of torch's kernel (None = for bf16 on CPUs without AMX, see the module doc)."""
    b, heads, n, d = q.shape
    kv_heads = k.shape[1]
    if blocked is None:
        blocked = q.dtype == torch.bfloat16 and not cpu_has_amx()
    if not blocked:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=kv_heads != heads)
    g = heads // kv_heads
    qg = (q * scale).reshape(b, kv_heads, g, n, d)  # scaled once, not every block's scores
    k, v = k.contiguous(), v.contiguous()  # so each block's matmuls read them in place
    out = q.new_empty(b, kv_heads, g, n, d)
    for start in range(0, n, ATTENTION_BLOCK):
        end = min(n, start + ATTENTION_BLOCK)
        m = end - start
        # the block's rows of the g query heads that share a kv head, stacked: one matmul per kv head, no k/v copies
        scores = torch.matmul(qg[:, :, :, start:end].reshape(b, kv_heads, g * m, d), k[:, :, :end].transpose(-1, -2))
        if m > 1:  # the diagonal block: row i sees keys up to start + i
            scores.view(b, kv_heads, g, m, end)[..., start:end].masked_fill_(torch.ones(m, m, dtype=torch.bool).triu_(1), float("-inf"))
        out[:, :, :, start:end] = torch.matmul(scores.softmax(-1), v[:, :, :end]).view(b, kv_heads, g, m, d)  # softmax accumulates in fp32
    return out.view(b, heads, n, d)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return torch.addcmul(x * cos, rotated, sin)


class _FusedLayer(nn.Module):
    def __init__(self, layer: Any, cfg: Any, last: bool = False):
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = getattr(attn, "scaling", self.head_dim ** -0.5)
        self.eps1: float = layer.input_layernorm.variance_epsilon
        self.eps2: float = layer.post_attention_layernorm.variance_epsilon
        self.ln1: torch.Tensor = layer.input_layernorm.weight.detach()
        self.ln2: torch.Tensor = layer.post_attention_layernorm.weight.detach()
        self.qkv = _pack(attn.q_proj, attn.k_proj, attn.v_proj)
        if last:  # `forward_at`: the query at a few positions, keys and values at all of them
            self.q, self.kv = _pack(attn.q_proj), _pack(attn.k_proj, attn.v_proj)
        self.o = _pack(attn.o_proj)
        self.gate, self.up, self.down = _pack(mlp.gate_proj), _pack(mlp.up_proj), _pack(mlp.down_proj)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, _ = h.shape
        qkv = _linear(_rms_norm(h, self.ln1, self.eps1), self.qkv)
        q, k, v = qkv.split([self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        q = _rotate(q.view(b, n, self.heads, self.head_dim).transpose(1, 2), cos, sin)
        k = _rotate(k.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        a = _causal_attention(q, k, v, self.scale)
        h = _linear_then(a.transpose(1, 2).reshape(b, n, self.heads * self.head_dim), h, self.o, "add")
        return self._mlp(h)

    def _mlp(self, h: torch.Tensor) -> torch.Tensor:
        x = _rms_norm(h, self.ln2, self.eps2)
        gated = _linear_then(x, _linear(x, self.gate, "swish"), self.up, "mul")
        return _linear_then(gated, h, self.down, "add")

    def forward_at(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The layer's output at positions (rows[i], cols[i]) only, [len(rows), hidden]. Each window's
        queries attend to that window's keys up to its last scored position (the batch's padded
        length never enters a sum)."""
        b, n, _ = h.shape
        x = _rms_norm(h, self.ln1, self.eps1)
        k, v = _linear(x, self.kv).split([self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        k = _rotate(k.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
        v = v.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q = _linear(x[rows, cols], self.q).view(len(rows), self.heads, self.head_dim)
        q = _rotate(q, cos[0, 0][cols].unsqueeze(1), sin[0, 0][cols].unsqueeze(1))
        parts, offset = [], 0
        for window, count in enumerate(torch.bincount(rows, minlength=b).tolist()):
            if not count:
                continue
            at = cols[offset : offset + count]
            keys = int(at.max()) + 1
            causal = torch.arange(keys, device=at.device)[None, :] <= at[:, None]  # [count, keys]
            a = F.scaled_dot_product_attention(q[offset : offset + count].transpose(0, 1).unsqueeze(0), k[window : window + 1, :, :keys],
                                               v[window : window + 1, :, :keys], attn_mask=causal, scale=self.scale,
                                               enable_gqa=self.kv_heads != self.heads)
            parts.append(a[0].transpose(0, 1).reshape(count, self.heads * self.head_dim))
            offset += count
        return self._mlp(_linear_then(torch.cat(parts), h[rows, cols], self.o, "add"))


class FusedTokenClassifier(nn.Module):
    """The forward pass of a Llama-family `*ForTokenClassification` for scoring (see module doc).

    Takes right-padded `input_ids` and their `attention_mask` (checked to be right padding) and
    returns `.logits` like the model it was built from. The model's layer weights are repacked,
    so build it from a model you no longer train."""

    def __init__(self, model: Any):
        super().__init__()
        reason = fused_support(model)
        if reason is not None:
            raise ValueError(f"cannot fuse this model: {reason}")
        base = model.model
        self.config = model.config
        self.embed: nn.Module = base.embed_tokens
        self.rotary: nn.Module = base.rotary_emb
        self.norm_weight: torch.Tensor = base.norm.weight.detach()
        self.norm_eps: float = base.norm.variance_epsilon
        self.score: nn.Module = model.score
        last = len(base.layers) - 1
        self.layers = nn.ModuleList(_FusedLayer(layer, model.config, last=i == last) for i, layer in enumerate(base.layers))

    def get_input_embeddings(self) -> nn.Module:
        """As on a `transformers` model: every pass, full or `logits_at`, starts there."""
        return self.embed

    def _embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if attention_mask is not None:
            lengths = attention_mask.sum(dim=1, keepdim=True)
            positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
            if not torch.equal(attention_mask.bool(), positions < lengths):
                raise ValueError("the fused runner needs right padding (the attention mask must be ones, then zeros)")
        h = self.get_input_embeddings()(input_ids)
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        cos, sin = self.rotary(h, position_ids)
        return h, cos.unsqueeze(1), sin.unsqueeze(1)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> TokenClassifierOutput:
        h, cos, sin = self._embed(input_ids, attention_mask)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return TokenClassifierOutput(logits=self.score(_rms_norm(h, self.norm_weight, self.norm_eps)))

    @torch.inference_mode()
    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """[len(rows), num_labels]: `forward(...).logits[rows, cols]` with the last layer run at those
        positions only. `rows` must be grouped (all positions of window 0, then of window 1, ...), as
        `inference.tag_index` gives them; every position must be a real (unpadded) one."""
        if len(rows) == 0:
            return self.norm_weight.new_zeros(0, self.config.num_labels)
        if attention_mask is not None and not bool(attention_mask[rows, cols].all()):
            raise ValueError("logits_at: a position lies in the padding")
        if bool((rows[1:] < rows[:-1]).any()):
            raise ValueError("logits_at: rows must be grouped in ascending order")
        h, cos, sin = self._embed(input_ids, attention_mask)
        for layer in self.layers[:-1]:
            h = layer(h, cos, sin)
        h = cast(_FusedLayer, self.layers[-1]).forward_at(h, cos, sin, rows, cols)
        return self.score(_rms_norm(h, self.norm_weight, self.norm_eps))
