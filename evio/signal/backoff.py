"""Reconnect delays: capped exponential backoff with jitter (pure)."""

from __future__ import annotations

import random


def reconnect_delay(attempt: int, rng: random.Random, base: float = 0.5, cap: float = 30.0) -> float:
    """Seconds to wait before reconnect attempt number `attempt` (1 = first retry).

    Doubles from `base` up to `cap`; "equal jitter" keeps the delay within
    [d/2, d] so a server restart is not met by every node at the same instant,
    yet no node waits much longer than the nominal delay.
    """
    if attempt < 1:
        return 0.0
    nominal = min(cap, base * 2.0 ** min(attempt - 1, 62))
    return nominal / 2 + rng.uniform(0.0, nominal / 2)
