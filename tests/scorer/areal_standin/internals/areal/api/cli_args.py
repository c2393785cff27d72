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
class PRMConfig:
    enabled: bool = True
    scorers: list = field(default_factory=list)
    error_policy: str = "reject"
