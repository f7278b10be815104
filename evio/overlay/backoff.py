"""Pacing for the overlay controller (pure): per-peer failure backoff and a budget of link changes.

`PeerBackoff`: a peer whose tunnel could not be set up, or whose requests went
unanswered, is not asked again before a delay that doubles with each
consecutive failure up to a cap; a tunnel that comes up resets it. The
controller also leaves a backed-off peer out of its ring meanwhile, so the
next peers take its place (a dead successor is bypassed at once rather than
after its signaling presence times out).

`ChangeBudget`: a token bucket over tunnel additions and removals, so a burst
of membership changes cannot make a node tear down and set up links faster
than `rate` per second after an initial `burst`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


def backoff_delay(failures: int, rng: random.Random, base: float, cap: float) -> float:
    """Seconds to wait after `failures` consecutive failures (1 = the first).

    Doubles from `base` up to `cap`; "equal jitter" (a draw in [d/2, d]) keeps
    nodes that lost the same peer from all asking again at the same instant.
    """
    if failures < 1:
        return 0.0
    nominal = min(cap, base * 2.0 ** min(failures - 1, 62))
    return nominal / 2 + rng.uniform(0.0, nominal / 2)


@dataclass
class _Record:
    failures: int
    retry_at: float


class PeerBackoff:
    def __init__(self, base: float, cap: float) -> None:
        if base <= 0 or cap < base:
            raise ValueError("backoff needs 0 < base <= cap")
        self.base = base
        self.cap = cap
        self._records: dict[int, _Record] = {}

    def failed(self, peer: int, now: float, rng: random.Random, cap: float | None = None) -> float:
        """Count one more failure of `peer`; the time before which it is not asked again.

        `cap` (at least `base`) lowers the cap for this delay: a missing ring successor is asked
        again within seconds however often it failed, where another peer may wait `self.cap`.
        """
        record = self._records.get(peer)
        failures = 1 if record is None else record.failures + 1
        limit = self.cap if cap is None else max(self.base, min(cap, self.cap))
        retry_at = now + backoff_delay(failures, rng, self.base, limit)
        self._records[peer] = _Record(failures, retry_at)
        return retry_at

    def succeeded(self, peer: int) -> None:
        self._records.pop(peer, None)

    def forget(self, peer: int) -> None:
        self._records.pop(peer, None)

    def failures(self, peer: int) -> int:
        record = self._records.get(peer)
        return 0 if record is None else record.failures

    def blocked(self, peer: int, now: float) -> bool:
        record = self._records.get(peer)
        return record is not None and now < record.retry_at

    def blocked_peers(self, now: float) -> set[int]:
        return {peer for peer, record in self._records.items() if now < record.retry_at}

    def next_expiry(self, now: float) -> float | None:
        """The earliest time after `now` at which a blocked peer may be asked again."""
        pending = [r.retry_at for r in self._records.values() if r.retry_at > now]
        return min(pending) if pending else None

    def peers(self) -> set[int]:
        """Peers with a failure on record (blocked or not)."""
        return set(self._records)

    def clear(self) -> None:
        self._records.clear()


class ChangeBudget:
    """Token bucket: `burst` changes at once, then `rate` per second."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a change budget needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
            self._at = now

    def take(self, now: float) -> bool:
        """Spend one change if the budget allows it now."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def next_token(self, now: float) -> float:
        """When the next change will be allowed (`now` if one is available)."""
        self._refill(now)
        if self._tokens >= 1.0:
            return now
        return now + (1.0 - self._tokens) / self.rate
