"""PNG plots of the select reports, drawn from the reports' own numbers (matplotlib Agg, no pyplot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plotting import figure, save_png


def _figure(width: float = 6.0, height: float = 4.0):
    return figure(width, height)


_save = save_png


def best_of_n_plot(path: Path, report: dict[str, Any]) -> Path:
    """Accuracy against N (log2 axis): one line per aggregation, dashed baselines."""
    fig, ax = _figure()
    ns = report["n_values"]
    curves = [(agg, report["best_of_n"][agg], "-") for agg in report["aggregations"]]
    curves += [(name, values, "--") for name, values in report["baselines"].items()]
    for name, values, style in curves:
        points = [(n, values[str(n)]) for n in ns if values.get(str(n)) is not None]
        if points:
            ax.plot([n for n, _ in points], [v for _, v in points], style, marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (first N samples of each problem)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"best-of-N over {report['groups_with_answers']} problems")
    ax.legend(fontsize=8)
    return _save(fig, path)


def score_histogram(path: Path, kept: list[float], dropped: list[float], threshold: float, label: str) -> Path:
    """Histogram of the filter's decision score, kept and dropped stacked, with the threshold."""
    fig, ax = _figure()
    ax.hist([kept, dropped], bins=20, range=(0.0, 1.0), histtype="barstacked", label=[f"kept ({len(kept)})", f"dropped ({len(dropped)})"])
    ax.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold:g}")
    ax.set_xlabel(label)
    ax.set_ylabel("trajectories")
    ax.legend(fontsize=8)
    return _save(fig, path)
