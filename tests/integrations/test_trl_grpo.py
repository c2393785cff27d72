"""A real TRL GRPOTrainer trains a tiny policy for two steps with the distilled PRM as its reward."""

from __future__ import annotations

import math

import pytest

trl = pytest.importorskip("trl")

from prm_distill.integrations.trl import PRMReward  # noqa: E402

PROMPTS = [
    "Tom has 4 apples and buys 3 more. How many apples does he have?",
    "What is 6 times 7?",
    "A book costs 5 dollars. How much do 3 books cost?",
    "Mia had 10 sweets and ate 4. How many are left?",
]


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """GRPOTrainer sets accelerate's process-wide state (its own mixed precision); later tests in this
    process build their own Accelerator, which accelerate refuses while that state lingers."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.slow
def test_grpo_trainer_runs_two_steps_with_the_prm_reward(tiny_backbone, tiny_checkpoint, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    reward = PRMReward(model=str(tiny_checkpoint), device="cpu")
    seen: list[list[float | None]] = []

    def recorded(**kwargs):
        out = reward(**kwargs)
        seen.append(out)
        return out

    recorded.__name__ = "prm"
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=24, learning_rate=1e-4, logging_steps=1, report_to=[], use_cpu=True,
        save_strategy="no", seed=0, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=str(tiny_backbone), reward_funcs=[recorded], args=args,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(seen) >= 2 and all(len(batch) == 4 for batch in seen)
    # Random-policy completions: each is scored in [0, 1] or, when it has no text, None.
    assert all(x is None or (0.0 <= x <= 1.0) for batch in seen for x in batch)
    logged = [entry for entry in trainer.state.log_history if "rewards/prm/mean" in entry]
    assert logged and all(math.isfinite(entry["rewards/prm/mean"]) for entry in logged)
    changed = any(not (p.detach() == before[n]).all() for n, p in trainer.model.named_parameters())
    assert changed  # the PRM's reward reached the update
