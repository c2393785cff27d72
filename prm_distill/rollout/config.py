"""Settings of `prm-distill rollout` (every flag of the command is one field here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..generate import PolicyConfig
from ..steps import SplitConfig


@dataclass
class RolloutConfig:
    """k samples per problem from the current policy, split into steps and checked against the gold answer."""

    problems: str = field(default="embedded", metadata={"help": (
        "JSONL (GSM8K `question`/`answer` with ####, or question/answer), a saved `datasets` folder, .parquet/.csv, "
        "hf:NAME[:CONFIG], or embedded[:N] (the package's problem generator).")})
    output: str = field(default="runs/rollout", metadata={"help": "Output folder: rollouts.jsonl, summary.json, job.json (rerun the same command to resume)."})
    k: int = field(default=8, metadata={"help": "Samples per problem."})
    temperature: float = field(default=0.8, metadata={"help": "Sampling temperature (0.7-1.0 gives diverse, still sensible rollouts)."})
    max_new_tokens: int = field(default=512, metadata={"help": "Most generated tokens per sample."})
    seed: int = field(default=0, metadata={"help": "Base seed; sample j of problem p has its own seed derived from (seed, p, j)."})
    dataset_split: str | None = field(default=None, metadata={"aliases": ("split",), "help": "Split of a dataset with several (default: test when present, else the first)."})
    limit: int | None = field(default=None, metadata={"help": "Roll out at most this many problems, >= 1 (null = all)."})
    shard_problems: int = field(default=8, metadata={"help": "Problems per shard; a shard is written atomically once all its samples exist."})
    policy: PolicyConfig = field(default_factory=PolicyConfig, metadata={"help": "The policy and its backend."})
    splitter: SplitConfig = field(default_factory=SplitConfig, metadata={"aliases": ("steps",), "help": "Step splitter bounds (the shared splitter; labeling and the RL scorer must use the same)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar on stderr."})

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_new_tokens < 1 or self.shard_problems < 1:
            raise ValueError("rollout: k, max_new_tokens and shard_problems >= 1 are required")
        if self.limit is not None and self.limit < 1:  # 0 would rewrite a finished job's summary as empty
            raise ValueError(f"rollout: limit must be >= 1 (or null = all problems), got {self.limit}")
        if self.temperature < 0:
            raise ValueError(f"rollout: temperature must be >= 0, got {self.temperature}")
        if self.k > 1 and self.temperature == 0:
            raise ValueError("rollout: k > 1 samples at temperature 0 would be copies of one another; use temperature > 0")
