"""Token buckets: how often something costly may happen, alone (`TokenBucket`) or per peer.

Pure: `now` comes in (seconds, any monotonic origin). The per-peer table
(`PeerRateLimiter`) is bounded: when it is full, the bucket idle longest is
forgotten (a forgotten peer starts again with a full burst, which is the
state it would have refilled to anyway once idle for `burst / rate`
seconds). `LogLimiter` says when a line about one peer is worth logging again.
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


class TokenBucket:
    """`rate.burst` tokens at once, then `rate.per_second`; starts full at `now`."""

    __slots__ = ("rate", "_tokens", "_at")

    def __init__(self, rate: Rate, now: float) -> None:
        self.rate = rate
        self._tokens = float(rate.burst)
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(float(self.rate.burst), self._tokens + (now - self._at) * self.rate.per_second)
            self._at = now

    def take(self, now: float) -> bool:
        """Spend one token if there is one."""
        self._refill(now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def next_token(self, now: float) -> float:
        """When the next token will be there (`now` if one is)."""
        self._refill(now)
        if self._tokens >= 1.0:
            return now
        return now + (1.0 - self._tokens) / self.rate.per_second


class PeerRateLimiter(Generic[K]):
    """A `TokenBucket` per peer, in a bounded table."""

    def __init__(self, rate: Rate, max_peers: int = 4096) -> None:
        self.rate = rate
        self._max_peers = max_peers
        self._buckets: OrderedDict[K, TokenBucket] = OrderedDict()

    def allow(self, peer: K, now: float) -> bool:
        """Spend one token of `peer`'s bucket if it has one."""
        bucket = self._buckets.pop(peer, None)
        if bucket is None:
            bucket = TokenBucket(self.rate, now)
        allowed = bucket.take(now)
        self._buckets[peer] = bucket  # most recently used last
        while len(self._buckets) > self._max_peers:
            self._buckets.popitem(last=False)
        return allowed

    def forget(self, peer: K) -> None:
        self._buckets.pop(peer, None)

    def __len__(self) -> int:
        return len(self._buckets)


class LogLimiter(Generic[K]):
    """Says when a line about `peer` is worth logging: at most once per `interval` seconds each.

    Bad input is counted every time but logged this way, so a noisy or hostile
    peer cannot flood the log. The table is bounded: when it is full, peers
    logged more than `interval` ago are forgotten, and while it is still full
    of recent ones a new peer is not logged (quiet rather than unbounded, and
    no flood of new sources can make a recent one log again). One line for
    the whole process or object, not per peer: key `None`.
    """

    def __init__(self, interval: float = 60.0, max_peers: int = 4096) -> None:
        self.interval = interval
        self._max_peers = max_peers
        self._last: OrderedDict[K, float] = OrderedDict()

    def should_log(self, peer: K, now: float) -> bool:
        last = self._last.get(peer)
        if last is not None and now - last < self.interval:
            return False
        if last is None and len(self._last) >= self._max_peers:
            # Logged longest ago first: forget those of earlier intervals.
            while self._last and now - next(iter(self._last.values())) >= self.interval:
                self._last.popitem(last=False)
            if len(self._last) >= self._max_peers:
                return False
        self._last.pop(peer, None)
        self._last[peer] = now  # most recently logged last
        return True
