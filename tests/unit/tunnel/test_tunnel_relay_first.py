"""IceAgent runs direct and relay at once: which path is taken first, and the direct one found later.

The two aioice connections are replaced by fakes whose ``connect`` ends when a
test says so; the agent's choices are the point, not aioice. No root, no network.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aioice
import aioice.stun
import pytest

from evio.tunnel.errors import IceFailed
from evio.tunnel.path.aioice_patches import hasten_checks
from evio.tunnel.path.ice import IceAgent, IceConfig, PathKind, RelayPolicy


class FakeConnection:
    """What IceAgent uses of an aioice ``Connection``; ``connect`` ends when ``outcome`` is set."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.closed = False
        self._nominated: dict[int, Any] = {}
        self._protocols: list[Any] = []
        self.remote_candidates: list[Any] = []

    def succeed(self) -> None:
        self.outcome.set_result(True)

    def fail(self) -> None:
        self.outcome.set_result(False)

    async def connect(self) -> None:
        if not await self.outcome:
            raise ConnectionError("ICE negotiation failed")
        self._nominated[1] = SimpleNamespace(
            local_candidate=SimpleNamespace(type="relay" if self.kind == "relay" else "host"),
            remote_candidate=SimpleNamespace(type="relay" if self.kind == "relay" else "srflx"),
            remote_addr=("192.0.2.1", 3478 if self.kind == "relay" else 40000),
            protocol=None,
        )

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
async def agent() -> AsyncIterator[tuple[IceAgent, FakeConnection, FakeConnection]]:
    ice = IceAgent(IceConfig(relay=RelayPolicy.NEVER, direct_timeout=0.3, relay_timeout=2.0), True, "a", 0.0)
    direct, relay = FakeConnection("direct"), FakeConnection("relay")
    ice.direct, ice.relay = direct, relay  # type: ignore[assignment]
    yield ice, direct, relay
    await ice.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_relay_first_carries_traffic_and_the_direct_path_follows(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    selecting = asyncio.create_task(ice.select_controlling())
    relay.succeed()
    first = await selecting
    assert first.kind is PathKind.RELAY
    await settle()
    assert not direct.closed and not relay.closed  # the direct attempt goes on
    later = asyncio.create_task(ice.later())
    await settle()
    assert not later.done()
    direct.succeed()
    second = await later
    assert second is not None and (second.kind, second.remote_type) == (PathKind.DIRECT, "srflx")
    ice.release(first)
    await settle()
    assert relay.closed and not direct.closed


async def test_a_direct_path_that_connects_first_is_taken_and_the_relay_dropped(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    selecting = asyncio.create_task(ice.select_controlling())
    direct.succeed()
    assert (await selecting).kind is PathKind.DIRECT
    await settle()
    assert relay.closed and not direct.closed
    assert await ice.later() is None


async def test_direct_wins_a_tie(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    relay.succeed()
    direct.succeed()
    assert (await ice.select_controlling()).kind is PathKind.DIRECT


async def test_a_direct_attempt_that_never_connects_leaves_the_relay_for_good(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    relay.succeed()
    assert (await ice.select_controlling()).kind is PathKind.RELAY
    assert await ice.later() is None  # direct_timeout (0.3 s) passes
    await settle()
    assert direct.closed and not relay.closed


async def test_a_failed_relay_still_leaves_the_direct_attempt_its_time(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    selecting = asyncio.create_task(ice.select_controlling())
    relay.fail()
    await settle()
    assert not selecting.done()
    direct.succeed()
    assert (await selecting).kind is PathKind.DIRECT


async def test_nothing_connects(agent: tuple[IceAgent, FakeConnection, FakeConnection]) -> None:
    ice, direct, relay = agent
    relay.fail()
    direct.fail()
    with pytest.raises(IceFailed):
        await ice.select_controlling()


async def test_a_check_from_the_peer_sends_our_pending_check_to_it_again_at_once() -> None:
    conn = aioice.Connection(ice_controlling=False)
    taken: list[tuple[str, int]] = []
    conn.check_incoming = lambda message, addr, protocol: taken.append(addr)  # type: ignore[method-assign]
    hasten_checks(conn)
    sent: list[tuple[aioice.stun.Message, tuple[str, int]]] = []
    protocol = SimpleNamespace(transactions={}, send_stun=lambda message, addr: sent.append((message, addr)))
    peer, other = ("192.0.2.1", 40000), ("192.0.2.2", 40000)
    requests = {}
    for addr in (peer, other):
        request = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
        requests[addr] = request
        protocol.transactions[request.transaction_id] = aioice.stun.Transaction(request, addr, protocol)
    check = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
    conn.check_incoming(check, peer, protocol)  # type: ignore[arg-type]
    assert taken == [peer]  # aioice handled the check as before
    assert sent == [(requests[peer], peer)]  # and only the check to that peer went again
    conn.check_incoming(check, ("192.0.2.3", 1), protocol)  # type: ignore[arg-type]
    assert len(sent) == 1  # nothing pending toward that address
