"""IceAgent gathering over loopback (excluded networks, a gathering that never ends, failed queries) and its receive gate. No root, no network.

aioice gathers on every local address but 127.0.0.1; each test hands it
loopback addresses of its own choosing (all of 127.0.0.0/8 can be bound).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Iterator

import aioice.ice
import aioice.stun
import pytest
from aioice import Candidate, Connection

from evio.tunnel.path import aioice_patches
from evio.tunnel.path.ice import IceAgent, IceConfig, RelayPolicy
from evio.tunnel.path.inbound_gate import InboundGate, InboundReject


@pytest.fixture(autouse=True)
def two_loopback_addresses(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2", "127.0.0.3"])
    yield


def local_hosts(agent: IceAgent) -> set[str]:
    assert agent.direct is not None
    return {c.host for c in agent.direct.local_candidates}


async def test_excluded_networks_are_left_out_before_gathering_for_that_agent_only() -> None:
    # aioice binds, and asks STUN, on every address it is given: an excluded one must never reach it.
    excluding = IceAgent(IceConfig(relay=RelayPolicy.NEVER, exclude_networks=("127.0.0.3/32",)), True, "a", 0.0)
    plain = IceAgent(IceConfig(relay=RelayPolicy.NEVER), False, "b", 0.0)
    try:
        direct, _ = (await asyncio.gather(excluding.gather(), plain.gather()))[0]
        assert local_hosts(excluding) == {"127.0.0.2"}
        assert direct is not None and all("127.0.0.3" not in c for c in direct.candidates)
        assert local_hosts(plain) == {"127.0.0.2", "127.0.0.3"}  # the exclusion is per agent
    finally:
        await asyncio.gather(excluding.close(), plain.close())


async def test_a_stun_server_that_never_answers_is_reported_and_skipped_at_the_deadline(caplog: pytest.LogCaptureFixture) -> None:
    # A STUN server that never answers: aioice would wait 5 s for it; the gathering ends at its deadline
    # with the host candidates, and the server is named with the reason (servers.py).
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    config = IceConfig(stun=(silent.getsockname(),), relay=RelayPolicy.NEVER, gather_timeout=0.2)
    agent = IceAgent(config, True, "a", 0.0)
    try:
        direct, _ = await agent.gather()
        assert direct is not None and all("typ host" in c for c in direct.candidates)
        name = f"127.0.0.1:{silent.getsockname()[1]}"
        assert [(p.server, p.kind, p.reason) for p in agent.server_problems] == [(name, "stun", "no answer in time")]
    finally:
        await agent.close()
        silent.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def running_queries() -> list[asyncio.Task[object]]:
    """aioice's STUN and TURN candidate queries still running (ours wrapped, or aioice's own)."""
    names = {"server_reflexive_candidate", "relayed_candidate", "_observed.<locals>.observed"}
    return [t for t in asyncio.all_tasks() if not t.done() and getattr(t.get_coro(), "__qualname__", "") in names]


async def test_a_query_left_running_by_a_gathering_past_its_deadline_is_cancelled_not_orphaned() -> None:
    # aioice starts the STUN query as a task of its own and, when its gathering is cancelled, forgets it:
    # it went on retransmitting and, failing seconds later, was "Task exception was never retrieved".
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    agent = IceAgent(IceConfig(stun=(silent.getsockname(),), relay=RelayPolicy.NEVER, gather_timeout=0.2), True, "a", 0.0)
    try:
        await agent.gather()
        await asyncio.sleep(0)  # the cancellations land
        assert running_queries() == []
    finally:
        await agent.close()
        silent.close()


async def test_a_failed_stun_query_is_counted_and_its_exception_retrieved(caplog: pytest.LogCaptureFixture) -> None:
    # A STUN server that answers every request with an error: the query fails at once, aioice gathers
    # the host candidates only, and the failure is counted and logged (once), never a loop error.
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.setblocking(False)
    loop = asyncio.get_running_loop()

    def refuse() -> None:
        data, addr = server.recvfrom(2048)
        request = aioice.stun.parse_message(data)
        error = aioice.stun.Message(request.message_method, aioice.stun.Class.ERROR, request.transaction_id)
        error.attributes["ERROR-CODE"] = (400, "Bad Request")
        server.sendto(bytes(error), addr)

    loop.add_reader(server.fileno(), refuse)
    errors: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    before = aioice_patches.GATHER_FAILED["srflx"]
    agent = IceAgent(IceConfig(stun=(server.getsockname(),), relay=RelayPolicy.NEVER), True, "a", 0.0)
    try:
        with caplog.at_level(logging.INFO, logger="evio.tunnel.path.ice"):
            direct, _ = await agent.gather()
        assert direct is not None and all("typ host" in c for c in direct.candidates)
        assert aioice_patches.GATHER_FAILED["srflx"] == before + 2  # one query per host address
        assert len([r for r in caplog.records if "candidate query failed" in r.getMessage()]) <= 1
    finally:
        await agent.close()
        loop.remove_reader(server.fileno())
        server.close()
        gc.collect()
        loop.set_exception_handler(previous)
    assert errors == []


# -- the receive gate and the peer-reflexive first DTLS datagram ----------------------------------

PEER_HOST = ("192.0.2.7", 40000)  # the peer's signalled candidate
PEER_MAPPED = ("198.51.100.9", 50123)  # its NAT's mapping, learned from its check (peer-reflexive)
DTLS = b"\x16\xfe\xfd" + b"\x00" * 10


class FakeProtocol:
    """What the gate and ``_path_of`` read of an aioice StunProtocol: a local candidate."""

    def __init__(self, port: int) -> None:
        self.local_candidate = Candidate("f", 1, "udp", 1, "127.0.0.2", port, "host")


def pair(protocol: FakeProtocol, addr: tuple[str, int], kind: str, state: aioice.ice.CandidatePair.State) -> aioice.ice.CandidatePair:
    p = aioice.ice.CandidatePair(protocol, Candidate("r", 1, "udp", 1, addr[0], addr[1], kind))  # type: ignore[arg-type]
    p.state = state
    return p


def gate_with(connection: Connection) -> tuple[InboundGate, list[bytes]]:
    passed: list[bytes] = []
    return InboundGate(connection, "direct"), passed


SUCCEEDED = aioice.ice.CandidatePair.State.SUCCEEDED
IN_PROGRESS = aioice.ice.CandidatePair.State.IN_PROGRESS


async def test_first_dtls_from_a_checked_peer_reflexive_address_passes_after_nomination() -> None:
    # The controlled side nominated the pair to the signalled candidate first; the controlling side's DTLS
    # comes by the pair whose check it learned the peer's NAT mapping from. It was dropped (foreign-source)
    # and DTLS waited a second for its retransmission.
    conn = Connection(ice_controlling=False)
    sock = FakeProtocol(1)
    nominated = pair(sock, PEER_HOST, "host", SUCCEEDED)
    prflx = pair(sock, PEER_MAPPED, "prflx", SUCCEEDED)
    conn._check_list[:] = [nominated, prflx]
    conn._nominated[1] = nominated
    gate, passed = gate_with(conn)
    gate.receive(lambda data, addr: passed.append(data), DTLS, PEER_MAPPED, sock)  # type: ignore[arg-type]
    assert passed == [DTLS] and not gate.rejected
    assert gate.first_source == (sock, PEER_MAPPED)


@pytest.mark.parametrize("case", ["not checked", "check in progress", "another socket", "after selection"])
async def test_the_gate_still_drops_what_no_authenticated_check_vouches_for(case: str) -> None:
    conn = Connection(ice_controlling=False)
    sock, other = FakeProtocol(1), FakeProtocol(2)
    nominated = pair(sock, PEER_HOST, "host", SUCCEEDED)
    conn._check_list[:] = [nominated]
    conn._nominated[1] = nominated
    if case == "check in progress":  # our check not answered, and no USE-CANDIDATE from there
        conn._check_list.append(pair(sock, PEER_MAPPED, "prflx", IN_PROGRESS))
    elif case == "another socket":  # checked, but on another of our sockets
        conn._check_list.append(pair(other, PEER_MAPPED, "prflx", SUCCEEDED))
    gate, passed = gate_with(conn)
    if case == "after selection":
        conn._check_list.append(pair(sock, PEER_MAPPED, "prflx", SUCCEEDED))
        gate.selected = PEER_HOST
    gate.receive(lambda data, addr: passed.append(data), DTLS, PEER_MAPPED, sock)  # type: ignore[arg-type]
    assert passed == [] and gate.rejected[InboundReject.FOREIGN_SOURCE] == 1 and gate.first_source is None


async def test_a_peer_nomination_or_an_early_check_vouches_for_its_source() -> None:
    conn = Connection(ice_controlling=False)
    sock = FakeProtocol(1)
    nominated = pair(sock, PEER_HOST, "host", SUCCEEDED)
    remote_nominated = pair(sock, PEER_MAPPED, "prflx", IN_PROGRESS)
    remote_nominated.remote_nominated = True  # its USE-CANDIDATE check came, authenticated; ours is under way
    conn._check_list[:] = [nominated, remote_nominated]
    conn._nominated[1] = nominated
    gate, passed = gate_with(conn)
    gate.receive(lambda data, addr: passed.append(data), DTLS, PEER_MAPPED, sock)  # type: ignore[arg-type]
    early = ("203.0.113.5", 1234)
    conn._early_checks.append((None, early, sock))  # type: ignore[arg-type]  # a check aioice took before connect()
    gate.receive(lambda data, addr: passed.append(data), DTLS, early, sock)  # type: ignore[arg-type]
    assert passed == [DTLS, DTLS] and not gate.rejected


async def test_the_controlled_side_answers_on_the_pair_the_first_dtls_came_by() -> None:
    agent = IceAgent(IceConfig(relay=RelayPolicy.NEVER), False, "b", 0.0)
    conn = agent.direct
    assert conn is not None
    sock = FakeProtocol(1)
    nominated = pair(sock, PEER_HOST, "host", SUCCEEDED)
    prflx = pair(sock, PEER_MAPPED, "prflx", SUCCEEDED)
    conn._check_list[:] = [nominated, prflx]
    conn._nominated[1] = nominated
    gate = agent._guard_connection(conn)
    gate.receive(lambda data, addr: None, DTLS, PEER_MAPPED, sock)  # type: ignore[arg-type]
    path = agent._path_of(conn)
    assert path.remote_addr == PEER_MAPPED and path.remote_type == "prflx"
    assert conn._nominated[1] is prflx  # aioice sends (DTLS, consent checks) there too
    assert gate.selected == PEER_MAPPED
    await agent.close()


async def test_a_short_check_list_is_checked_at_once_not_one_pair_every_20_ms() -> None:
    # The pair that works (our host socket to the peer's NAT mapping) is rarely first by priority:
    # paced, its check started 20 ms or more after the first one.
    agent = IceAgent(IceConfig(relay=RelayPolicy.NEVER), True, "a", 0.0)
    conn = agent.direct
    assert conn is not None
    sock = FakeProtocol(1)
    pairs = [pair(sock, PEER_HOST, "host", aioice.ice.CandidatePair.State.WAITING),
             pair(sock, PEER_MAPPED, "srflx", aioice.ice.CandidatePair.State.FROZEN),
             pair(sock, ("203.0.113.5", 1234), "srflx", SUCCEEDED)]
    conn._check_list[:] = pairs
    started: list[aioice.ice.CandidatePair] = []

    def start(p: aioice.ice.CandidatePair) -> None:
        started.append(p)
        p.task = asyncio.get_running_loop().create_future()  # type: ignore[assignment]

    conn.check_start_task = start  # type: ignore[method-assign]
    assert conn._check_periodic()
    assert started == pairs[:2]  # both pending pairs on the first pass; the checked one not again
    await agent.close()
