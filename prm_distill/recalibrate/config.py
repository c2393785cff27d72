"""Settings of a recalibration round (YAML via `--config`, overridable as section.key=value).

Every number a drift rule or an audit flag compares against lives here, with its meaning, so a
report can state the rule it applied and a user can tighten or loosen it without editing code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..calibration import METHODS


@dataclass
class CalibrationSettings:
    """How the post-hoc calibration is fitted and checked before it may be adopted."""

    method: str = field(default="temperature", metadata={"choices": METHODS, "help": f"Calibration method: {' | '.join(METHODS)} (temperature: one parameter, hard to overfit, cannot move a shift; platt: scale and shift, for a class-balanced student; isotonic: any monotone map, needs more data)."})
    fit_fraction: float = field(default=0.5, metadata={"help": "Share of held-out trajectories (split by trajectory, never by step) the calibration is fitted on; the rest is the separate split its ECE is checked on."})
    seed: int = field(default=0, metadata={"help": "Seed of the split: ids are sorted, then shuffled with this seed, so the split does not depend on file order."})
    n_bins: int = field(default=10, metadata={"help": "Equal-width bins of the ECE and of the reliability diagram."})

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"calibration.method must be one of {'|'.join(METHODS)}, got {self.method!r}")
        if not 0.0 < self.fit_fraction < 1.0:
            raise ValueError(f"calibration.fit_fraction must lie strictly between 0 and 1, got {self.fit_fraction}")
        if self.n_bins < 2:
            raise ValueError("calibration.n_bins must be >= 2")


@dataclass
class DriftSettings:
    """The drift rules' bounds; every rule compares this report with the newest one in --history."""

    auroc_drop: float = field(default=0.02, metadata={"help": "auroc_drop is raised when previous AUROC - current AUROC > this."})
    ece_rise: float = field(default=0.02, metadata={"help": "ece_rise is raised when current ECE - previous ECE > this."})
    inflation_rise: float = field(default=0.02, metadata={"help": "score_inflation needs mean score - previous mean score > this ..."})
    inflation_agreement_max: float = field(default=0.0, metadata={"help": "... while agreement - previous agreement <= this (flat or down)."})
    label_shift_tv: float = field(default=0.1, metadata={"help": "label_shift is raised when the total-variation distance between this and the previous fresh-rollout label distribution (bad/neutral/good shares) > this."})
    include_audit_flags: bool = field(default=False, metadata={"help": "Also count the audit flags (rewards_padding, rewards_shortcuts, position_bias) as drift flags, so they set exit code 3."})

    def __post_init__(self) -> None:
        if min(self.auroc_drop, self.ece_rise, self.inflation_rise, self.label_shift_tv) < 0:
            raise ValueError("drift: auroc_drop, ece_rise, inflation_rise and label_shift_tv must be >= 0")


@dataclass
class FloorSettings:
    """Absolute floors, checked every round (the first one included) whatever the history says.

    The drift rules only compare with an earlier report, so a model that was poor from the start
    (AUROC 0.54, F1 0.00) would pass round after round; below a floor it is flagged (exit 3) as a
    model that drifted would be."""

    min_auroc: float | None = field(default=0.6, metadata={"help": "auroc_floor is raised when the held-out AUROC < this (0.5 is chance); null = off."})
    min_f1: float | None = field(default=0.05, metadata={"help": "f1_floor is raised when the held-out ProcessBench F1 < this (0: it never finds the first error, or never passes a correct solution); null = off."})

    def __post_init__(self) -> None:
        bad = [name for name in ("min_auroc", "min_f1") if getattr(self, name) is not None and not 0.0 <= getattr(self, name) <= 1.0]
        if bad:
            raise ValueError("floor: " + ", ".join(f"{name} must lie in [0, 1] (or be null), got {getattr(self, name)}" for name in bad))


@dataclass
class FreshSettings:
    """Fresh policy rollouts labelled through the labeling pipeline (with --fresh)."""

    sample_size: int = field(default=200, metadata={"help": "Rollouts sampled (seeded) from --fresh and sent to the judge; the rest are ignored."})
    seed: int = field(default=0, metadata={"help": "Seed of the sample."})

    def __post_init__(self) -> None:
        if self.sample_size < 1:
            raise ValueError("fresh.sample_size must be >= 1")


@dataclass
class AuditSettings:
    """Reward-hacking audits: verbosity, shortcuts, position bias, self-preference."""

    enabled: bool = field(default=True, metadata={"help": "Run the audits (they reuse the held-out scores; verbosity and shortcuts score padded and shortened copies)."})
    max_trajectories: int = field(default=60, metadata={"help": "All-correct held-out trajectories (seeded sample) the verbosity audit pads and the shortcuts audit shortens (those of 3 or more steps), and rescores."})
    n_inserted: int = field(default=2, metadata={"help": "Steps inserted into each padded copy (before the final step, at seeded places)."})
    padding_tolerance: float = field(default=0.01, metadata={"help": "rewards_padding is raised when, for either padding kind, the mean change of any trajectory aggregation (min, mean, prod, last) is > this."})
    shortcut_tolerance: float = field(default=0.01, metadata={"help": "rewards_shortcuts is raised when, for either shortcut kind (the final step alone; a seeded prefix of the working, then the final step), the mean change of the min, mean or last aggregation is > this."})
    position_bins: int = field(default=5, metadata={"help": "Equal-width bins of relative step position (0 = first step, 1 = last)."})
    position_slope_bound: float = field(default=-0.1, metadata={"help": "position_bias is raised when the least-squares slope of score on relative position (all-correct trajectories) is < this (later steps judged harsher)."})
    self_preference: bool = field(default=True, metadata={"help": "When records carry metadata.generator: mean score per generator on problems answered by several generators."})
    seed: int = field(default=0, metadata={"help": "Seed of the audit sample and of the insertion places."})

    def __post_init__(self) -> None:
        if self.max_trajectories < 1 or self.n_inserted < 1 or self.position_bins < 2:
            raise ValueError("audit: max_trajectories >= 1, n_inserted >= 1 and position_bins >= 2 are required")
        if self.padding_tolerance < 0 or self.shortcut_tolerance < 0:
            raise ValueError("audit.padding_tolerance and audit.shortcut_tolerance must be >= 0")


@dataclass
class RecalibrateConfig:
    """`prm-distill recalibrate`: the tunables (inputs and outputs are command-line flags)."""

    calibration: CalibrationSettings = field(default_factory=CalibrationSettings, metadata={"help": "Calibration fit and adoption check."})
    drift: DriftSettings = field(default_factory=DriftSettings, metadata={"help": "Drift rule bounds."})
    floor: FloorSettings = field(default_factory=FloorSettings, metadata={"help": "Absolute quality floors, checked every round, the first included."})
    fresh: FreshSettings = field(default_factory=FreshSettings, metadata={"help": "Fresh rollouts sample."})
    audit: AuditSettings = field(default_factory=AuditSettings, metadata={"help": "Reward-hacking audits."})
    histogram_bins: int = field(default=20, metadata={"help": "Bins of the score histogram stored in report.json (the next report draws it as 'previous')."})

    def __post_init__(self) -> None:
        if self.histogram_bins < 2:
            raise ValueError("histogram_bins must be >= 2")
