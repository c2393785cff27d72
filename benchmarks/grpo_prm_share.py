"""The distilled PRM's share of a TRL GRPO step: scoring vs generation vs the update.

A real `GRPOTrainer` trains a policy for `--steps` steps with `PRMReward` as its only reward; each
step's wall time (a trainer callback, step begin to step end: optimizer included) is split into
- generation: `GRPOTrainer._generate` (sampling `--generations` completions per prompt),
- scoring: the PRM reward function (decode, split, one PRM pass per completion batch, aggregate),
- update: the rest (old/ref log-probs, loss, backward, optimizer step).
The first step is a warm-up and is left out of the figures.

Sizes: `--policy smollm2` is SmolLM2-135M-Instruct (the embedded default); `--policy tiny` a 2-layer,
64-wide random Llama with the same tokenizer. The PRM is `--prm DIR` (a checkpoint) or, by default,
an untrained head on `--prm-backbone` (`smollm2` or `tiny`) exported in the checkpoint format:
timing does not depend on the head's weights.

    python benchmarks/grpo_prm_share.py [--policy smollm2] [--prm-backbone smollm2] [--steps 4] [--prompts 4] \
        [--generations 4] [--max-completion-length 64] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import torch

PROMPTS = [
    "Tom has 4 apples and buys 3 more. How many apples does he have? Think step by step.",
    "A book costs 5 dollars. How much do 3 books cost? Think step by step.",
    "Mia had 10 sweets and ate 4. How many are left? Think step by step.",
    "A train travels 60 km in 1.5 hours. What is its speed? Think step by step.",
    "Sam saves 7 dollars a week for 6 weeks. How much does he save? Think step by step.",
    "There are 24 students in 4 equal groups. How many are in each group? Think step by step.",
    "A rectangle is 8 cm by 5 cm. What is its area? Think step by step.",
    "Lea reads 12 pages a day. How many pages does she read in a week? Think step by step.",
]


def backbone(name: str, root: Path) -> str:
    from scoring_throughput import tiny_backbone

    from prm_distill.backbones import resolve_backbone

    return tiny_backbone(root) if name == "tiny" else resolve_backbone(name)


def checkpoint_params(folder: Path) -> int:
    """Parameters stored in a checkpoint's safetensors (the engine's CPU kernels may hold weights outside `parameters()`)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                total += math.prod(f.get_slice(key).get_shape())
    return total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default="smollm2", help="smollm2, tiny, or a causal LM folder")
    p.add_argument("--prm", help="a PRM checkpoint folder (default: an untrained head on --prm-backbone)")
    p.add_argument("--prm-backbone", default="smollm2", help="smollm2, tiny, or a model folder")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--generations", type=int, default=4, help="completions per prompt")
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from datasets import Dataset
    from scorer_overhead import export_checkpoint
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from prm_distill.integrations.trl import PRMReward

    tmp = Path(tempfile.mkdtemp(prefix="grpo_prm_share_"))
    policy = args.policy if args.policy not in ("smollm2", "tiny") else backbone(args.policy, tmp / "policy")
    prm_dir = args.prm or str(export_checkpoint(backbone(args.prm_backbone, tmp / "prm_backbone"), tmp / "prm"))
    prm = PRMReward(model=prm_dir, device="cpu")
    timers = {"generation": 0.0, "scoring": 0.0}

    def reward(**kwargs):
        start = time.perf_counter()
        try:
            return prm(**kwargs)
        finally:
            timers["scoring"] += time.perf_counter() - start

    reward.__name__ = "prm"  # type: ignore[attr-defined]
    steps: list[dict[str, float]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            timers.update(generation=0.0, scoring=0.0, start=time.perf_counter())

        def on_step_end(self, *a, **k):
            total = time.perf_counter() - timers["start"]
            steps.append({"total": total, "generation": timers["generation"], "scoring": timers["scoring"],
                          "update": total - timers["generation"] - timers["scoring"]})

    batch = args.prompts * args.generations
    config = GRPOConfig(
        output_dir=str(tmp / "out"), max_steps=args.steps, per_device_train_batch_size=batch,
        num_generations=args.generations, max_completion_length=args.max_completion_length,
        learning_rate=1e-6, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=0,
    )
    # Conversational prompts: TRL applies the policy's chat template, so an instruct policy answers.
    n = max(args.prompts * args.steps, len(PROMPTS))
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}] for i in range(n)]})
    trainer = GRPOTrainer(model=policy, reward_funcs=[reward], args=config, train_dataset=data, callbacks=[StepTimer()])
    generate = trainer._generate

    def timed_generate(*a, **k):
        start = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            timers["generation"] += time.perf_counter() - start

    trainer._generate = timed_generate  # type: ignore[method-assign]
    trainer.train()

    measured = steps[1:] or steps
    mean = {k: sum(s[k] for s in measured) / len(measured) for k in measured[0]}
    n_policy = sum(p.numel() for p in trainer.model.parameters())
    n_prm = checkpoint_params(Path(prm_dir))
    figures = {
        "policy": args.policy, "policy_params": n_policy, "prm": args.prm or f"untrained head on {args.prm_backbone}",
        "prm_params": n_prm, "completions_per_step": batch, "max_completion_length": args.max_completion_length,
        "threads": torch.get_num_threads(), "steps_measured": len(measured),
        "mean_s": {k: round(v, 3) for k, v in mean.items()},
        "share": {k: round(mean[k] / mean["total"], 3) for k in ("generation", "scoring", "update")},
        "fallbacks": prm.fallbacks.summary(),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
