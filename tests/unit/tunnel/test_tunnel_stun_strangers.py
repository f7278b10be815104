"""STUN from strangers to a tunnel port (issue 21, M4): nothing is answered.

aioice answers a Binding request without USERNAME with an unsigned 400 and one
with a USERNAME it does not know with an unsigned 401: a 2.4x amplifier that
also tells a scanner which ports are tunnels. A request is answered here only
when it names the connection's own ufrag and carries the right
MESSAGE-INTEGRITY (what only the peer, which got the ICE password by
signaling, can make); everything else is dropped silently and counted.
Real aioice, real sockets on loopback, before and after the tunnel is up.
"""

from __future__ import annotations

import os
import socket

import aioice.ice
import aioice.stun
import pytest

from evio.testing.datapath_pair import collected
from evio.testing.tunnel_nodes import FRAME, A, B, Node
from evio.testing.waiting import wait_until
from evio.tunnel.path.ice import IceAgent, IceConfig, RelayPolicy
from evio.tunnel.path.inbound_gate import STUN_REQUESTS_PER_SOURCE
from evio.tunnel.path.stun_guard import StunDrop, is_request, screen

pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py


def binding_request(username: str | None = None, key: bytes | None = None) -> bytes:
    message = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST, os.urandom(12))
    if username is not None:
        message.attributes["USERNAME"] = username
    if key is not None:
        message.add_message_integrity(key)
    return bytes(message)


def strangers_requests(local_ufrag: str) -> list[bytes]:
    """What a scanner sends: no USERNAME, someone else's, and ours with a password it cannot know."""
    return [
        binding_request(),
        binding_request("nobody:else", b"x" * 22),
        binding_request(f"{local_ufrag}:peer", b"x" * 22),
    ]


