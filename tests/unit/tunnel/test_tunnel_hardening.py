"""Off-path datagrams against a live tunnel (real aioice, DTLS and data path over loopback).

An attacker who only knows a tunnel's UDP port can send it anything: STUN-shaped
garbage, DTLS-shaped garbage. Nothing may escape the receive loop, every such
datagram is counted, and the link stays up.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from evio.testing.datapath_pair import collected
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import FAST, FRAME, A, B, Node, make_node
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.lifecycle import TunnelState
from evio.tunnel.path.offer_answer import Body

# A STUN Binding request carrying PRIORITY (a 4-byte value) with a 2-byte value:
# 20-byte header + 4-byte attribute header + 2 bytes + 2 padding = 28 bytes.
# aioice's parser unpacks it with struct and raises struct.error.
MALFORMED_STUN = struct.pack("!HHI12s", 0x0001, 8, 0x2112A442, b"\x01" * 12) + struct.pack("!HH", 0x0024, 2) + b"\x00\x00\x00\x00"


pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, object]]]:
    """Whatever escapes a callback into the event loop's exception handler."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield errors
    loop.set_exception_handler(previous)


async def test_malformed_stun_to_a_tunnel_port_is_counted_and_the_link_carries_on(
    nodes: tuple[Node, Node], loop_errors: list[dict[str, object]]
) -> None:
    a, b = nodes
    await a.manager.connect(B)
    await wait_until(lambda: len(b.ups()) == 1)
    tunnel_b = b.manager.get(A)
    assert tunnel_b is not None and tunnel_b.info.remote_addr is not None
    a_port = tunnel_b.info.remote_addr  # where A's tunnel socket listens
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(50):
            attacker.sendto(MALFORMED_STUN, a_port)
        for _ in range(20):
            b.taps[0].tap.send_frame(FRAME)
        got: list[bytes] = []
        await wait_until(collected(a.taps[0].tap, got, 20))
        tunnel_a = a.manager.get(B)
        assert tunnel_a is not None
        await wait_until(lambda: tunnel_a.stats().dropped(DropReason.MALFORMED_STUN) == 50)
    finally:
        attacker.close()
    assert got == [FRAME] * 20
    assert tunnel_a.state is TunnelState.UP
    assert loop_errors == []


# A plaintext fatal DTLS alert (handshake_failure), epoch 0: anyone can forge one.
FORGED_ALERT = bytes([21, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 2, 40])


async def test_dtls_injected_from_another_address_neither_aborts_nor_stalls_the_handshake(loop_errors: list[dict[str, object]]) -> None:
    hub = FakeTunnelSignalingHub()
    targets: list[tuple[str, int]] = []

    def learn_ports(src: int, dst: int, body: Body) -> Body:
        # The attacker knows the ports: here it reads them from the offer (host candidates).
        for cand in (body.get("direct") or {}).get("candidates", []):
            parts = cand.split()
            targets.append((parts[4], int(parts[5])))
        return body

    hub.tamper = learn_ports
    config = TunnelSettings(liveness=FAST)
    a, b = make_node(hub, A, config), make_node(hub, B, config)
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.setblocking(False)
    stop = asyncio.Event()
    sent = 0

    async def spray() -> None:
        nonlocal sent
        while not stop.is_set():
            for target in list(targets):
                attacker.sendto(FORGED_ALERT, target)
                sent += 1
            await asyncio.sleep(0.0005)

    sprayer = asyncio.create_task(spray())
    try:
        info = await a.manager.connect(B)  # A is the controlled side: the DTLS server
        assert info.state is TunnelState.UP
        tunnel_a = a.manager.get(B)
        assert tunnel_a is not None
        assert sent > 0 and tunnel_a.inbound_rejects().get("foreign-source", 0) > 0
    finally:
        stop.set()
        await sprayer
        attacker.close()
        await a.manager.close()
        await b.manager.close()
    assert loop_errors == []


def test_stun_guard_rejects_what_aioice_would_raise_on_and_takes_real_messages() -> None:
    import aioice.stun

    from evio.tunnel.path.stun_guard import MalformedStun, parse_stun, stun_reject_reason
    from evio.tunnel.stun_framing import StunReject

    request = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
    request.attributes["PRIORITY"] = 12345
    request.attributes["USERNAME"] = "a:b"
    request.add_message_integrity(b"password")
    assert stun_reject_reason(bytes(request)) is None
    assert parse_stun(bytes(request)).attributes["PRIORITY"] == 12345
    assert stun_reject_reason(MALFORMED_STUN) is StunReject.BAD_ATTRIBUTE
    assert stun_reject_reason(b"\x00\x01") is StunReject.SHORT
    assert stun_reject_reason(bytes(request)[:-4]) is StunReject.BAD_LENGTH
    with pytest.raises(ValueError):  # the exception aioice's receive paths catch
        parse_stun(MALFORMED_STUN)
    with pytest.raises(MalformedStun):
        parse_stun(bytes(request)[:-1] + b"\x00")  # fingerprint no longer matches
