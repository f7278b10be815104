"""Waiting for a condition: the one helper tests use instead of sleeping.

    await wait_until(lambda: len(b.ups()) == 1, what="b's tunnel up")
    await wait_until(lambda: not overlay.missing_successors(), 60, what="ring", clock=overlay.clock)

Given a `VirtualClock` the wait moves that clock's time (nothing waits for
real, and the condition is checked each time the loop has gone idle); given
none, or the real clock, it polls on real time. So a fixture that may run
either way passes its clock and the test reads the same. Either way it fails with AssertionError
naming `what` once `timeout` seconds (virtual or real) have passed.
`wait_until_blocking` is the same for code outside an event loop (tests
driving subprocesses and namespaces), and `wait_for_value` its form for a
reading that must come to satisfy a predicate (it returns the reading, and
names the last one if it never did). `holds_within` is the blocking poll without the
error, for grace periods; `tcp_listening` a condition tests wait for on a server they started.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from evio.clock import Clock
from evio.testing.virtual_clock import VirtualClock

T = TypeVar("T")

__all__ = ["holds_within", "tcp_listening", "wait_for_value", "wait_until", "wait_until_blocking"]


async def wait_until(
    condition: Callable[[], object],
    timeout: float = 5.0,
    *,
    what: str = "condition",
    clock: Clock | None = None,
    interval: float = 0.002,
) -> None:
    """Return once `condition()` is true; AssertionError after `timeout` seconds."""
    if isinstance(clock, VirtualClock):
        await clock.run_until(lambda: bool(condition()), timeout, what)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        await asyncio.sleep(interval)


def wait_until_blocking(
    condition: Callable[[], object], timeout: float, *, what: str = "condition", interval: float = 0.02
) -> None:
    """`wait_until` for a caller without an event loop: polls, sleeping the thread."""
    if not holds_within(condition, timeout, interval=interval):
        raise AssertionError(f"{what} not reached in {timeout} s")


def holds_within(condition: Callable[[], object], timeout: float, *, interval: float = 0.02) -> bool:
    """Whether `condition()` came true within `timeout` seconds (polled, sleeping the thread): for a grace
    period that ends in something firmer, such as SIGKILL after SIGTERM, rather than in an error."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_for_value(
    get: Callable[[], T], good: Callable[[T], bool], timeout: float, *, what: str, interval: float = 0.5
) -> T:
    """`get()` once `good` holds for it; AssertionError naming `what` and the last reading after `timeout`."""
    readings: list[T] = []

    def reached() -> bool:
        readings[:] = [get()]
        return good(readings[0])

    try:
        wait_until_blocking(reached, timeout, what=what, interval=interval)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last: {readings[0] if readings else None}") from None
    return readings[0]


def tcp_listening(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on host:port."""
    try:
        socket.create_connection((host, port), 0.2).close()
    except OSError:
        return False
    return True
