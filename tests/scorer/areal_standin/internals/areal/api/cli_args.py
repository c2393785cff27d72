"""STAND-IN for the PRM part of AReaL's `areal.api.cli_args` (see ../../../README.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PRMScorerConfig:
    path: str = ""
    weight: float = 1.0
    enabled: bool = True
    kwargs: dict = field(default_factory=dict)


@dataclass
class PRMAdvantageShapingConfig:
    mode: str = "additive"
    negative_scale: float = 0.2
    zero_penalty: float = 0.4
    zero_eps: float = 1e-6


@dataclass
class PRMConfig:
    # AReaL's fields: no commit_scope and no mirrors of the actor settings.
    enabled: bool = True
    advantage_shaping: PRMAdvantageShapingConfig = field(default_factory=PRMAdvantageShapingConfig)
    scorers: list = field(default_factory=list)
    error_policy: str = "reject"
