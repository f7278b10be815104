"""A token bucket per key: how many events each source may cause, on average and in a burst.

Pure: the caller passes `now` (monotonic seconds). Used to bound the packet-ins
one bridge port may cost the controller: every frame the switch has no flow
for, and every FRB, is a packet-in handled in Python, so one port flooding
them would starve the others.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    def __init__(self, rate: float, burst: float) -> None:
        if not rate > 0 or not burst >= 1:
            raise ValueError(f"rate must be positive and burst at least 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[int, _Bucket] = {}

    def allow(self, key: int, now: float) -> bool:
        """Take one token from `key`'s bucket if it has one."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        elif now > bucket.updated:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return True
        return False

    def forget(self, key: int) -> None:
        self._buckets.pop(key, None)

    def __len__(self) -> int:
        return len(self._buckets)
