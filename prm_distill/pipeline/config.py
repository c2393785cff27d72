"""Settings of `prm-distill pipeline`, overridable as section.key=value.

The embedded defaults of the main job are ONE packaged YAML, `defaults.yaml` beside this module
(`configs/pipeline.yaml` links to it; `importlib.resources` reads it, so a wheel install runs the
main job too): `load_pipeline_config` starts from it, then merges a --config YAML and the overrides
key by key. The dataclasses below describe the keys (types, checks, help); their own defaults are
those of each stage's job, which the packaged YAML sets where the main job differs.

Each stage's section is that stage's own job config (`RolloutConfig`, `LabelJobConfig`,
`TrainJobConfig`, `RecalibrateConfig`), so a key means the same here as in `prm-distill rollout`,
`label`, `train` and `recalibrate`. The paths between stages (a stage's input and output folders,
the student's backbone from iteration 2 on) are set by the pipeline, whatever the YAML says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.resources import as_file, files
from pathlib import Path

from ..config import load_config
from ..labeling.config import LabelJobConfig
from ..recalibrate import RecalibrateConfig
from ..rollout import RolloutConfig
from ..train import TrainJobConfig

DEFAULTS = "defaults.yaml"  # package data: the main job's embedded defaults


@dataclass
class DataSettings:
    """Embedded synthetic data mixed into training, and the held-out set every iteration is checked on."""

    synthetic_train: int = field(default=1600, metadata={"help": "Synthetic arithmetic trajectories (labels by construction) added to the judged rollouts for training; 0 = none."})
    synthetic_dev: int = field(default=150, metadata={"help": "Synthetic dev trajectories (training's periodic evaluation and its decision threshold)."})
    heldout: str = field(default="", metadata={"help": "Labelled held-out JSONL, never trained on, the same for every iteration; empty = the embedded synthetic held-out set, written once to <root>/<name>/heldout/test.jsonl."})
    heldout_size: int = field(default=300, metadata={"help": "Trajectories in the embedded held-out set (when `heldout` is empty)."})
    seed: int = field(default=1000, metadata={"help": "Seed of the synthetic sets (train seed, dev seed + 1, held-out seed + 2; iteration K adds 10 * (K - 1) to the train and dev seeds)."})

    def __post_init__(self) -> None:
        if self.synthetic_train < 0 or self.synthetic_dev < 1 or self.heldout_size < 1:
            raise ValueError("data: synthetic_train >= 0, synthetic_dev >= 1 and heldout_size >= 1 are required")


@dataclass
class EvalSettings:
    """Evaluation of the new checkpoint on the held-out set (`prm-distill eval`)."""

    threshold: float | None = field(default=None, metadata={"help": "Decision threshold for F1 and step accuracy; null = the one the checkpoint chose on its dev split."})


@dataclass
class ServeSettings:
    """Serve check: the checkpoint behind the HTTP server on 127.0.0.1, scored by the client, then stopped."""

    enabled: bool = field(default=True, metadata={"help": "Run the serve check."})
    n_requests: int = field(default=6, metadata={"help": "Held-out trajectories scored over HTTP, one request at a time."})

    def __post_init__(self) -> None:
        if self.n_requests < 1:
            raise ValueError("serve.n_requests must be >= 1")


@dataclass
class RLSettings:
    """RL scoring: the checkpoint as DistilledPRMScorer in a PRMRunner built from a trainer-style YAML."""

    enabled: bool = field(default=True, metadata={"help": "Run the RL scoring stage (the package's trainer_prm.yaml, its DistilledPRMScorer pointed at this iteration's checkpoint, every shaping mode)."})


@dataclass
class PipelineConfig:
    """`prm-distill pipeline`: rollout -> label -> train -> eval -> serve -> RL scoring -> recalibrate, resumable."""

    name: str = field(default="pipeline", metadata={"help": "Run name: outputs go to <root>/<name>/iter-K/<stage>/."})
    root: str = field(default="runs", metadata={"help": "Folder holding the runs."})
    threads: int = field(default=2, metadata={"help": "torch CPU threads for generation, training and scoring (more than the free cores stalls generation on a shared machine)."})
    data: DataSettings = field(default_factory=DataSettings, metadata={"help": "Synthetic training data and the held-out set."})
    rollout: RolloutConfig = field(default_factory=RolloutConfig, metadata={"help": "`prm-distill rollout` settings (output is set by the pipeline)."})
    label: LabelJobConfig = field(default_factory=LabelJobConfig, metadata={"help": "`prm-distill label` settings (input and output are set by the pipeline)."})
    train: TrainJobConfig = field(default_factory=TrainJobConfig, metadata={"help": "`prm-distill train` settings (data files, output_dir and, from iteration 2 on, model.backbone are set by the pipeline)."})
    eval: EvalSettings = field(default_factory=EvalSettings, metadata={"help": "Held-out evaluation."})
    serve: ServeSettings = field(default_factory=ServeSettings, metadata={"help": "Serve check."})
    rl: RLSettings = field(default_factory=RLSettings, metadata={"help": "RL scoring through PRMRunner."})
    recalibrate: RecalibrateConfig = field(default_factory=RecalibrateConfig, metadata={"help": "`prm-distill recalibrate` settings; iteration K+1 compares with iteration K's report."})
    adopt_calibration: bool = field(default=False, metadata={"help": "Write the fitted calibration into the checkpoint's sidecar when it improves ECE (the checkpoint then changes: eval onwards rerun next time)."})

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")
        if self.threads < 1:
            raise ValueError("threads must be >= 1")


def embedded_defaults() -> PipelineConfig:
    """The main job's settings: the packaged `defaults.yaml` over the dataclasses' defaults."""
    with as_file(files(__package__).joinpath(DEFAULTS)) as path:
        return load_config(PipelineConfig, path)


def load_pipeline_config(path: str | Path | None = None, overrides: list[str] | None = None) -> PipelineConfig:
    """The embedded defaults (`defaults.yaml`), then the YAML, then `section.key=value` overrides,
    merged key by key: setting one key of a section keeps the main job's values for the others (the
    section class's own defaults would bring back, e.g., an LLM judge instead of the verifier)."""
    return load_config(PipelineConfig, path, overrides, defaults=embedded_defaults())
