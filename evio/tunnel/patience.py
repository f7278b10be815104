"""Setup timeouts that stretch with load: how late this node's event loop runs.

A tunnel setup is a few round trips between two event loops (STUN checks,
a TURN permission, the DTLS flights). Its deadlines (`IceConfig.direct_timeout`,
`relay_timeout`, `TunnelSettings.dtls_timeout`) are tight so that a dead path
costs little, but on a host whose loops run seconds late (a 64-node lab on two
cores: a load average around 50) every setup missed them, was retried, and
added to the load that made it fail.

`LoopLag` samples how late a short sleep wakes, only while setups happen
(`wake`): an idle node runs no sampler at all. `patience` turns the worst
lateness of the last few seconds into the factor the next setup's deadlines are
multiplied by, 1 on an unloaded host and at most `MAX_PATIENCE`. The
controlled side cannot know the controlling side's factor, so it waits as if
that were `MAX_PATIENCE` (`IceAgent.select_controlled`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

from evio.tunnel.ice import MAX_PATIENCE

LAG_FREE = 0.1  # lateness up to this is an ordinary busy moment: nothing stretches (CI's small labs)
LAG_UNIT = 0.25  # each this much lateness beyond it adds the base timeouts once more


def patience(lag: float) -> float:
    """The factor for setup deadlines after a loop lateness of `lag` seconds: 1 .. MAX_PATIENCE."""
    return min(MAX_PATIENCE, 1.0 + max(0.0, lag - LAG_FREE) / LAG_UNIT)


class LoopLag:
    """The event loop's recent lateness, sampled every `interval` for `linger` seconds after each `wake`."""

    def __init__(self, interval: float = 0.2, window: float = 10.0, linger: float = 30.0) -> None:
        self.interval = interval
        self.window = window
        self.linger = linger
        self._samples: collections.deque[tuple[float, float]] = collections.deque()  # (when, lateness)
        self._until = 0.0
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """A setup starts: sample (again) for the next `linger` seconds."""
        self._until = time.monotonic() + self.linger
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._sample(), name="tunnel loop lag")

    def record(self, when: float, lateness: float) -> None:
        self._samples.append((when, lateness))
        while self._samples and self._samples[0][0] < when - self.window:
            self._samples.popleft()

    def recent(self, now: float | None = None) -> float:
        """The worst lateness seen in the last `window` seconds (0 without samples)."""
        now = time.monotonic() if now is None else now
        return max((late for when, late in self._samples if when >= now - self.window), default=0.0)

    def patience(self) -> float:
        return patience(self.recent())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sample(self) -> None:
        while time.monotonic() < self._until:
            asked = time.monotonic()
            await asyncio.sleep(self.interval)
            woke = time.monotonic()
            self.record(woke, max(0.0, woke - asked - self.interval))
