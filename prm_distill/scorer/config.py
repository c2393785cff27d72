"""The PRM section of a trainer config, validated so that a bad value is reported by its full key.

Users write it under `rollout.agent.prm` in their trainer YAML; the two actor settings the
contract depends on (`actor.token_rewards_as_adv`, `actor.mask_no_eos_with_zero`) are mirrored
on `PRMConfig` so that one object can be checked as a whole.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from prm_distill.config import ConfigError
from prm_distill.scorer.contract import BaseScorer
from prm_distill.scorer.shaping import SHAPING_MODES, check_min_form_temperature, check_shaping_mode
from prm_distill.scorer.types import coerce_enabled, coerce_weight

ERROR_POLICIES = ("reject", "keep_original")
COMMIT_SCOPES = ("scorer", "run")
PRM_SECTION = ("rollout", "agent", "prm")
ACTOR_KEYS = ("token_rewards_as_adv", "mask_no_eos_with_zero")


class PRMConfigError(ConfigError):
    """A bad PRM setting; `key` is its dotted path, so the message points into the user's YAML."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem

    def under(self, prefix: str) -> PRMConfigError:
        """The same error, seen from the section that contains this one."""
        return PRMConfigError(f"{prefix}.{self.key}", self.problem)


def _check_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise PRMConfigError(key, f"expected true or false, got {value!r}")


