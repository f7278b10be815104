"""Setup deadlines that stretch with event-loop lateness (evio.tunnel.path.deadlines)."""

from __future__ import annotations

import asyncio
import time

import pytest

from evio.tunnel.config import TunnelSettings
from evio.tunnel.liveness import Liveness, LivenessConfig, LivenessState
from evio.tunnel.path.deadlines import LAG_FREE, LAG_UNIT, MAX_PATIENCE, LoopBudget, LoopLag, patience


def test_patience_is_one_when_idle_and_grows_with_lag_up_to_the_cap() -> None:
    assert patience(0.0) == 1.0
    assert patience(-1.0) == 1.0  # a clock oddity is no lag
    assert patience(LAG_FREE) == 1.0  # an ordinary busy moment stretches nothing
    assert patience(LAG_FREE + LAG_UNIT) == 2.0
    assert patience(100.0) == MAX_PATIENCE


def test_stretched_settings_multiply_the_ice_and_dtls_deadlines() -> None:
    base = TunnelSettings()
    assert base.stretched(1.0) is base
    slow = base.stretched(3.0)
    assert slow.ice.patience == 3.0 and slow.dtls_timeout == pytest.approx(3 * base.dtls_timeout)
    assert slow.ice.direct_timeout == base.ice.direct_timeout  # the agent applies the factor itself
    assert slow.signaling_timeout == base.signaling_timeout


def test_recent_lag_is_the_worst_sample_of_the_window() -> None:
    lag = LoopLag(window=10.0)
    lag.record(100.0, 0.4)
    lag.record(105.0, 0.1)
    assert lag.recent(105.0) == 0.4
    assert lag.recent(111.0) == 0.1  # the first sample left the window
    assert lag.recent(200.0) == 0.0


async def test_a_blocked_loop_is_measured_and_the_sampler_stops_after_linger() -> None:
    lag = LoopLag(interval=0.02, linger=0.3)
    lag.wake()
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # the loop is busy: the sampler's sleep wakes late
    await asyncio.sleep(0.05)
    assert lag.recent() >= 0.2
    assert lag.patience() > 1.0
    task = lag._task
    assert task is not None
    await asyncio.wait_for(task, 2.0)  # nothing to set up any more: no sampling while idle
    await lag.close()


def test_liveness_limits_stretch_with_patience() -> None:
    config = LivenessConfig(keepalive_interval=0.5, dead_after=3.0)
    for patience_now, dead_by in ((1.0, config.silence_limit), (3.0, 3 * config.silence_limit)):
        live = Liveness(config, 0.0)
        live.start(0.0)
        live.tick(0.1, 1, 1, patience_now)  # a record: up
        assert live.state is LivenessState.UP
        t = 0.1
        while live.state is LivenessState.UP:
            t += 0.05
            live.tick(t, 1, 1, patience_now)
        assert t - 0.1 == pytest.approx(dead_by, abs=0.06)


async def test_a_budget_counts_the_time_the_loop_ran_not_wall_time() -> None:
    # The first setups of a node starting on a loaded host had no lag sampled yet: a fixed wall-clock
    # deadline failed them while the loop was not running them at all.
    loop = asyncio.get_running_loop()
    lag = LoopLag()
    answer: asyncio.Future[str] = loop.create_future()
    loop.call_soon(time.sleep, 1.0)  # the loop is blocked for a second (0.25 s of it counts as waited)
    loop.call_later(1.1, answer.set_result, "gathered")  # then it takes 0.1 s more of loop time
    budget = LoopBudget(0.5, 5.0, lateness=lag.record)
    assert await budget.run(answer) == "gathered"  # a wall-clock deadline of 0.5 s had passed
    assert budget.lost >= 0.6
    assert lag.recent() >= 0.6  # the next setups' factor knows it
    assert lag.patience() > 1.0


async def test_a_budget_passes_when_the_loop_ran_that_long_and_cancels_what_it_waited_for() -> None:
    waited = asyncio.ensure_future(asyncio.sleep(10))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await LoopBudget(0.1).run(waited)
    assert waited.cancelled()
    assert time.monotonic() - started < 2.0


def test_a_budget_never_stretches_past_its_most() -> None:
    now = [0.0]
    budget = LoopBudget(1.0, 3.0, clock=lambda: now[0])
    now[0] = 10.0
    budget.overslept(0.0, 0.25)  # a wake-up 9.75 s late
    assert budget.lost == pytest.approx(9.75)
    assert budget.remaining() == pytest.approx(3.0 - 10.0)
    assert LoopBudget(2.0).most == 2.0 * MAX_PATIENCE
