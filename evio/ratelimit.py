"""Per-peer token buckets: how often each peer may ask for something costly.

Pure: `now` comes in (seconds, any monotonic origin). The table of buckets is
bounded: when it is full, the bucket idle longest is forgotten (a forgotten
peer starts again with a full burst, which is the state it would have
refilled to anyway once idle for `burst / rate` seconds).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Rate:
    """`burst` requests at once, then `per_second` sustained."""

    per_second: float
    burst: int

    def __post_init__(self) -> None:
        if self.per_second <= 0 or self.burst < 1:
            raise ValueError(f"a rate needs per_second > 0 and burst >= 1, got {self}")


class PeerRateLimiter(Generic[K]):
    def __init__(self, rate: Rate, max_peers: int = 4096) -> None:
        self.rate = rate
        self._max_peers = max_peers
        self._buckets: OrderedDict[K, tuple[float, float]] = OrderedDict()  # peer -> (tokens, at)

    def allow(self, peer: K, now: float) -> bool:
        """Spend one token of `peer`'s bucket if it has one."""
        tokens, at = self._buckets.pop(peer, (float(self.rate.burst), now))
        if now > at:
            tokens = min(float(self.rate.burst), tokens + (now - at) * self.rate.per_second)
            at = now
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        self._buckets[peer] = (tokens, at)  # most recently used last
        while len(self._buckets) > self._max_peers:
            self._buckets.popitem(last=False)
        return allowed

    def forget(self, peer: K) -> None:
        self._buckets.pop(peer, None)

    def __len__(self) -> int:
        return len(self._buckets)


class LogLimiter(Generic[K]):
    """Says when a line about `peer` is worth logging: at most once per `interval` seconds each.

    Bounded like `PeerRateLimiter`: when full, the peer logged longest ago is forgotten.
    """

    def __init__(self, interval: float = 60.0, max_peers: int = 4096) -> None:
        self.interval = interval
        self._max_peers = max_peers
        self._last: OrderedDict[K, float] = OrderedDict()

    def should_log(self, peer: K, now: float) -> bool:
        last = self._last.get(peer)
        if last is not None and now - last < self.interval:
            return False
        self._last.pop(peer, None)
        self._last[peer] = now
        while len(self._last) > self._max_peers:
            self._last.popitem(last=False)
        return True
