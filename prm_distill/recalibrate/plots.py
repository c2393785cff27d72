"""PNG plots of a recalibration report, drawn from the report's own numbers.

Uses matplotlib's object API on the Agg canvas (no pyplot, no display, no global figure state), so
it is safe in a headless job and in the schedule's background thread. Every plot reads only what
report.json stores, so an old report can be redrawn and the next run can overlay this one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..plotting import figure, save_png

PLOTS = {"reliability": "reliability.png", "histogram": "score_histogram.png", "position": "position.png"}


def _figure(width: float = 5.5, height: float = 4.0):
    return figure(width, height)


_save = save_png


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def reliability_plot(path: Path, served: list[dict], after: list[dict] | None = None) -> Path:
    """Mean label against mean score per bin; the diagonal is perfect calibration."""
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    for bins, name, marker in ((served, "served (current calibration)", "o"), (after or [], "new calibration (evaluation split)", "s")):
        pts = [(b["mean_score"], b["mean_label"], b["n"]) for b in bins if b["n"] and _finite(b["mean_score"]) and _finite(b["mean_label"])]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean score in bin", ylabel="mean label in bin", title="Reliability diagram")
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def histogram_plot(path: Path, current: dict, previous: dict | None = None, fresh: dict | None = None) -> Path:
    """Step-score histograms (densities), this report against the previous one."""
    fig, ax = _figure()
    for hist, name, style in ((current, "held-out, this report", "-"), (previous, "held-out, previous report", "--"), (fresh, "fresh rollouts", ":")):
        if not hist or not hist.get("counts"):
            continue
        edges, counts = hist["edges"], hist["counts"]
        total = sum(counts) or 1
        width = edges[1] - edges[0]
        ax.stairs([c / total / width for c in counts], edges, linestyle=style, linewidth=1.8, label=name)
    ax.set(xlim=(0, 1), xlabel="P(good)", ylabel="density", title="Step score histogram")
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path)


def position_plot(path: Path, all_steps: dict, all_correct: dict) -> Path:
    """Mean score by relative step position (0 = first step, 1 = last)."""
    fig, ax = _figure()
    for prof, name in ((all_steps, "all held-out steps"), (all_correct, "all-correct trajectories")):
        pts = [((b["lo"] + b["hi"]) / 2, b["mean_score"]) for b in prof.get("bins", []) if b["n"] and _finite(b["mean_score"])]
        if pts:
            slope = prof.get("slope")
            label = name + (f" (slope {slope:+.3f})" if _finite(slope) else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="relative step position", ylabel="mean served score", title="Mean score by step position")
    ax.legend(loc="lower left", fontsize=8)
    return _save(fig, path)


def draw_all(out_dir: Path, report: dict, previous: dict | None) -> dict[str, str]:
    """Draw every plot of `report` into out_dir; returns {plot: file name}."""
    out_dir = Path(out_dir)
    reliability_plot(out_dir / PLOTS["reliability"], report["reliability"], report["calibration"].get("reliability_after"))
    prev_hist = previous.get("score_histogram") if isinstance(previous, dict) else None
    fresh_hist = (report.get("fresh") or {}).get("score_histogram")
    histogram_plot(out_dir / PLOTS["histogram"], report["score_histogram"], prev_hist, fresh_hist)
    position_plot(out_dir / PLOTS["position"], report["position"], (report.get("audits") or {}).get("position_bias") or {})
    return dict(PLOTS)
