"""Sign-ins that settle (issue 24): the return delay, the login watch, and a restart storm on a model server."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from evio.backoff import backoff_delay
from evio.signal.pacing import FOLLOW, LIMIT_FACTOR, SPREAD_PER_MEMBER, LoginWatch, login_patience, return_delay
from evio.testing.virtual_clock import VirtualClock

# ---------------------------------------------------------------------------------------------- the rules


def test_the_return_is_spread_over_the_last_login_within_base_and_cap() -> None:
    rng = random.Random(1)
    fast = [return_delay(rng, 0.03, 8, 0.5, 30.0) for _ in range(500)]
    assert min(fast) >= 0.0 and max(fast) <= 0.5 and max(fast) > 0.45  # a small overlay: within base
    many = [return_delay(rng, 0.03, 1000, 0.5, 30.0) for _ in range(500)]
    assert max(many) <= 1000 * SPREAD_PER_MEMBER and max(many) > 0.9 * 1000 * SPREAD_PER_MEMBER
    slow = [return_delay(rng, 24.0, 8, 0.5, 30.0) for _ in range(500)]
    assert max(slow) <= 24.0 and max(slow) > 20.0 and min(slow) < 2.0  # spread over the last login
    assert max(return_delay(rng, 300.0, 5000, 0.5, 30.0) for _ in range(500)) <= 30.0
    assert max(return_delay(rng, None, 0, 0.5, 30.0) for _ in range(100)) <= 0.5  # never logged in


def test_a_silent_server_is_given_up_after_the_patience() -> None:
    watch = LoginWatch(100.0, 20.0, 200.0)
    assert not watch.expired(119.9) and watch.expired(120.0)


def test_every_answer_restarts_the_wait_and_slow_answers_lengthen_it() -> None:
    watch = LoginWatch(0.0, 20.0, 200.0)
    watch.heard(5.0)
    assert watch.deadline() == 5.0 + 20.0  # a 5 s answer: the patience (FOLLOW x 5 < 20)
    watch.heard(20.0)
    assert watch.deadline() == 20.0 + FOLLOW * 15.0  # a 15 s answer: 45 s for the next
    watch.heard(20.5)
    assert watch.deadline() == 20.5 + FOLLOW * 15.0
    assert not watch.expired(65.0) and watch.expired(65.5)


def test_the_limit_bounds_a_login_that_trickles() -> None:
    watch = LoginWatch(0.0, 20.0, 20.0 * LIMIT_FACTOR)
    for t in range(0, 400, 10):
        watch.heard(float(t))
    assert watch.deadline() == 200.0


def test_the_next_login_is_as_patient_as_the_last_one_had_to_be() -> None:
    assert login_patience(20.0, 0, 0.0) == 20.0
    assert login_patience(20.0, 5, 0.0) == 60.0  # after failed logins: up to 3x
    assert login_patience(20.0, 0, 25.0) == FOLLOW * 25.0  # the last login waited 25 s for an answer


def test_a_watch_needs_a_positive_patience_within_the_limit() -> None:
    with pytest.raises(ValueError):
        LoginWatch(0.0, 0.0, 10.0)
    with pytest.raises(ValueError):
        LoginWatch(0.0, 20.0, 10.0)


# ---------------------------------------------------------------------------------------------- a restart storm

STEPS = 5  # round trips of a login: stream, SASL, bind, roster, initial presence
STEP_COST = 0.01  # server seconds per round trip
FANOUT_COST = 0.0004  # and per member online, for the presence round of the last one
PATIENCE = 20.0  # SignalSettings.login_timeout
BASE, CAP = 0.5, 30.0  # SignalSettings.reconnect_base, reconnect_cap


@dataclass
class _Request:
    last: bool  # the login's last round trip: the presence fan-out, priced when served
    answer: asyncio.Future[None]
    login: _Login


@dataclass
class _Login:
    abandoned: bool = False


@dataclass
class ModelServer:
    """A single-threaded server as far as logins go (prosody): requests served one at a time, in arrival
    order, each `STEP_COST`, the last of a login also `FANOUT_COST` per member online; a request of an
    abandoned login (the client closed the stream) costs nothing."""

    clock: VirtualClock
    queue: asyncio.Queue[_Request] = field(default_factory=asyncio.Queue)
    online: int = 0
    busy: float = 0.0  # server seconds spent

    async def serve(self) -> None:
        while True:
            request = await self.queue.get()
            if request.login.abandoned:
                continue
            cost = STEP_COST + (FANOUT_COST * self.online if request.last else 0.0)
            self.busy += cost
            await self.clock.sleep(cost)
            if not request.answer.done():
                request.answer.set_result(None)

    def ask(self, login: _Login, last: bool) -> asyncio.Future[None]:
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Request(last, answer, login))
        return answer


@dataclass
class ModelMember:
    """A member with the client's rules (`paced`) or the ones before them: a fixed login deadline and a
    return within [base/2, base]."""

    clock: VirtualClock
    server: ModelServer
    rng: random.Random
    paced: bool
    members: int  # its roster's size
    last_login: float | None = None
    slowest: float = 0.0  # the slowest answer of the last login
    abandoned: int = 0
    online: bool = False

    async def sign_in(self) -> None:
        """Log in, retrying with the backoff after an abandoned attempt, until a session is up."""
        attempt = 0
        while not await self._login(attempt):
            attempt += 1
            self.abandoned += 1
            await self.clock.sleep(backoff_delay(attempt + 1, self.rng, BASE, CAP))

    async def _login(self, failed_before: int) -> bool:
        patience = login_patience(PATIENCE, failed_before, self.slowest if self.paced else 0.0)
        started = self.clock.now()
        watch = LoginWatch(started, patience, max(patience, PATIENCE * LIMIT_FACTOR))
        login = _Login()
        for step in range(STEPS):
            answer = self.server.ask(login, last=step == STEPS - 1)
            if self.paced:
                left = watch.deadline() - self.clock.now()
            else:
                left = started + patience - self.clock.now()
            try:
                await self.clock.wait_for(asyncio.shield(answer), max(left, 0.0))
            except TimeoutError:
                login.abandoned = True
                return False
            watch.heard(self.clock.now())
        self.server.online += 1
        self.online = True
        self.last_login = self.clock.now() - started
        self.slowest = watch.slowest
        return True

    async def come_back(self) -> None:
        """The server restarted: return (paced or not) and sign in again."""
        self.online = False
        if self.paced:
            delay = return_delay(self.rng, self.last_login, self.members, BASE, CAP)
        else:
            delay = backoff_delay(1, self.rng, BASE, CAP)
        await self.clock.sleep(delay)
        await self.sign_in()


async def _restart_storm(members: int, paced: bool) -> tuple[int, float]:
    """All members signed in (one by one), then the server restarts: (abandoned logins, seconds to all back)."""
    clock = VirtualClock()
    server = ModelServer(clock)
    serving = asyncio.create_task(server.serve())
    rng = random.Random(24)
    fleet = [ModelMember(clock, server, random.Random(rng.getrandbits(32)), paced, members) for _ in range(members)]
    try:
        for member in fleet:  # a quiet start: each member's last login took what one login costs
            await clock.run(member.sign_in(), timeout=60)
        server.online = 0  # the restart: every session ends at once
        restarted = clock.now()
        returns = asyncio.gather(*(m.come_back() for m in fleet))
        await clock.run(returns, timeout=3600, what="every member back")
        return sum(m.abandoned for m in fleet), clock.now() - restarted
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def test_a_restart_with_every_member_online_settles_without_a_retry_storm() -> None:
    members = 400
    work = members * (STEPS * STEP_COST + FANOUT_COST * members / 2)  # what the server must do once: ~52 s
    abandoned, took = await _restart_storm(members, paced=True)
    assert abandoned == 0
    assert took < 1.1 * work  # the server busy all along, no work repeated
    # Before: every login had 20 s from its start, and the members came back within half a second.
    abandoned_before, took_before = await _restart_storm(members, paced=False)
    assert abandoned_before > members // 2
    assert took_before > took
