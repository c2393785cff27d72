"""PNG figures without pyplot (matplotlib's Agg canvas: no display, no global state, thread-safe),
written atomically. Shared by the recalibration report and the select commands."""

from __future__ import annotations

from pathlib import Path


def figure(width: float = 6.0, height: float = 4.0):
    """(figure, axes) on an Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def save_png(fig, path: Path) -> Path:
    """Readers see the old PNG or the new one, never a half-written one."""
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path
