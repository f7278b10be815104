"""The shared tick grid: waits end on multiples of their interval, one timer per grid point."""

from __future__ import annotations

import asyncio

import pytest

from evio.tunnel.liveness_ticks import TickGrid, tick_grid


async def test_waits_of_one_interval_share_a_timer_and_end_on_its_next_multiple() -> None:
    loop = asyncio.get_running_loop()
    grid = TickGrid(loop)
    interval = 0.05
    next_multiple = (int(loop.time() / interval) + 1) * interval
    ended: list[float] = []
    waits = [grid.wait(interval) for _ in range(16)]
    for wait in waits:
        wait.add_done_callback(lambda _: ended.append(loop.time()))
    assert grid.timers == 1
    await asyncio.gather(*waits)
    assert ended[0] >= next_multiple - 0.002  # the loop may run a timer up to its clock resolution early
    assert grid.pending == 0


async def test_a_wait_never_lasts_longer_than_its_interval() -> None:
    loop = asyncio.get_running_loop()
    grid = TickGrid(loop)
    interval = 0.03
    for _ in range(5):
        began = loop.time()
        wait = grid.wait(interval)
        ((_, slot),) = grid._due  # the one grid point armed: its timer is due within the interval
        assert began < slot * interval <= began + interval
        await wait


class _StoppedClock:
    """The running loop with its clock read once: calls a loaded host spreads over a grid point still share it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._now = loop, loop.time()
        self.create_future, self.call_at = loop.create_future, loop.call_at

    def time(self) -> float:
        return self._now


async def test_different_intervals_arm_their_own_timers() -> None:
    grid = TickGrid(_StoppedClock(asyncio.get_running_loop()))  # type: ignore[arg-type]
    waits = [grid.wait(0.01), grid.wait(0.2), grid.wait(0.01)]
    assert grid.timers == 2
    await asyncio.gather(*waits)


async def test_a_waiter_woken_early_or_cancelled_is_skipped() -> None:
    grid = TickGrid(asyncio.get_running_loop())
    early, cancelled, plain = grid.wait(0.02), grid.wait(0.02), grid.wait(0.02)
    early.set_result(None)
    cancelled.cancel()
    await plain  # the grid's timer fired over the other two without raising
    assert early.done() and cancelled.cancelled()


async def test_the_running_loop_has_one_grid() -> None:
    assert tick_grid() is tick_grid(asyncio.get_running_loop())


async def test_an_interval_must_be_positive() -> None:
    grid = TickGrid(asyncio.get_running_loop())
    with pytest.raises(ValueError):
        grid.wait(0)
