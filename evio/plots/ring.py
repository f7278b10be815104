"""The overlay drawn as the paper's Fig. 3: nodes on a ring in node id order, links by type.

Input is a neutral description (`RingPicture`) so that the live lab and the
simulator share this code: the command line converts either into it.

- nodes sit clockwise from the top in ring (node id) order;
- successor links are solid, long-distance links dashed chords bent towards
  the centre, on-demand links dotted; links not up at both ends are grey;
- relayed links (through TURN) carry a red square at their middle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUCCESSOR = "successor"
LONG_DISTANCE = "long_distance"
ON_DEMAND = "on_demand"
_STRENGTH = {SUCCESSOR: 0, LONG_DISTANCE: 1, ON_DEMAND: 2}  # the strongest type names a link held both ways

# Beyond this many nodes the ring is a grey smear: refuse rather than write a useless picture.
MAX_DRAWN_NODES = 512
# Up to this many nodes every node is labelled.
MAX_LABELLED_NODES = 64

_STYLE: dict[str, dict[str, Any]] = {
    SUCCESSOR: {"color": "#1f1f1f", "linestyle": "-", "linewidth": 1.6, "label": "successor"},
    LONG_DISTANCE: {"color": "#1f5fbf", "linestyle": (0, (5, 3)), "linewidth": 0.8, "label": "long-distance"},
    ON_DEMAND: {"color": "#e07b00", "linestyle": (0, (1, 2)), "linewidth": 1.8, "label": "on-demand"},
}


class PlotError(Exception):
    """A picture that cannot be drawn (matplotlib missing, too many nodes, unknown file type)."""


@dataclass(frozen=True)
class RingLink:
    a: str
    b: str
    type: str  # successor, long_distance or on_demand
    relayed: bool = False
    up: bool = True


@dataclass(frozen=True)
class RingPicture:
    nodes: tuple[str, ...]  # ring (node id) order
    links: tuple[RingLink, ...]
    title: str = ""


def merge_links(links: Iterable[RingLink]) -> tuple[RingLink, ...]:
    """One link per pair of nodes: the strongest type either end holds, relayed if either end says so,
    up only if every report says so."""
    merged: dict[frozenset[str], RingLink] = {}
    for link in links:
        if link.a == link.b:
            continue
        key = frozenset((link.a, link.b))
        old = merged.get(key)
        if old is None:
            merged[key] = link
            continue
        strongest = min((old.type, link.type), key=lambda t: _STRENGTH.get(t, len(_STRENGTH)))
        merged[key] = RingLink(old.a, old.b, strongest, old.relayed or link.relayed, old.up and link.up)
    return tuple(merged.values())


def draw_ring(picture: RingPicture, path: Path) -> None:
    """Write the picture as SVG or PNG (by `path`'s suffix)."""
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise PlotError(f"{path}: write .svg or .png")
    if len(picture.nodes) > MAX_DRAWN_NODES:
        raise PlotError(f"{len(picture.nodes)} nodes: more than {MAX_DRAWN_NODES} cannot be drawn readably")
    figure = _figure(picture)
    figure.savefig(path, format=suffix[1:], dpi=150, bbox_inches="tight")


def _figure(picture: RingPicture) -> Any:
    figure_class, path_class, patches, lines = _matplotlib()
    n = len(picture.nodes)
    size = 7.0 if n <= 64 else 10.0
    figure = figure_class(figsize=(size, size + 0.6))
    axes = figure.add_subplot()
    axes.set_aspect("equal")
    axes.axis("off")
    where = {name: _position(i, n) for i, name in enumerate(picture.nodes)}

    # The ring itself, faint: the order links are measured along.
    axes.add_patch(patches.Circle((0, 0), 1.0, fill=False, color="#d0d0d0", linewidth=0.8, zorder=0))
    drawn_types: set[str] = set()
    relayed_seen = pending_seen = False
    for link in sorted(picture.links, key=lambda l: -_STRENGTH.get(l.type, 3)):  # successors on top
        if link.a not in where or link.b not in where:
            continue
        style = dict(_STYLE.get(link.type, _STYLE[LONG_DISTANCE]))
        style.pop("label")
        if link.type == LONG_DISTANCE:
            style["alpha"] = 0.55 if n <= 64 else 0.3  # many chords: let the crossings show
        if not link.up:
            style["color"] = "#a0a0a0"
            pending_seen = True
        (x0, y0), (x1, y1) = where[link.a], where[link.b]
        control = _control_point(where[link.a], where[link.b], link.type)
        curve = path_class([(x0, y0), control, (x1, y1)], [path_class.MOVETO, path_class.CURVE3, path_class.CURVE3])
        axes.add_patch(patches.PathPatch(curve, fill=False, zorder=2 if link.type == SUCCESSOR else 1, **style))
        drawn_types.add(link.type)
        if link.relayed:
            relayed_seen = True
            mx, my = _bezier_middle((x0, y0), control, (x1, y1))
            axes.plot([mx], [my], marker="s", markersize=6, color="#d62728", zorder=4)

    dot = 7 if n <= 64 else (4 if n <= 200 else 2)
    xs = [where[name][0] for name in picture.nodes]
    ys = [where[name][1] for name in picture.nodes]
    axes.scatter(xs, ys, s=dot * dot, color="#ffffff", edgecolors="#1f1f1f", linewidths=1.0, zorder=3)
    if n <= MAX_LABELLED_NODES:
        fontsize = 9 if n <= 24 else 7
        for i, name in enumerate(picture.nodes):
            angle = _angle(i, n)
            x, y = math.cos(angle), math.sin(angle)
            align = "left" if x > 0.2 else ("right" if x < -0.2 else "center")
            axes.text(1.09 * x, 1.09 * y, name, ha=align, va="center", fontsize=fontsize, zorder=5)

    handles = [
        lines.Line2D([], [], color=_STYLE[t]["color"], linestyle=_STYLE[t]["linestyle"],
                     linewidth=_STYLE[t]["linewidth"], label=_STYLE[t]["label"])
        for t in (SUCCESSOR, LONG_DISTANCE, ON_DEMAND) if t in drawn_types
    ]  # fmt: skip
    if relayed_seen:
        handles.append(lines.Line2D([], [], color="#d62728", marker="s", linestyle="", label="relayed (TURN)"))
    if pending_seen:
        handles.append(lines.Line2D([], [], color="#a0a0a0", linestyle="-", label="not up at both ends"))
    if handles:
        axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles),
                    frameon=False, fontsize=9)  # fmt: skip
    counts = _type_counts(picture.links)
    subtitle = ", ".join(f"{counts.get(t, 0)} {_STYLE[t]['label']}" for t in (SUCCESSOR, LONG_DISTANCE, ON_DEMAND))
    axes.set_title(f"{picture.title}\n{n} nodes in node id order, clockwise from the top; links: {subtitle}",
                   fontsize=10)  # fmt: skip
    limit = 1.32
    axes.set_xlim(-limit, limit)
    axes.set_ylim(-limit, limit)
    return figure


