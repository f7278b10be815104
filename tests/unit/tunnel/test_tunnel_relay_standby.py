"""Which relayed pairs are checked, which is the standby, what is released (evio.tunnel.path.relay_standby).

Real aioice connections and candidate pairs; the protocols are stand-ins holding a candidate. No network.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import aioice
from aioice import Candidate, Connection, TransportPolicy
from aioice.ice import CandidatePair

from evio.tunnel.path.relay_standby import (
    StandbyKeeper,
    choose_standby,
    prune_crossing,
    server_tag,
    surplus_protocols,
    tag_of,
)

A, B, C = (server_tag("192.0.2.1", port) for port in (3478, 3490, 3500))


def relayed(foundation: str, port: int, host: str = "198.51.100.7") -> Candidate:
    return Candidate(foundation=foundation, component=1, transport="udp", priority=100, host=host, port=port, type="relay")


def connection(local: dict[str, int], remote: dict[str, int]) -> tuple[Connection, dict[str, Any]]:
    """A relay-only connection with a stand-in protocol per local server and the peer's candidates, paired as aioice does."""
    conn = Connection(ice_controlling=True, transport_policy=TransportPolicy.RELAY)
    protocols = {tag: SimpleNamespace(local_candidate=relayed(tag, port, "203.0.113.5")) for tag, port in local.items()}
    conn._protocols.extend(protocols.values())
    for tag, port in remote.items():
        conn._remote_candidates.append(relayed(tag, port))
        for protocol in protocols.values():
            conn._check_list.append(CandidatePair(protocol, conn._remote_candidates[-1]))
    return conn, protocols


def ends(pair: CandidatePair) -> tuple[str | None, str | None]:
    return tag_of(pair.local_candidate), tag_of(pair.remote_candidate)


def test_a_server_tag_is_one_per_server_and_ice_characters() -> None:
    assert A != B and server_tag("192.0.2.1", 3478) == A and server_tag("TURN.example", 1) == server_tag("turn.example", 1)
    assert len(A) == 15 and A.isalnum()
    assert tag_of(relayed(A, 1)) == A
    assert tag_of(relayed("1f2e3d", 1)) is None  # another implementation's foundation: no server known
    assert tag_of(Candidate(foundation=A, component=1, transport="udp", priority=1, host="192.0.2.9", port=1, type="host")) is None


def test_pairs_crossing_two_servers_are_left_out_when_one_server_pairs_exist() -> None:
    conn, _ = connection({A: 1, B: 2}, {A: 10, B: 20})
    assert prune_crossing(conn) == 2
    assert sorted(ends(p) for p in conn._check_list) == sorted([(A, A), (B, B)])


def test_crossing_pairs_stay_when_no_server_is_shared_or_the_peer_does_not_tag() -> None:
    conn, _ = connection({A: 1}, {B: 20})  # this node reaches only A, the peer only B: crossing is all there is
    assert prune_crossing(conn) == 0 and len(conn._check_list) == 1
    conn, _ = connection({A: 1, B: 2}, {"abc": 10, "def": 20})
    assert prune_crossing(conn) == 0 and len(conn._check_list) == 4


def test_the_standby_is_the_first_other_server_both_ends_reached() -> None:
    conn, _ = connection({A: 1, B: 2, C: 3}, {A: 10, B: 20, C: 30})
    prune_crossing(conn)
    primary = next(p for p in conn._check_list if ends(p) == (B, B))
    standby = choose_standby(conn, primary)
    assert standby is not None and ends(standby) == min([(A, A), (C, C)])
    assert standby in conn._check_list


def test_no_standby_without_a_second_shared_server_or_tags() -> None:
    conn, _ = connection({A: 1, B: 2}, {A: 10})  # the peer allocated on A only
    primary = next(p for p in conn._check_list if ends(p) == (A, A))
    assert choose_standby(conn, primary) is None
    conn, _ = connection({A: 1, B: 2}, {"abc": 10, "def": 20})
    assert choose_standby(conn, conn._check_list[0]) is None


def test_allocations_neither_path_uses_are_surplus() -> None:
    conn, protocols = connection({A: 1, B: 2, C: 3}, {A: 10, B: 20, C: 30})
    prune_crossing(conn)
    primary = next(p for p in conn._check_list if ends(p) == (C, C))
    standby = choose_standby(conn, primary)
    assert standby is not None
    unused = ({A, B} - {tag_of(standby.local_candidate)}).pop()
    assert surplus_protocols(conn, [primary, standby]) == [protocols[unused]]


class AnsweringProtocol:
    """Answers the keeper's Binding requests once ``up`` is set; counts them."""

    def __init__(self, candidate: Candidate) -> None:
        self.local_candidate = candidate
        self.up = False
        self.requests: list[Any] = []

    async def request(self, message: Any, addr: Any, integrity_key: bytes | None = None, retransmissions: int | None = None) -> Any:
        self.requests.append((message, addr, integrity_key, retransmissions))
        if not self.up:
            raise aioice.stun.TransactionTimeout()
        return message, addr


async def test_the_keeper_checks_until_answered_then_keeps_the_pair_fresh() -> None:
    conn = Connection(ice_controlling=True, transport_policy=TransportPolicy.RELAY)
    conn.remote_username, conn.remote_password = "peerufrag", "peerpassword0123456789"
    protocol = AnsweringProtocol(relayed(B, 2, "203.0.113.5"))
    pair = CandidatePair(protocol, relayed(B, 20))
    readied = asyncio.Event()
    keeper = StandbyKeeper(conn, pair, readied.set, every=0.02)
    keeper.start()
    try:
        while len(protocol.requests) < 2:
            await asyncio.sleep(0.01)
        assert not keeper.ready  # unanswered so far
        protocol.up = True
        await asyncio.wait_for(readied.wait(), 5)
        assert keeper.ready and keeper.last_answer is not None
        first = keeper.answered
        while keeper.answered < first + 2:  # and again, every ``every`` seconds
            await asyncio.sleep(0.01)
    finally:
        await keeper.stop()
    message, addr, key, _ = protocol.requests[-1]
    assert addr == ("198.51.100.7", 20) and key == b"peerpassword0123456789"
    assert message.attributes["USERNAME"] == f"peerufrag:{conn.local_username}"
    assert "USE-CANDIDATE" not in message.attributes  # a check, never a nomination


async def test_the_keeper_asks_nothing_before_the_peer_is_known() -> None:
    conn = Connection(ice_controlling=False, transport_policy=TransportPolicy.RELAY)
    protocol = AnsweringProtocol(relayed(B, 2))
    keeper = StandbyKeeper(conn, CandidatePair(protocol, relayed(B, 20)), lambda: None)
    assert not await keeper.check() and protocol.requests == []
