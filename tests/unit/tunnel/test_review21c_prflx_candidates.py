"""review21c: M3's candidate filter (candidates.candidate_drop) is applied to the candidates of an offer or
answer only. aioice learns a *peer-reflexive* candidate from every authenticated check that comes from an
address it does not know (RFC 8445 7.3.1.3), pairs it and sends it triggered checks, retransmitted, with no
filter and no cap, also after the tunnel is up. Whoever holds the ICE password (the peer; the XMPP server,
which carried it in the offer: H1's threat) and can send from, or spoof, an address aims the node at it: here
a deny-listed address got a binding response and 5 checks for one datagram, and each of 10 sources became a
remote candidate. Real tunnels on loopback (tests/unit/tunnel/conftest.py's nodes, with a deny list).

Fixed: the inbound gate (inbound_gate.py) puts such a source through the same filter before aioice sees
the check, learns at most PRFLX_PER_CONNECTION per connection and none once the path is selected."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from dataclasses import replace

import aioice.stun
import pytest
from aioice import Candidate, Connection

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import FRAME, A, B, Node, make_node
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings
from evio.tunnel.path.candidates import CandidateDrop
from evio.tunnel.path.inbound_gate import PRFLX_PER_CONNECTION, InboundGate
from evio.tunnel.path.offer_answer import Body

pytestmark = pytest.mark.usefixtures("loopback_only")

DENIED = [f"127.0.0.{i}" for i in range(3, 13)]  # loopback stands in for 169.254.169.254 and the like


@pytest.fixture
async def denying_nodes(hub: FakeTunnelSignalingHub) -> AsyncIterator[tuple[Node, Node]]:
    settings = TunnelSettings()
    settings = replace(settings, ice=replace(settings.ice, deny_candidates=tuple(f"{h}/32" for h in DENIED)))
    a, b = make_node(hub, A, settings), make_node(hub, B, settings)
    yield a, b
    await a.manager.close()
    await b.manager.close()


def check_from_peer(username: str, password: str) -> bytes:
    m = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST, os.urandom(12))
    m.attributes.update({"USERNAME": username, "PRIORITY": 1853824767, "ICE-CONTROLLED": 1})
    m.add_message_integrity(password.encode())
    m.add_fingerprint()
    return bytes(m)


async def test_authenticated_checks_from_denied_addresses_get_no_answer_and_are_not_learned(
        denying_nodes: tuple[Node, Node]) -> None:
    a, b = denying_nodes
    await a.manager.connect(B)
    await wait_until(lambda: len(b.ups()) == 1)
    tunnel_a, tunnel_b = a.manager.get(B), b.manager.get(A)
    assert tunnel_a is not None and tunnel_b is not None and tunnel_b.info.remote_addr is not None
    ice = tunnel_a._ice
    assert ice is not None and ice.direct is not None
    conn = ice.direct
    before = len(conn._remote_candidates)
    socks = []
    try:
        for host in DENIED:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.bind((host, 0))
            sock.setblocking(False)
            sock.sendto(check_from_peer(f"{conn.local_username}:{conn.remote_username}", conn.local_password),
                        tunnel_b.info.remote_addr)
        got: list[str] = []

        def drain() -> bool:
            for sock in socks:
                while True:
                    try:
                        got.append(aioice.stun.parse_message(sock.recv(2048)).message_class.name)
                    except BlockingIOError:
                        break
            return len(got) >= 2 * len(DENIED)

        # Before the fix: a response and checks to each within a second. Now nothing comes: the bound is the wait.
        await wait_until(drain, timeout=5.0)
    except AssertionError:
        pass
    finally:
        for sock in socks:
            sock.close()
    learned = len(conn._remote_candidates) - before
    print(f"{len(DENIED)} deny-listed sources: {len(got)} datagrams sent to them "
          f"({got.count('RESPONSE')} responses, {got.count('REQUEST')} checks); {learned} remote candidates learned")
    assert got == [] and learned == 0
    # Counted where the status shows the peers' dropped candidates.
    assert a.manager.dropped_candidates.as_dict() == {"denied": len(DENIED)}, a.manager.dropped_candidates.as_dict()


async def test_a_check_from_an_unknown_address_after_the_tunnel_is_up_is_not_learned(
        denying_nodes: tuple[Node, Node]) -> None:
    """Not deny-listed, but the path is selected: it moves only by the tunnel's own rules, not by a check."""
    a, b = denying_nodes
    await a.manager.connect(B)
    await wait_until(lambda: len(b.ups()) == 1)
    tunnel_a, tunnel_b = a.manager.get(B), b.manager.get(A)
    assert tunnel_a is not None and tunnel_b is not None and tunnel_b.info.remote_addr is not None
    ice = tunnel_a._ice
    assert ice is not None and ice.direct is not None
    conn = ice.direct
    before = len(conn._remote_candidates), len(conn._check_list)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.13", 0))
        sock.setblocking(False)
        sock.sendto(check_from_peer(f"{conn.local_username}:{conn.remote_username}", conn.local_password),
                    tunnel_b.info.remote_addr)
        await wait_until(lambda: a.manager.dropped_candidates.as_dict() == {"prflx-after-up": 1})
        # aioice answers within the callback that takes the check, and pairs (then checks) what it learns
        # there too: neither happened.
        with pytest.raises(BlockingIOError):
            sock.recv(2048)
    assert (len(conn._remote_candidates), len(conn._check_list)) == before


