"""What each piece of the fused CPU runner buys, in one process, interleaved (a busy spell hits every
variant): the scorer's pass with `logits_at` (the last layer at the step tags only) against the full
forward, and in bf16 the attention in row blocks against torch's flash kernel (on AMX CPUs the
runner itself keeps the flash kernel, so both rows run it). Prints process CPU-seconds (best of
`--rounds`) and the ratios; `benchmarks/engine_vs_vllm.py` puts the whole engine beside vLLM.

    python benchmarks/fused_ablation.py                      # default backbone, fp32 and bf16
    python benchmarks/fused_ablation.py --tiny --rounds 1    # smoke run
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from engine_vs_vllm import workload
from serve_latency import bench_checkpoint

from prm_distill.inference import score_encoded
from prm_distill.serve import PRMEngine, fused


class FullForward(torch.nn.Module):
    """The fused runner without `logits_at`: `score_encoded` then reads the tags from every position's logits."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **kwargs):
        return self.model(**kwargs)


def flash_attention(q, k, v, scale, blocked=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="exported checkpoint (default: the default backbone with an untrained head)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    ap.add_argument("--trajectories", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = bench_checkpoint(args.model, args.tiny)
    items = workload(args.trajectories, args.steps)
    blocked_attention = fused._causal_attention
    for dtype in args.dtypes:
        engine = PRMEngine.from_checkpoint(model, device="cpu", dtype=dtype, cpu_kernels="fused")
        encoded = [engine.encode(q, s) for q, s in items]
        variants = {"fused (logits_at)": (engine.model, blocked_attention), "full forward": (FullForward(engine.model), blocked_attention)}
        if dtype == "bfloat16":
            variants["flash attention"] = (engine.model, flash_attention)
        best: dict[str, float] = {}
        try:
            for _ in range(args.rounds):
                for name, (runner, attention) in variants.items():
                    fused._causal_attention = attention
                    start = time.process_time()
                    score_encoded(runner, encoded, engine.pad_id, engine.forward_tokens)
                    best[name] = min(best.get(name, float("inf")), time.process_time() - start)
        finally:
            fused._causal_attention = blocked_attention
        base = best["fused (logits_at)"]
        print(f"{dtype}, {len(items)} x {args.steps} steps, {args.threads} thread(s), best of {args.rounds}:")
        for name, seconds in best.items():
            print(f"  {name:>20}: {seconds:6.2f} CPU-s  ({seconds / base:.3f}x the fused runner's time)")


if __name__ == "__main__":
    main()
