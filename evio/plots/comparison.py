"""Two switching modes side by side over the same node pairs (E9, STP against Bounded Flood).

One figure, three panels: path length histograms, TCP throughput per sampled pair (grouped bars), and
the throughput CDF of each mode (the paper's Fig. 9 form).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from evio.plots.ring import PlotError


def draw_mode_comparison(
    path_lengths: Mapping[str, Sequence[int]],
    throughput: Mapping[str, Sequence[float | None]],
    pair_labels: Sequence[str],
    path: Path,
    title: str,
) -> None:
    """`path_lengths`: mode -> hops of every pair; `throughput`: mode -> Mbit/s of each pair in
    `pair_labels` order (None: the run failed, drawn as no bar and left out of the CDF)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'evio[plots]'") from None
    if path.suffix.lower() not in (".svg", ".png"):
        raise PlotError(f"{path}: write .svg or .png")
    figure = Figure(figsize=(16.0, 4.8))
    hist_axes, bar_axes, cdf_axes = figure.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.6, 1]})

    modes = list(path_lengths)
    hops = sorted({h for values in path_lengths.values() for h in values})
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        lengths = path_lengths[mode]
        total = len(lengths) or 1
        shares = [100.0 * sum(1 for v in lengths if v == h) / total for h in hops]
        mean = sum(lengths) / total
        hist_axes.bar([h - 0.4 + width * (i + 0.5) for h in hops], shares, width=width,
                      label=f"{mode} (mean {mean:.2f}, max {max(lengths, default=0)})")  # fmt: skip
    hist_axes.set_xticks(hops)
    hist_axes.set_xlabel("path length (switching hops)")
    hist_axes.set_ylabel("% of node pairs")
    hist_axes.set_title("path length", fontsize=10)
    hist_axes.legend(fontsize=8, frameon=False)

    series = list(throughput)
    width = 0.8 / max(1, len(series))
    for i, mode in enumerate(series):
        values = throughput[mode]
        xs = [p - 0.4 + width * (i + 0.5) for p, v in enumerate(values) if v is not None]
        bar_axes.bar(xs, [v for v in values if v is not None], width=width, label=mode)
    bar_axes.set_xticks(range(len(pair_labels)))
    bar_axes.set_xticklabels(pair_labels, rotation=60, ha="right", fontsize=7)
    bar_axes.set_ylabel("TCP throughput (Mbit/s)")
    bar_axes.set_title("the same pairs in both modes", fontsize=10)
    bar_axes.legend(fontsize=8, frameon=False)

    for mode in series:
        rates = sorted(v for v in throughput[mode] if v is not None)
        if not rates:
            continue
        cumulative = [100.0 * (i + 1) / len(rates) for i in range(len(rates))]
        cdf_axes.step(rates, cumulative, where="post", label=mode)
    cdf_axes.set_xlabel("TCP throughput (Mbit/s)")
    cdf_axes.set_ylabel("% of pairs at or below")
    cdf_axes.set_title("throughput CDF (paper: Fig. 9)", fontsize=10)
    cdf_axes.legend(fontsize=8, frameon=False)

    figure.suptitle(title, fontsize=11)
    figure.savefig(path, format=path.suffix.lower()[1:], dpi=150, bbox_inches="tight")
