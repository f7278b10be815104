"""Capped exponential backoff with "equal jitter" (pure): the one formula for every retry delay.

Signaling reconnects (evio.signal.client) and peers whose tunnel failed
(evio.overlay.peer_backoff) both wait `backoff_delay` seconds.
"""

from __future__ import annotations

import random


def backoff_delay(failures: int, rng: random.Random, base: float, cap: float) -> float:
    """Seconds to wait after `failures` consecutive failures (1 = the first; 0 or less: no wait).

    Doubles from `base` up to `cap`; "equal jitter" (a draw in [d/2, d]) keeps
    nodes that lost the same server or peer from all trying again at the same
    instant, yet no node waits much longer than the nominal delay.
    """
    if failures < 1:
        return 0.0
    nominal = min(cap, base * 2.0 ** min(failures - 1, 62))
    return nominal / 2 + rng.uniform(0.0, nominal / 2)
