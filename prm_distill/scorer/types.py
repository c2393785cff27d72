"""The objects a scorer reads and returns.

`Interaction` and `ModelResponse` serve users without AReaL; the runner only reads their attributes,
so AReaL's own interactions work as well. The result and observation classes are this package's
implementation of the contract, used when `areal.reward.prm` is not importable (see `contract.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

MetricScope = Literal["turn", "trajectory"]
MetricValueType = Literal["float", "boolean"]
Aggregation = Literal["count", "rate", "sum", "mean"]

# Booleans are counted or averaged into a rate; floats are summed or averaged.
ALLOWED_AGGREGATIONS: dict[str, frozenset[str]] = {
    "boolean": frozenset({"count", "rate"}),
    "float": frozenset({"sum", "mean"}),
}


_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})


def coerce_weight(value: Any) -> float:
    """A scorer weight as AReaL reads it (`float(weight)`, so "0.5" works), finite and not a bool."""
    if isinstance(value, bool):
        raise TypeError(f"expected a finite number, got the bool {value!r}")
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"expected a finite number, got {value!r}") from None
    if not math.isfinite(weight):
        raise ValueError(f"expected a finite number, got {value!r}")
    return weight


def coerce_enabled(value: Any) -> bool:
    """An `enabled` flag: a bool, 0/1 (AReaL applies `bool()`), or a YAML-style word such as "false"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    # bool("false") is True: refuse anything whose truth is not obvious.
    raise TypeError(f"expected true or false (or 0/1), got {value!r}")


@dataclass(kw_only=True)
class ModelResponse:
    """Token ids of one model turn, in the policy tokenizer's vocabulary."""

    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)

    @property
    def output_len(self) -> int:
        """Derived, so it can never disagree with the tokens the rewards are aligned to."""
        return len(self.output_tokens)


@dataclass(kw_only=True, eq=False)
class Interaction:
    """One model turn; turns link to their parent and form a conversation tree.

    Compared by identity (`eq=False`): two turns with equal fields are still two nodes of the tree.
    """

    interaction_id: str
    parent: Interaction | None = field(default=None, repr=False)
    messages: list[dict[str, Any]] = field(default_factory=list)
    output_message_list: list[dict[str, Any]] = field(default_factory=list)
    model_response: ModelResponse | None = None
    reward: float | None = None
    token_rewards: torch.Tensor | None = None


@dataclass(frozen=True)
class PRMMetricObservation:
    """One monitoring value a scorer reports, carrying the schema it is aggregated with."""

    metric_id: str
    scope: MetricScope
    target_id: str
    value: float | bool
    value_type: MetricValueType
    aggregations: tuple[Aggregation, ...]

    def __post_init__(self) -> None:
        for name in ("metric_id", "target_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if self.scope not in ("turn", "trajectory"):
            raise ValueError(f"scope must be 'turn' or 'trajectory', got {self.scope!r}")
        if self.value_type not in ALLOWED_AGGREGATIONS:
            raise ValueError(f"value_type must be 'float' or 'boolean', got {self.value_type!r}")
        object.__setattr__(self, "aggregations", tuple(self.aggregations))
        if not self.aggregations or len(set(self.aggregations)) != len(self.aggregations):
            raise ValueError(f"aggregations must be non-empty and unique, got {self.aggregations!r}")
        allowed = ALLOWED_AGGREGATIONS[self.value_type]
        wrong = sorted(set(self.aggregations) - allowed)
        if wrong:
            raise ValueError(f"{self.value_type} metric {self.metric_id!r} allows {sorted(allowed)}, got {wrong}")
        if self.value_type == "boolean":
            if not isinstance(self.value, bool):
                raise TypeError(f"boolean metric {self.metric_id!r} needs a bool, got {self.value!r}")
        elif isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise TypeError(f"float metric {self.metric_id!r} needs a number, got {self.value!r}")
        elif not math.isfinite(self.value):
            raise ValueError(f"float metric {self.metric_id!r} must be finite, got {self.value!r}")


@dataclass(frozen=True)
class PRMScorerResult:
    """An unweighted reward plus the observations that explain it."""

    reward: float | torch.Tensor
    observations: tuple[PRMMetricObservation, ...] = ()


@dataclass(frozen=True)
class PRMTurnResult:
    """What one scorer committed for one turn: the mean weighted reward and its observations."""

    scorer_name: str
    reward: float
    observations: tuple[PRMMetricObservation, ...] = ()
