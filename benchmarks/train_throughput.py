"""Training throughput of the real loop on CPU: non-padding tokens per second for full
fine-tuning, LoRA on all layers and LoRA on the top layers only, on the embedded arithmetic data,
measured side by side in one run (a few optimizer steps each, after one warm-up step).

    python benchmarks/train_throughput.py [--backbone smollm2] [--steps 6]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def main() -> None:
    from prm_distill.config import load_config
    from prm_distill.records import write_jsonl
    from prm_distill.synthetic import SyntheticConfig, generate
    from prm_distill.train import TrainJobConfig, train

    ap = argparse.ArgumentParser()
    ap.add_argument("--backbone", default="smollm2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    variants = {
        "full fine-tuning": ["lora.enabled=false"],
        "LoRA r16, all layers": ["lora.enabled=true"],
        "LoRA r16, top 10 layers": ["lora.enabled=true", "lora.top_layers=10"],
        "16 layers, LoRA top 8 (demo)": ["model.num_layers=16", "lora.enabled=true", "lora.top_layers=8"],
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.jsonl"
        write_jsonl(generate(SyntheticConfig(n=400, seed=0)), data)
        for name, extra in variants.items():
            cfg = load_config(TrainJobConfig, None, [
                f"model.backbone={args.backbone}", "model.max_length=256", f"data.train=[{data}]", "data.dev_fraction=0.0",
                f"optim.output_dir={Path(tmp) / 'out'}", f"optim.max_steps={args.steps}", f"optim.batch_size={args.batch_size}",
                "optim.eval_steps=0", "optim.save_steps=0", f"optim.logging_steps={args.steps}", *extra])
            results[name] = train(cfg)["tokens_per_s"]
    base = results["full fine-tuning"]
    print(f"{'variant':28}{'tokens/s':>10}{'vs full':>9}")
    for name, rate in results.items():
        print(f"{name:28}{rate:>10.1f}{rate / base:>8.2f}x")


if __name__ == "__main__":
    main()