class Stranger:
    """A socket on the same host as the tunnel, not its peer; keeps whatever it is answered."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.2", 0))
        self.sock.setblocking(False)
        self.answers: list[bytes] = []

    def answered(self) -> list[bytes]:
        while True:
            try:
                self.answers.append(self.sock.recv(2048))
            except BlockingIOError:
                return self.answers


async def test_stun_from_a_stranger_to_a_gathering_agent_is_not_answered() -> None:
    agent = IceAgent(IceConfig(relay=RelayPolicy.NEVER), True, "a", 0.0)
    stranger = Stranger()
    try:
        await agent.gather()
        conn = agent.direct
        assert conn is not None
        port = conn.local_candidates[0].port
        for request in strangers_requests(conn.local_username):
            stranger.sock.sendto(request, ("127.0.0.2", port))
        # Either aioice answered (before: each one) or the gate counted them: wait for one or the other.
        await wait_until(lambda: sum(agent.rejected().values()) >= 3 or len(stranger.answered()) >= 3)
        assert stranger.answered() == []  # 0 bytes answered
    finally:
        stranger.sock.close()
        await agent.close()


async def test_stun_from_a_stranger_to_a_live_tunnel_is_not_answered_and_the_link_carries_on(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    await a.manager.connect(B)
    await wait_until(lambda: len(b.ups()) == 1)
    tunnel_a, tunnel_b = a.manager.get(B), b.manager.get(A)
    assert tunnel_a is not None and tunnel_b is not None and tunnel_b.info.remote_addr is not None
    a_port = tunnel_b.info.remote_addr  # where A's tunnel socket listens
    ice = tunnel_a._ice
    assert ice is not None
    ufrags = [c.local_username for c in (ice.direct, ice.relay) if c is not None]
    stranger = Stranger()
    try:
        for request in strangers_requests(ufrags[0]):
            stranger.sock.sendto(request, a_port)
        await wait_until(lambda: sum(tunnel_a.inbound_rejects().values()) >= 3 or len(stranger.answered()) >= 3)
        assert stranger.answered() == []
        for _ in range(10):
            b.taps[0].tap.send_frame(FRAME)
        got: list[bytes] = []
        await wait_until(collected(a.taps[0].tap, got, 10))
    finally:
        stranger.sock.close()
    assert got == [FRAME] * 10
    assert tunnel_a.inbound_rejects().get("stun-unknown-user", 0) == 2
    assert tunnel_a.inbound_rejects().get("stun-unauthenticated", 0) == 1


UFRAG, PASSWORD = "abcd", "p" * 22


def test_screen_passes_the_peers_checks_and_our_transactions_answers_only() -> None:
    peer_check = binding_request(f"{UFRAG}:peer", PASSWORD.encode())
    assert screen(peer_check, UFRAG, PASSWORD, ()) is None
    # As aioice sends its checks: PRIORITY, ICE-CONTROLLING, USE-CANDIDATE, then MESSAGE-INTEGRITY, FINGERPRINT.
    full = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST, os.urandom(12))
    full.attributes.update({"USERNAME": f"{UFRAG}:peer", "PRIORITY": 1853824767, "ICE-CONTROLLING": 7, "USE-CANDIDATE": None})
    full.add_message_integrity(PASSWORD.encode())
    full.add_fingerprint()
    assert screen(bytes(full), UFRAG, PASSWORD, ()) is None
    assert screen(bytes(full), UFRAG, "q" * 22, ()) is StunDrop.UNAUTHENTICATED
    assert screen(binding_request(), UFRAG, PASSWORD, ()) is StunDrop.UNKNOWN_USER
    assert screen(binding_request("other:peer", PASSWORD.encode()), UFRAG, PASSWORD, ()) is StunDrop.UNKNOWN_USER
    assert screen(binding_request(f"{UFRAG}x:peer", PASSWORD.encode()), UFRAG, PASSWORD, ()) is StunDrop.UNKNOWN_USER
    assert screen(binding_request(f"{UFRAG}:peer"), UFRAG, PASSWORD, ()) is StunDrop.UNAUTHENTICATED
    assert screen(binding_request(f"{UFRAG}:peer", b"q" * 22), UFRAG, PASSWORD, ()) is StunDrop.UNAUTHENTICATED
    assert screen(peer_check[:-4], UFRAG, PASSWORD, ()) is StunDrop.MALFORMED
    tid = os.urandom(12)
    response = bytes(aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.RESPONSE, tid))
    error = bytes(aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.ERROR, tid))
    indication = bytes(aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.INDICATION, tid))
    assert screen(response, UFRAG, PASSWORD, {tid}) is None and screen(error, UFRAG, PASSWORD, {tid}) is None
    assert screen(response, UFRAG, PASSWORD, set()) is StunDrop.UNSOLICITED
    assert screen(indication, UFRAG, PASSWORD, {tid}) is StunDrop.UNSOLICITED
    assert is_request(peer_check) and not is_request(response) and not is_request(indication)


async def test_the_peers_checks_are_rate_limited_per_source() -> None:
    agent = IceAgent(IceConfig(relay=RelayPolicy.NEVER), True, "a", 0.0)
    try:
        await agent.gather()
        conn = agent.direct
        assert conn is not None
        gate = agent._guard_connection(conn)
        gate._clock = lambda: 100.0  # time stands still: no token comes back mid-loop, however loaded the machine
        passed: list[bytes] = []
        check = binding_request(f"{conn.local_username}:peer", conn.local_password.encode())
        burst = STUN_REQUESTS_PER_SOURCE.burst
        for _ in range(burst + 10):
            gate.receive(lambda data, addr: passed.append(data), check, ("192.0.2.1", 5000))  # type: ignore[arg-type]
        gate.receive(lambda data, addr: passed.append(data), check, ("192.0.2.2", 5000))  # type: ignore[arg-type]
        assert len(passed) == burst + 1  # the second source has its own bucket
        assert gate.rejected[StunDrop.RATE_LIMITED] == 10
    finally:
        await agent.close()
