"""Node identifiers and clockwise ring distance (docs/design.md, "Ring and node ids").

A node id is a 128-bit integer, written as 32 lowercase hex digits. The ring
is ordered numerically and wraps at 2**128; all arcs are clockwise.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable

NODE_ID_BITS = 128
RING_SIZE = 1 << NODE_ID_BITS
MAX_NODE_ID = RING_SIZE - 1

_HEX_ID = re.compile(r"[0-9a-fA-F]{32}")
# An overlay id names a directory under /etc/evio and sits between colons in certificate URIs: nothing else fits.
OVERLAY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")  # whole text: fullmatch


class NodeIdError(ValueError):
    """Text that is not a 32-hex-digit node id."""


def parse_node_id(text: str) -> int:
    """Parse 32 hex digits (either case) into a node id."""
    if not isinstance(text, str) or not _HEX_ID.fullmatch(text):
        raise NodeIdError(f"node id must be 32 hex digits, got {text!r}")
    return int(text, 16)


def format_node_id(nid: int) -> str:
    if not 0 <= nid <= MAX_NODE_ID:
        raise NodeIdError(f"node id out of range: {nid}")
    return f"{nid:032x}"


def clockwise_distance(a: int, b: int) -> int:
    """Distance travelled clockwise from `a` to `b`; 0 when they are equal."""
    return (b - a) % RING_SIZE


def sorted_clockwise(origin: int, nids: Iterable[int]) -> list[int]:
    """Distinct ids ordered by clockwise distance from `origin` (origin itself first if present)."""
    # Numeric order rotated to start at origin: the same order as sorting by clockwise_distance,
    # without a key call per id (this runs for every node of every simulated flood graph).
    ordered = sorted(nids if isinstance(nids, (set, frozenset)) else set(nids))  # a set is distinct already
    start = bisect_left(ordered, origin)
    return ordered[start:] + ordered[:start]


def strictly_between(x: int, start: int, end: int) -> bool:
    """True when `x` lies on the open clockwise arc (start, end).

    When start == end the arc is empty: this is the forwarder's view, where a
    bound equal to oneself grants nothing beyond oneself.
    """
    return 0 < clockwise_distance(start, x) < clockwise_distance(start, end)
