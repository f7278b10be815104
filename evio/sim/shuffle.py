"""`random.Random.shuffle`, the same permutation from the same generator state, in less CPU.

The simulator shuffles the requests of a round (some 1.8 million in the first
round at n = 10^5) so that they arrive in a seeded random order. The standard
library's shuffle calls `_randbelow` once per element, a Python function that
computes the bit length and draws; this one draws inline, with the bit length
computed once per run of indexes that share it. It asks the generator for the
very same `getrandbits` calls in the same order, so a seed gives the same
permutation and leaves the generator in the same state (`test_shuffle` holds
it to that). A subclass of `random.Random` may draw differently: it gets the
standard shuffle.
"""

from __future__ import annotations

import random
from typing import Any


def shuffle(rng: random.Random, items: list[Any]) -> None:
    """Shuffle `items` in place exactly as `rng.shuffle(items)` would."""
    if type(rng) is not random.Random:
        rng.shuffle(items)
        return
    getrandbits = rng.getrandbits
    # Fisher-Yates from the end, as CPython's shuffle: index i swaps with a draw in [0, i],
    # made by rejection from getrandbits(bit length of i + 1).
    top = len(items) - 1
    while top > 0:
        bits = (top + 1).bit_length()
        lowest = max(1 << (bits - 1), 2) - 1  # the smallest i whose i + 1 has this bit length
        for i in range(top, lowest - 1, -1):
            bound = i + 1
            j = getrandbits(bits)
            while j >= bound:
                j = getrandbits(bits)
            items[i], items[j] = items[j], items[i]
        top = lowest - 1