def _check_number(key: str, value: Any, *, non_negative: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PRMConfigError(key, f"expected a finite number, got {value!r}")
    if non_negative and value < 0:
        raise PRMConfigError(key, f"must be >= 0, got {value!r}")


def _from_mapping(cls: type, data: Mapping[str, Any], key: str) -> Any:
    """Build a config dataclass from YAML data, naming unknown keys and nested bad values."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(str(name) for name in data if name not in known)
    if unknown:
        raise PRMConfigError(f"{key}.{unknown[0]}", f"unknown key (expected {'|'.join(known)})")
    try:
        return cls(**data)
    except PRMConfigError as err:
        raise err.under(key) from None


@dataclass
class PRMScorerConfig:
    """One scorer built from a dotted import path; the runner owns and closes it."""

    path: str = field(
        default="",
        metadata={"help": "Dotted import path of a BaseScorer subclass, e.g. 'prm_distill.scorer.LengthBudgetScorer'."},
    )
    weight: float = field(
        default=1.0,
        metadata={
            "help": "Multiplier on this scorer's reward before it joins token_rewards; observations stay unweighted."
        },
    )
    enabled: bool = field(
        default=True, metadata={"help": "Build the scorer but skip it when scoring (it is still closed)."}
    )
    kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Extra keyword arguments for the scorer's constructor."}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise PRMConfigError(
                "path", f"must be a non-empty dotted import path (package.module.Class), got {self.path!r}"
            )
        # Coerced as AReaL's scorer constructor does (`float(weight)`, `bool(enabled)`), minus the
        # surprises: a bool weight or an `enabled` such as "maybe" is refused by name.
        try:
            self.weight = coerce_weight(self.weight)
        except (TypeError, ValueError) as err:
            raise PRMConfigError("weight", str(err)) from None
        try:
            self.enabled = coerce_enabled(self.enabled)
        except TypeError as err:
            raise PRMConfigError("enabled", str(err)) from None
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise PRMConfigError("kwargs", f"expected a mapping of argument names to values, got {self.kwargs!r}")
        self.kwargs = dict(self.kwargs)


@dataclass
class PRMAdvantageShapingConfig:
    """How the actor combines process rewards with outcome advantages (see `shape_advantages`)."""

    mode: str = field(
        default="additive",
        metadata={
            "help": "additive: A + P. gvpo: a negative P marks a failed token. process_weighted: P in [0, 1] weights A. "
            "min_form: A + the minimum of P over the rest of the row (PURE's min-form credit assignment, which a "
            "policy cannot raise by adding high-scoring steps; needs a step's value on all its tokens)."
        },
    )
    negative_scale: float = field(
        default=0.2,
        metadata={"help": "gvpo: a failed token with negative advantage A becomes A * (1 + negative_scale)."},
    )
    zero_penalty: float = field(
        default=0.4, metadata={"help": "gvpo: a failed token with advantage near zero becomes -zero_penalty."}
    )
    zero_eps: float = field(default=1e-6, metadata={"help": "gvpo: |A| <= zero_eps counts as a zero advantage."})
    min_form_temperature: float | None = field(
        default=None,
        metadata={
            "help": "min_form: null takes the strict minimum of the future process rewards; a temperature T > 0 "
            "takes their softmax(-P / T)-weighted mean instead (smooth; T -> 0 is the minimum, large T the mean)."
        },
    )

    def __post_init__(self) -> None:
        if self.mode not in SHAPING_MODES:
            raise PRMConfigError("mode", f"unknown mode {self.mode!r} (expected {'|'.join(SHAPING_MODES)})")
        for name in ("negative_scale", "zero_penalty", "zero_eps"):
            _check_number(name, getattr(self, name), non_negative=True)
        try:
            check_min_form_temperature(self.min_form_temperature)
        except ValueError as err:
            raise PRMConfigError("min_form_temperature", str(err).removeprefix("min_form_temperature ")) from None


@dataclass
class PRMConfig:
    """Process-reward scoring for rollouts. An empty scorer list or `enabled: false` disables it."""

    enabled: bool = field(default=True, metadata={"help": "Score trajectories with the configured scorers."})
    error_policy: str = field(
        default="reject",
        metadata={"help": "When scoring fails: 'reject' the trajectory, or 'keep_original' pre-scoring rewards."},
    )
    commit_scope: str = field(
        default="scorer",
        metadata={
            "help": "What one failure undoes in PRMRunner.run: 'scorer' (AReaL's rule: each scorer commits once all "
            "its turns validate, so rewards of scorers that ran before a failing one stay) or 'run' (nothing is "
            "committed unless every scorer succeeds). Branch scoring discards failed clones either way."
        },
    )
    advantage_shaping: PRMAdvantageShapingConfig = field(
        default_factory=PRMAdvantageShapingConfig,
        metadata={"help": "How process rewards are combined with outcome advantages in the actor."},
    )
    scorers: list[PRMScorerConfig | BaseScorer] = field(
        default_factory=list,
        metadata={
            "help": "Scorers, as {path, weight, enabled, kwargs} entries or ready instances (borrowed, not closed)."
        },
    )
    token_rewards_as_adv: bool = field(
        default=True,
        metadata={
            "help": "Mirror of actor.token_rewards_as_adv: shape advantages after GAE (true), "
            "or fold turn rewards into GAE."
        },
    )
    mask_no_eos_with_zero: bool = field(
        default=False, metadata={"help": "Mirror of actor.mask_no_eos_with_zero: truncated rows get zero reward."}
    )

    def __post_init__(self) -> None:
        try:
            self.enabled = coerce_enabled(self.enabled)
        except TypeError as err:
            raise PRMConfigError("enabled", str(err)) from None
        for name in ("token_rewards_as_adv", "mask_no_eos_with_zero"):
            _check_bool(name, getattr(self, name))
        if self.commit_scope not in COMMIT_SCOPES:
            raise PRMConfigError(
                "commit_scope", f"unknown scope {self.commit_scope!r} (expected {'|'.join(COMMIT_SCOPES)})"
            )
        if self.error_policy not in ERROR_POLICIES:
            raise PRMConfigError(
                "error_policy", f"unknown policy {self.error_policy!r} (expected {'|'.join(ERROR_POLICIES)})"
            )
        if isinstance(self.advantage_shaping, Mapping):
            self.advantage_shaping = _from_mapping(
                PRMAdvantageShapingConfig, self.advantage_shaping, "advantage_shaping"
            )
        elif not isinstance(self.advantage_shaping, PRMAdvantageShapingConfig):
            raise PRMConfigError("advantage_shaping", f"expected a mapping, got {self.advantage_shaping!r}")
        if isinstance(self.scorers, (str, bytes, Mapping)) or not isinstance(self.scorers, (list, tuple)):
            raise PRMConfigError("scorers", f"expected a list, got {self.scorers!r}")
        self.scorers = [self.scorer_entry(i, entry) for i, entry in enumerate(self.scorers)]
        try:
            check_shaping_mode(
                self.advantage_shaping.mode,
                token_rewards_as_adv=self.token_rewards_as_adv,
                mask_no_eos_with_zero=self.mask_no_eos_with_zero,
            )
        except ValueError as err:
            raise PRMConfigError("advantage_shaping.mode", str(err)) from None
        if self.enabled and self.scorers and not self.token_rewards_as_adv:
            # Folding needs one reward per turn; how a dense reward becomes one is not defined yet.
            raise PRMConfigError(
                "token_rewards_as_adv", "configured scorers need true (folded process rewards are not supported)"
            )

    @staticmethod
    def scorer_entry(index: int, entry: Any) -> PRMScorerConfig | BaseScorer:
        """One `scorers` entry as a config or a ready scorer; the runner also uses it for entries set later."""
        if isinstance(entry, (PRMScorerConfig, BaseScorer)):
            return entry
        if isinstance(entry, Mapping):
            return _from_mapping(PRMScorerConfig, entry, f"scorers[{index}]")
        if hasattr(entry, "path") and hasattr(entry, "kwargs"):
            # A typed entry of another class with the same fields (AReaL's own PRMScorerConfig).
            values = {f.name: getattr(entry, f.name) for f in fields(PRMScorerConfig) if hasattr(entry, f.name)}
            return _from_mapping(PRMScorerConfig, values, f"scorers[{index}]")
        raise PRMConfigError(
            f"scorers[{index}]", f"expected a {{path, weight, enabled, kwargs}} mapping or a BaseScorer, got {entry!r}"
        )


def _section(data: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    node: Any = data
    for depth, name in enumerate(path):
        node = node.get(name) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            key = ".".join(path[: depth + 1])
            raise PRMConfigError(key, "missing" if node is None else f"expected a mapping, got {node!r}")
    return node


def load_prm_config(path_or_dict: str | os.PathLike[str] | Mapping[str, Any]) -> PRMConfig:
    """Read `rollout.agent.prm` and the actor settings it depends on from a trainer-style config."""
    if isinstance(path_or_dict, Mapping):
        data: Any = path_or_dict
    else:
        data = yaml.safe_load(Path(path_or_dict).read_text(encoding="utf-8"))
        if not isinstance(data, Mapping):
            raise PRMConfigError(str(path_or_dict), "expected a mapping at the top level")
    prm = _section(data, PRM_SECTION)
    prm_prefix = ".".join(PRM_SECTION)
    misplaced = sorted(k for k in prm if k in ACTOR_KEYS)
    if misplaced:
        raise PRMConfigError(f"{prm_prefix}.{misplaced[0]}", f"belongs under actor (actor.{misplaced[0]})")
    values = dict(prm)
    if "actor" in data:
        actor = _section(data, ("actor",))
        values.update({k: actor[k] for k in ACTOR_KEYS if k in actor})
    try:
        return _from_mapping(PRMConfig, values, prm_prefix)
    except PRMConfigError as err:
        # Actor settings were mirrored onto PRMConfig; report them under their real key.
        actor_key = err.key.removeprefix(prm_prefix + ".")
        if actor_key in ACTOR_KEYS:
            raise PRMConfigError(f"actor.{actor_key}", err.problem) from None
        raise
