"""A `Clock` (evio.clock) whose time moves only when the test moves it.

Give one `VirtualClock` to every part of an in-process fleet (controllers,
fake signaling, fake links) and drive it from the test:

    clock = VirtualClock()
    ...
    await clock.run_until(lambda: not overlay.missing_successors(), timeout=60, what="ring")
    await clock.advance(5.0)
    await clock.run(overlay.leave(node))        # an operation that may wait on timers

Between two steps of time the clock lets the event loop run until it has
nothing ready (every message delivered, every task blocked), then fires the
earliest timers and jumps to their time. Nothing waits for real: 60 virtual
seconds of a 32-node overlay take what their events cost in CPU. The order is
fixed by the program (timers with the same time fire in the order they were
armed), so a run is the same every time.

While the clock is not driven its time stands still: a test that awaits
something which needs a timer must await it through `run` (or `run_until`).
Needs the standard asyncio event loop (it looks at the loop's ready queue to
know that the loop went idle). Work handed to a thread (`asyncio.to_thread`,
`run_in_executor(None, ...)`) is real work: the loop is not idle until it is
back. Other real I/O (sockets, pipes) the clock cannot see: keep such tests
on real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["ManualTime", "VirtualClock", "VirtualTimer"]

MAX_TURNS = 1_000_000  # loop turns without going idle before we call it a busy loop
THREAD_POLL = 0.0005  # real seconds between looks at work out in threads


class ManualTime:
    """A `time.monotonic` stand-in for synchronous parts (the os-ken app, the transit table): the test sets `now`."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class _ThreadWork:
    """Counts the loop's `run_in_executor` jobs (what `asyncio.to_thread` uses) whose result is not back yet.

    Counted on the loop's side: a job ends for us when its asyncio future is
    resolved, which also schedules whoever awaits it, so the loop is never
    seen idle in between.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.unfinished = 0
        self._submit = loop.run_in_executor

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        future = self._submit(executor, func, *args)
        self.unfinished += 1
        future.add_done_callback(self._done)
        return future

    def _done(self, future: asyncio.Future[Any]) -> None:
        self.unfinished -= 1


class VirtualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, VirtualTimer]] = []
        self._order = itertools.count()
        self._watchers: list[Callable[[], None]] = []
        self.fired = 0  # timer callbacks run, for tests of the clock

    # -- the Clock interface ---------------------------------------------------------------

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> VirtualTimer:
        timer = VirtualTimer(max(when, self._now), callback)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def call_later(self, delay: float, callback: Callable[[], object]) -> VirtualTimer:
        return self.call_at(self._now + max(0.0, delay), callback)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: None if waiter.done() else waiter.set_result(None))
        try:
            await waiter
        finally:
            timer.cancel()

    async def wait_for(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        if timeout is None:
            return await awaitable
        task = asyncio.ensure_future(awaitable)
        expired = False

        def expire() -> None:
            nonlocal expired
            if not task.done():
                expired = True
                task.cancel()

        timer = self.call_later(timeout, expire)
        try:
            return await task
        except asyncio.CancelledError:
            # As asyncio.wait_for: our own expiry is a timeout, whatever state the cancelled awaitable ends in
            # (a cancelled gather ends with a CancelledError set as its exception, not "cancelled"); a cancel
            # of the waiting task itself stays a cancel.
            current = asyncio.current_task()
            if expired and (current is None or current.cancelling() == 0):
                raise TimeoutError(f"timed out after {timeout} virtual s") from None
            raise
        finally:
            timer.cancel()

    # -- driving it -------------------------------------------------------------------------

    def watch(self, check: Callable[[], None]) -> Callable[[], None]:
        """Call `check` after every loop turn while the clock is driven; returns the unwatch function.

        For invariants that must hold at every moment, not only when time moves.
        """
        self._watchers.append(check)
        return lambda: self._watchers.remove(check) if check in self._watchers else None

    def next_timer(self) -> float | None:
        """When the earliest live timer fires, if any."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def settle(self) -> None:
        """Run the loop, and the timers due by now, until nothing is ready; time does not move."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        if ready is None:
            raise RuntimeError("VirtualClock needs the standard asyncio event loop")
        threads = _thread_work(loop)
        for _ in range(MAX_TURNS):
            await asyncio.sleep(0)
            for check in list(self._watchers):
                check()
            if ready:
                continue
            if threads.unfinished:
                await asyncio.sleep(THREAD_POLL)  # its result comes back through the loop
                continue
            if not self._fire_due(loop):
                return
        raise RuntimeError(f"the event loop did not go idle in {MAX_TURNS} turns (a task polling in a loop?)")

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, firing every timer on the way, each at its time."""
        target = self._now + seconds
        await self.settle()
        while (when := self.next_timer()) is not None and when <= target:
            self._now = max(self._now, when)
            await self.settle()
        self._now = max(self._now, target)
        await self.settle()

    async def run_until(self, condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
        """Move time forward, timer by timer, until `condition()` holds; AssertionError after `timeout` seconds.

        The condition is checked whenever the loop has gone idle. With no timer
        left and the condition false, it can never hold: that fails at once.
        """
        deadline = self._now + timeout
        while True:
            await self.settle()
            if condition():
                return
            when = self.next_timer()
            if when is None:
                raise AssertionError(f"{what} not reached: nothing is left to happen (virtual time {self._now:.3f})")
            if when > deadline:
                self._now = deadline
                raise AssertionError(f"{what} not reached in {timeout} virtual s")
            self._now = max(self._now, when)

    async def run(self, awaitable: Awaitable[T], timeout: float = 60.0, what: str = "the awaited operation") -> T:
        """Await `awaitable`, moving time forward as it needs; AssertionError if it takes over `timeout` seconds."""
        task = asyncio.ensure_future(awaitable)
        try:
            await self.run_until(task.done, timeout, what=f"completion of {what}")
        except BaseException:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        return task.result()

    def _fire_due(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Run every live timer due by now, in order; whether any ran."""
        fired = False
        while (when := self.next_timer()) is not None and when <= self._now:
            _, _, timer = heapq.heappop(self._timers)
            fired = True
            self.fired += 1
            try:
                timer.callback()
            except Exception as exc:  # noqa: BLE001 - as the loop does with a failing callback: report, go on
                context: dict[str, Any] = {"message": f"virtual timer {timer.callback!r} failed", "exception": exc}
                loop.call_exception_handler(context)
        return fired


def _thread_work(loop: asyncio.AbstractEventLoop) -> _ThreadWork:
    """The loop's count of work out in threads, installed the first time (on this test's loop only)."""
    work = getattr(loop, "_virtual_clock_threads", None)
    if work is None:
        work = _ThreadWork(loop)
        loop.run_in_executor = work.run_in_executor  # type: ignore[method-assign,assignment]
        loop._virtual_clock_threads = work  # type: ignore[attr-defined]
    return work