def gate_on(conn: Connection) -> tuple[InboundGate, list[tuple[str, int]], list[str]]:
    """A gate in front of a real aioice connection (no sockets), with what it passed and the candidate
    drops it reported."""
    conn.remote_username, conn.remote_password = "peer", "peer-password-peer-password"
    gate, passed, dropped = InboundGate(conn, "direct"), list[tuple[str, int]](), list[str]()
    gate.candidate_filter = lambda host: None
    gate.candidate_dropped = lambda reason, what: dropped.append(reason.value)
    return gate, passed, dropped


def test_a_connection_learns_a_few_peer_reflexive_sources_at_most() -> None:
    conn = Connection(ice_controlling=True)
    conn._remote_candidates.append(Candidate("1", 1, "udp", 100, "198.51.100.1", 4000, "host"))
    gate, passed, dropped = gate_on(conn)
    check = check_from_peer(f"{conn.local_username}:peer", conn.local_password)

    def send(source: tuple[str, int]) -> None:
        gate.receive(lambda data, addr: passed.append((addr[0], addr[1])), check, source)

    sources = [("203.0.113.7", 5000 + i) for i in range(PRFLX_PER_CONNECTION + 3)]
    for source in sources:
        send(source)
    assert passed == sources[:PRFLX_PER_CONNECTION]
    assert dropped == ["prflx-limit"] * 3
    # Those learned keep passing (the peer's checks retransmitted, consent), and a signalled candidate's
    # address is no peer-reflexive source: neither is counted against the cap.
    send(sources[0])
    send(("198.51.100.1", 4000))
    assert passed[-2:] == [sources[0], ("198.51.100.1", 4000)]
    # A source learned before the peer's candidates came, and signalled since, frees its place.
    conn._remote_candidates.append(Candidate("2", 1, "udp", 100, *sources[1], "srflx"))
    send(sources[PRFLX_PER_CONNECTION])
    assert passed[-1] == sources[PRFLX_PER_CONNECTION]
    # Once the path is selected: nothing new, the selected address still.
    gate.selected = sources[0]
    send(sources[0])
    send(sources[-1])
    assert passed[-1] == sources[0] and dropped[-1] == "prflx-after-up"


def test_a_peer_reflexive_source_the_filter_drops_is_never_learned() -> None:
    conn = Connection(ice_controlling=False)
    gate, passed, dropped = gate_on(conn)
    gate.candidate_filter = lambda host: CandidateDrop.LINK_LOCAL if host.startswith("169.254.") else None
    check = check_from_peer(f"{conn.local_username}:peer", conn.local_password)
    for source in (("169.254.169.254", 80), ("203.0.113.7", 5000)):
        gate.receive(lambda data, addr: passed.append((addr[0], addr[1])), check, source)
    assert passed == [("203.0.113.7", 5000)] and dropped == ["link-local"]
    # Nothing else was counted as the gate's own rejections: the drop is a candidate's, not a stranger's.
    assert not gate.rejected


async def test_a_peer_behind_a_symmetric_nat_is_reached_at_its_peer_reflexive_address(
        hub: FakeTunnelSignalingHub, denying_nodes: tuple[Node, Node]) -> None:
    """The honest case: B's checks come from a mapping it could not signal (a symmetric NAT's port for A is
    not the one its STUN server saw). Here B's signalled ports are one nobody reads: A reaches B only at the
    address B's checks came from, learned as peer-reflexive, through the filter and within the cap."""
    a, b = denying_nodes
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as dead:  # bound, never read: checks there are lost
        dead.bind(("127.0.0.2", 0))
        dead_port = dead.getsockname()[1]

        def symmetric_nat(src: int, dst: int, body: Body) -> Body:
            if src == B and body.get("direct"):
                cands = [c.split() for c in body["direct"]["candidates"]]
                body["direct"]["candidates"] = [" ".join([*c[:5], str(dead_port), *c[6:]]) for c in cands]
            return body

        hub.tamper = symmetric_nat
        await a.manager.connect(B)
        await wait_until(lambda: len(a.ups()) == 1 and len(b.ups()) == 1)
        tunnel_a = a.manager.get(B)
        assert tunnel_a is not None
        assert tunnel_a.info.remote_candidate == "prflx" and tunnel_a.info.remote_addr != ("127.0.0.2", dead_port), tunnel_a.info
        assert a.manager.dropped_candidates.as_dict() == {}
        # A frame crosses to B on it.
        got: list[bytes] = []
        a.taps[0].tap.send_frame(FRAME)

        def arrived() -> bool:
            got.extend(b.taps[0].tap.frames())
            return FRAME in got

        await wait_until(arrived)
