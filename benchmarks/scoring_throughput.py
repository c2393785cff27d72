"""One-pass scoring (every step read at its tag in one forward pass) versus per-prefix scoring
(the naive reading of "score each step with its context": one forward pass per growing prefix),
at 5, 20 and 50 steps, for a tiny model and the default backbone. Prints trajectories/s, steps/s
and the ratio, measured side by side in one run.

    python benchmarks/scoring_throughput.py [--skip-default] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def build(backbone: str):
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from prm_distill.encoding import StepEncoder, ensure_step_tag

    tok = AutoTokenizer.from_pretrained(backbone)
    tag = ensure_step_tag(tok)
    model = AutoModelForTokenClassification.from_pretrained(backbone, num_labels=2)
    model.resize_token_embeddings(len(tok))
    return model.eval(), StepEncoder(tok, tag, max_length=4096)


def tiny_backbone(root: Path) -> str:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from prm_distill.backbones import resolve_backbone

    tok = AutoTokenizer.from_pretrained(resolve_backbone("smollm2"))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096)
    LlamaForCausalLM(cfg).save_pretrained(root)
    tok.save_pretrained(root)
    return str(root)


def trajectory(n_steps: int) -> tuple[str, list[str]]:
    q = "Mia has 12 apples. She buys some more, gives some away, and doubles the rest several times. How many apples does she have?"
    return q, [f"Step {i + 1}: after event {i + 1}, Mia has {12 + i} + {i + 2} = {14 + 2 * i} apples." for i in range(n_steps)]


def bench(model, encoder, n_steps: int, repeats: int) -> tuple[float, float]:
    from prm_distill.inference import score_encoded

    q, steps = trajectory(n_steps)
    one = lambda: score_encoded(model, [encoder.encode(q, steps)], pad_id=0)  # noqa: E731
    per_prefix = lambda: [score_encoded(model, [encoder.encode(q, steps[: k + 1])], pad_id=0) for k in range(n_steps)]  # noqa: E731
    one(), per_prefix()  # warm-up
    times = {}
    for name, fn in (("one", one), ("prefix", per_prefix)):
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        times[name] = (time.perf_counter() - t) / repeats
    return times["one"], times["prefix"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-default", action="store_true", help="only the tiny model")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    from prm_distill.backbones import resolve_backbone

    with tempfile.TemporaryDirectory() as tmp:
        models = {"tiny (2 layers, d=64)": tiny_backbone(Path(tmp))}
        if not args.skip_default:
            models["SmolLM2-135M"] = resolve_backbone("smollm2")
        print(f"{'model':24}{'steps':>6}{'one-pass traj/s':>18}{'one-pass steps/s':>18}{'per-prefix steps/s':>20}{'ratio':>8}")
        for name, path in models.items():
            model, encoder = build(path)
            for n in (5, 20, 50):
                t_one, t_prefix = bench(model, encoder, n, args.repeats)
                print(f"{name:24}{n:>6}{1 / t_one:>18.2f}{n / t_one:>18.1f}{n / t_prefix:>20.1f}{t_prefix / t_one:>7.1f}x")


if __name__ == "__main__":
    main()
