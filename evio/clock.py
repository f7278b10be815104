"""Time as an interface: `Clock`, and `RealClock`, the one the daemon runs on.

The decision cores take `now` as an argument; their asyncio adapters (the
overlay controller, the signaling endpoint) read the time, arm timers, sleep
and bound waits through a `Clock` instead of `time` and the event loop, so a
test can give a whole fleet of them `evio.testing.virtual_clock.VirtualClock`
and advance time itself: deterministic, and with no real waiting.

`RealClock` keeps what the adapters did before: `time.monotonic()` for `now`,
the running loop's timers, `asyncio.sleep` and `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

__all__ = ["REAL_CLOCK", "Clock", "RealClock", "Timer"]


class Timer(Protocol):
    """A pending call from `Clock.call_later` / `call_at`."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (the origin means nothing)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        """Call `callback` in the running loop `delay` seconds from now."""
        ...

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Call `callback` in the running loop at `when` (on this clock's scale)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        """`asyncio.wait_for` on this clock: TimeoutError (the awaitable cancelled) after `timeout` seconds."""
        ...


class RealClock:
    """Wall time: the monotonic clock and the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        # Through a delay: the loop's own time scale need not be time.monotonic's (uvloop).
        return self.call_later(when - self.now(), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        return await asyncio.wait_for(awaitable, timeout)


REAL_CLOCK = RealClock()
