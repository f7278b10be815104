"""Cumulative distributions (E6's bandwidth per pair): several measured series on one axis, with reference marks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from evio.plots.ring import PlotError


def percentile(values: Sequence[float], share: float) -> float:
    """The value below which `share` (0..1) of `values` lie, linearly interpolated between samples."""
    if not values:
        raise ValueError("no values")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share} is not within 0..1")
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def share_at_least(values: Sequence[float], bar: float) -> float:
    """The share (0..1) of `values` at or above `bar`."""
    return sum(1 for v in values if v >= bar) / len(values) if values else 0.0


def draw_cdfs(
    series: Mapping[str, Sequence[float]],
    path: Path,
    title: str,
    xlabel: str,
    marks: Sequence[tuple[float, float, str]] = (),
) -> None:
    """`series`: label -> samples, drawn as step CDFs (% of samples at or below x).

    `marks` are reference points (x, % of samples at or below x, label), e.g. a paper's claim.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'evio[plots]'") from None
    if path.suffix.lower() not in (".svg", ".png"):
        raise PlotError(f"{path}: write .svg or .png")
    figure = Figure(figsize=(6.4, 4.6))
    axes = figure.subplots()
    for label, values in series.items():
        ordered = sorted(values)
        if not ordered:
            continue
        ys = [100.0 * (i + 1) / len(ordered) for i in range(len(ordered))]
        axes.step([ordered[0], *ordered], [0.0, *ys], where="post",
                   label=f"{label} (n = {len(ordered)}, median {percentile(ordered, 0.5):.0f})")
    for x, y, label in marks:
        axes.plot([x], [y], marker="D", color="black", linestyle="none", label=label)
        axes.axvline(x, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("% of samples at or below")
    axes.set_ylim(0, 100)
    axes.set_xlim(left=0)
    axes.grid(True, linewidth=0.4, alpha=0.5)
    axes.legend(fontsize=8, frameon=False, loc="lower right")
    axes.set_title(title, fontsize=10)
    figure.savefig(path, format=path.suffix.lower()[1:], dpi=150, bbox_inches="tight")
