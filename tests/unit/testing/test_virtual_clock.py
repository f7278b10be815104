"""The virtual clock the fleet tests drive, and the one waiting helper."""

from __future__ import annotations

import asyncio
import time

import pytest

from evio.clock import REAL_CLOCK
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_for_value, wait_until, wait_until_blocking


async def test_timers_fire_in_time_order_each_at_its_time_and_cancelled_ones_never() -> None:
    clock = VirtualClock(start=0.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(2.0, lambda: fired.append(("b", clock.now())))
    clock.call_later(1.0, lambda: fired.append(("a", clock.now())))
    clock.call_later(2.0, lambda: fired.append(("c", clock.now())))  # same time: in the order armed
    clock.call_later(1.5, lambda: fired.append(("x", clock.now()))).cancel()
    await clock.advance(1.9)
    assert fired == [("a", 1.0)] and clock.now() == 1.9
    await clock.advance(10.0)
    assert fired == [("a", 1.0), ("b", 2.0), ("c", 2.0)] and clock.now() == 11.9


async def test_sleep_and_wait_for_run_on_virtual_time_without_waiting() -> None:
    clock = VirtualClock(start=0.0)
    started = time.monotonic()
    await clock.run(clock.sleep(3600.0), timeout=4000.0)
    assert clock.now() == 3600.0
    with pytest.raises(TimeoutError):
        await clock.run(clock.wait_for(asyncio.Event().wait(), 30.0))
    assert clock.now() == 3630.0
    await clock.run(clock.wait_for(clock.sleep(1.0), 30.0))
    assert clock.now() == 3631.0
    assert time.monotonic() - started < 5.0  # an hour and more of virtual time, at once


async def test_run_until_fails_at_its_deadline_or_at_once_when_nothing_can_happen() -> None:
    clock = VirtualClock(start=0.0)
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(clock.now())
        clock.call_later(1.0, tick)

    clock.call_later(1.0, tick)
    await clock.run_until(lambda: len(ticks) == 5, timeout=60.0)
    assert ticks == [1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(AssertionError, match="in 10.0 virtual s"):
        await clock.run_until(lambda: False, timeout=10.0, what="never")
    assert clock.now() == 15.0
    idle = VirtualClock()
    with pytest.raises(AssertionError, match="nothing is left to happen"):
        await idle.run_until(lambda: False, timeout=10.0)


async def test_the_loop_runs_to_idle_between_steps_and_watchers_see_every_turn() -> None:
    clock = VirtualClock()
    turns = 0

    def count() -> None:
        nonlocal turns
        turns += 1

    unwatch = clock.watch(count)
    queue: asyncio.Queue[int] = asyncio.Queue()
    got: list[int] = []

    async def relay() -> None:  # each hop is a loop turn
        for _ in range(3):
            got.append(await queue.get())
            await asyncio.sleep(0)

    task = asyncio.create_task(relay())
    for i in range(3):
        queue.put_nowait(i)
    await clock.settle()
    assert got == [0, 1, 2] and task.done() and turns >= 3
    unwatch()
    before = turns
    await clock.settle()
    assert turns == before


async def test_work_in_a_thread_is_waited_for() -> None:
    clock = VirtualClock()
    def work() -> str:
        time.sleep(0.05)
        return "done"

    assert await clock.run(asyncio.to_thread(work)) == "done"


async def test_wait_until_moves_a_virtual_clock_and_polls_the_real_one() -> None:
    clock = VirtualClock(start=0.0)
    flag: list[bool] = []
    clock.call_later(50.0, lambda: flag.append(True))
    await wait_until(lambda: flag, 60.0, what="flag", clock=clock)
    assert clock.now() == 50.0
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, flag.append, True)
    await wait_until(lambda: len(flag) == 2, 5.0, clock=REAL_CLOCK)
    with pytest.raises(AssertionError, match="never not reached in 0.05 s"):
        await wait_until(lambda: False, 0.05, what="never")


def test_blocking_forms() -> None:
    readings = iter(range(100))
    assert wait_for_value(lambda: next(readings), lambda v: v >= 3, 5.0, what="three", interval=0.001) == 3
    with pytest.raises(AssertionError, match="last: 7"):
        wait_for_value(lambda: 7, lambda v: v > 7, 0.02, what="more than seven", interval=0.005)
    with pytest.raises(AssertionError, match="nothing not reached"):
        wait_until_blocking(lambda: False, 0.02, what="nothing", interval=0.005)
