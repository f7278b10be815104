"""Per-peer failure backoff for the overlay controller (pure).

A peer whose tunnel could not be set up, or whose requests went
unanswered, is not asked again before a delay that doubles with each
consecutive failure up to a cap; a tunnel that comes up resets it. The
controller also leaves a backed-off peer out of its ring meanwhile, so the
next peers take its place (a dead successor is bypassed at once rather than
after its signaling presence times out). The delay is `evio.backoff.backoff_delay`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evio.backoff import backoff_delay


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
