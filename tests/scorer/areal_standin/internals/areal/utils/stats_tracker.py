"""STAND-IN for AReaL's `stats_tracker` (see ../../README.md): scalars export their mean and `__count`."""

from __future__ import annotations

import enum
from collections import defaultdict

import torch


class ReduceType(enum.Enum):
    SUM = "sum"


_scalars: dict[str, list[float]] = defaultdict(list)
_sums: dict[str, float] = defaultdict(float)


class _Tracker:
    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def scalar(self, **values: float) -> None:
        for key, value in values.items():
            _scalars[f"{self.namespace}/{key}"].append(float(value))

    def denominator(self, **masks: torch.Tensor) -> None:
        for key, mask in masks.items():
            _sums[f"{self.namespace}/{key}"] += float(mask.sum())

    def stat(self, denominator: str, reduce_type: ReduceType, **values: torch.Tensor) -> None:
        assert reduce_type is ReduceType.SUM
        for key, value in values.items():
            _sums[f"{self.namespace}/{key}"] += float(value.sum())


def get(namespace: str) -> _Tracker:
    return _Tracker(namespace)


def export_all(reduce_group=None) -> dict[str, float]:
    """Everything recorded since the last export, then cleared."""
    del reduce_group
    exported: dict[str, float] = dict(_sums)
    for key, values in _scalars.items():
        exported[key] = sum(values) / len(values)
        exported[f"{key}__count"] = len(values)
    _scalars.clear()
    _sums.clear()
    return exported
