"""Telling a broken measurement from a slow one: a figure far below the others it was measured beside.

On a shared machine absolute throughput moves 3-6x with the load, so no fixed
floor tells a collapsed data path (a TCP stream at 0.06 Mbit/s where UDP through
the same tunnel makes 450) from a slow one. Figures measured alongside move
together, though: one under a small fraction of their median is not a figure,
it is a fault (the benchmarks print it as BROKEN, the data path tests fail).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

BROKEN_FRACTION = 0.05
"""Far below: under 5 % of the median of the figures measured alongside. The slowest sound data path here
(Python, no offloads) makes some 10 % of the fastest (native, offloads) and a third of their median; a
collapse makes well under 1 %."""


def far_below(values: Mapping[str, float], fraction: float = BROKEN_FRACTION) -> dict[str, float]:
    """The names whose value is under ``fraction`` of the median of all ``values``: name -> that median.

    With fewer than two values there is nothing to compare with, and nothing is far below."""
    if len(values) < 2:
        return {}
    median = statistics.median(values.values())
    return {name: median for name, value in values.items() if value < fraction * median}