def _matplotlib() -> tuple[Any, Any, Any, Any]:
    try:
        from matplotlib import lines, patches
        from matplotlib.figure import Figure
        from matplotlib.path import Path as MplPath
    except ImportError:
        raise PlotError("matplotlib is not installed: pip install 'evio[plots]'") from None
    return Figure, MplPath, patches, lines


def _angle(i: int, n: int) -> float:
    """Clockwise from the top."""
    return math.pi / 2 - 2 * math.pi * i / max(n, 1)


def _position(i: int, n: int) -> tuple[float, float]:
    angle = _angle(i, n)
    return math.cos(angle), math.sin(angle)


def _control_point(a: tuple[float, float], b: tuple[float, float], link_type: str) -> tuple[float, float]:
    """Successor links bulge outwards along the ring (so a link two places on shows beside the
    ring); the others bend towards the centre, more the longer they are."""
    mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
    if link_type == SUCCESSOR:
        radius = math.hypot(mx, my) or 1.0
        return mx / radius * 1.06, my / radius * 1.06
    chord = math.dist(a, b)  # 0..2
    pull = 0.55 * chord / 2  # a diameter's control point is at the centre's side
    return mx * (1 - pull), my * (1 - pull)


def _bezier_middle(p0: tuple[float, float], p1: tuple[float, float], p2: tuple[float, float]) -> tuple[float, float]:
    return (0.25 * p0[0] + 0.5 * p1[0] + 0.25 * p2[0], 0.25 * p0[1] + 0.5 * p1[1] + 0.25 * p2[1])


def _type_counts(links: Sequence[RingLink]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for link in links:
        counts[link.type] = counts.get(link.type, 0) + 1
    return counts
