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

That factor only knows the lag seen before a setup starts: the first setups of
a node starting on a loaded host (a 64-node lab) had none to go by and missed
their deadlines. So each deadline is also a `LoopBudget`: it is counted in the
time the loop ran, not wall time: waiting in short slices, it adds how late
each slice woke, up to `MAX_PATIENCE` times its base. What it sees is recorded
in the `LoopLag` too, so the next setups' factor knows it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_PATIENCE = 4.0
"""The most the setup deadlines are stretched under load; the controlled side always allows for it."""
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


Lateness = Callable[[float, float], None]
"""Told (when, how late) each time a wait woke late: `LoopLag.record`."""

BUDGET_SLICE = 0.25  # a budget's waits are at most this long: its lateness is measured this often


class LoopBudget:
    """A deadline counted in the time the event loop ran: `seconds`, plus however late the loop woke
    while waiting, never more than `most` (default `MAX_PATIENCE` times `seconds`) of wall time."""

    def __init__(self, seconds: float, most: float | None = None, *, lateness: Lateness | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.most = max(seconds, most if most is not None else seconds * MAX_PATIENCE)
        self.lost = 0.0
        """Wall time the loop did not run for us (late wake-ups), added to the deadline."""
        self._lateness = lateness
        self._clock = clock
        self._start = clock()

    def remaining(self) -> float:
        return min(self.seconds + self.lost, self.most) - (self._clock() - self._start)

    def overslept(self, asked: float, planned: float) -> None:
        """A wait of `planned` seconds started at `asked` has just timed out: its lateness is lost time."""
        now = self._clock()
        late = max(0.0, now - asked - planned)
        self.lost += late
        if self._lateness is not None and late > LAG_FREE:  # smaller stretches nothing: not kept (`recent` scans them)
            self._lateness(now, late)

    async def first(self, waiting: set[asyncio.Future[Any]]) -> tuple[set[asyncio.Future[Any]], set[asyncio.Future[Any]]]:
        """As `asyncio.wait(waiting, return_when=FIRST_COMPLETED)` with this deadline: nothing done when it passed."""
        while True:
            remaining = self.remaining()
            if remaining <= 0:
                return set(), waiting
            step = min(remaining, BUDGET_SLICE)
            asked = self._clock()
            done, pending = await asyncio.wait(waiting, timeout=step, return_when=asyncio.FIRST_COMPLETED)
            if done:
                return done, pending
            self.overslept(asked, step)

    async def run(self, awaitable: Awaitable[T]) -> T:
        """As `asyncio.wait_for(awaitable, ...)` with this deadline: TimeoutError, `awaitable` cancelled, when it passes."""
        task = asyncio.ensure_future(awaitable)
        try:
            done, _ = await self.first({task})
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if not done:
            raise TimeoutError
        return task.result()
