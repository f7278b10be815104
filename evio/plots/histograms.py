"""Path length histograms (E7): several measured series side by side, one panel per overlay size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from evio.plots.ring import PlotError


def draw_path_histograms(
    panels: Mapping[str, Mapping[str, Sequence[int]]], path: Path, title: str, notes: Mapping[str, str] | None = None
) -> None:
    """`panels`: panel title -> {series label -> path lengths (hops)}; bars are each series' share of its pairs."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'evio[plots]'") from None
    if path.suffix.lower() not in (".svg", ".png"):
        raise PlotError(f"{path}: write .svg or .png")
    figure = Figure(figsize=(5.0 * max(1, len(panels)), 4.8))
    axes_list = figure.subplots(1, max(1, len(panels)), squeeze=False)[0]
    for axes, (panel, series) in zip(axes_list, panels.items()):
        hops = sorted({h for values in series.values() for h in values})
        if not hops:
            continue
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series.items()):
            total = len(values) or 1
            shares = [100.0 * sum(1 for v in values if v == h) / total for h in hops]
            mean = sum(values) / total
            xs = [h - 0.4 + width * (i + 0.5) for h in hops]
            axes.bar(xs, shares, width=width, label=f"{label} (mean {mean:.2f}, max {max(values, default=0)})")
        axes.set_xticks(hops)
        axes.set_xlabel("overlay hops (FRB hop count)")
        axes.set_ylabel("% of (root, receiver) pairs")
        note = f"\n{notes[panel]}" if notes and panel in notes else ""
        axes.set_title(f"{panel}{note}", fontsize=10)
        axes.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    figure.suptitle(title, fontsize=11, y=1.05)
    figure.savefig(path, format=path.suffix.lower()[1:], dpi=150, bbox_inches="tight")
