"""OVERLAY_SIGNAL records (decision 0064): the opcode's bounds, the HELLO flag that announces it, and two
real tunnels carrying it; a peer that never said it reads them (the previous release) gets none."""

from __future__ import annotations

import pytest

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import FAST, A, B, Node, make_node
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.record import (
    HELLO_PEER_SEEN,
    HELLO_RELAYS_SIGNAL,
    MAX_SIGNAL_PAYLOAD,
    ControlMessage,
    ControlOpcode,
    pack_control,
    parse_control,
)
from evio.tunnel.errors import RecordError

pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py


def test_a_signal_payload_round_trips_and_is_bounded() -> None:
    payload = bytes(range(256)) * 4
    assert parse_control(pack_control(ControlOpcode.OVERLAY_SIGNAL, 0, 0, payload)) == ControlMessage(
        ControlOpcode.OVERLAY_SIGNAL, 0, 0, payload
    )
    for bad in (b"", bytes(MAX_SIGNAL_PAYLOAD + 1)):
        with pytest.raises(ValueError):
            pack_control(ControlOpcode.OVERLAY_SIGNAL, 0, 0, bad)
        with pytest.raises(RecordError):
            parse_control(bytes([ControlOpcode.OVERLAY_SIGNAL, 0]) + bad)


def test_the_hello_flag_leaves_a_hello_a_hello() -> None:
    """The previous release reads a HELLO's flags as a byte and tests PEER_SEEN alone (record.py there)."""
    message = parse_control(pack_control(ControlOpcode.HELLO, HELLO_PEER_SEEN | HELLO_RELAYS_SIGNAL))
    assert message.opcode is ControlOpcode.HELLO and message.flags & HELLO_PEER_SEEN
    assert len(pack_control(ControlOpcode.HELLO, HELLO_RELAYS_SIGNAL)) == 2  # a HELLO is not lengthened


def _nodes(hub: FakeTunnelSignalingHub, relaying: tuple[bool, bool]) -> tuple[Node, Node, dict[int, list[bytes]]]:
    config = TunnelSettings(liveness=FAST)
    got: dict[int, list[bytes]] = {A: [], B: []}
    nodes = make_node(hub, A, config), make_node(hub, B, config)
    for node, own, on in zip(nodes, (A, B), relaying, strict=True):
        if on:
            node.manager.relay_signal_to(lambda peer, payload, own=own: got[own].append(payload))  # type: ignore[misc]
    return nodes[0], nodes[1], got


async def test_tunnels_whose_ends_both_read_it_carry_signal_records(hub: FakeTunnelSignalingHub) -> None:
    a, b, got = _nodes(hub, (True, True))
    try:
        await a.manager.connect(B)
        await wait_until(lambda: B in a.manager.signal_relays() and A in b.manager.signal_relays())
        assert a.manager.signal_relays()[B].send_overlay_signal(b"to b")
        assert b.manager.signal_relays()[A].send_overlay_signal(b"to a")
        await wait_until(lambda: got[B] == [b"to b"] and got[A] == [b"to a"])
    finally:
        await a.manager.close()
        await b.manager.close()


async def test_a_peer_that_never_said_it_reads_them_is_no_relay(hub: FakeTunnelSignalingHub) -> None:
    a, b, got = _nodes(hub, (True, False))  # b: a node of the previous release, as far as this goes
    try:
        await a.manager.connect(B)
        await wait_until(lambda: A in b.manager.tunnels() and b.manager.tunnels()[A].state.value == "up")
        tunnel = a.manager.get(B)
        assert tunnel is not None
        await wait_until(lambda: b.manager.tunnels()[A].peer_relays_signal)  # a's HELLO came to b, with the flag
        assert a.manager.signal_relays() == {}  # and b's to a without (a is up: it heard b's first record)
        assert not tunnel.send_overlay_signal(b"to b")
    finally:
        await a.manager.close()
        await b.manager.close()
