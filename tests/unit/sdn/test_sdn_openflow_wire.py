"""The first packet's messages packed by hand are byte for byte what os-ken serializes for the same actions."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_v1_3

from evio.sdn import openflow_wire
from evio.sdn.flow_actions import AddFlow, DeleteFlow, DeleteFlowsToMac, FlowMatch, PacketOut
from evio.sdn.openflow_messages import to_ofp_messages
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import H1, H2, eth
from tests.unit.sdn.test_sdn_ofapp import RecordingSocket

ofp = ofproto_v1_3

MATCHES = [FlowMatch(1, H1, H2), FlowMatch(ofproto_v1_3.OFPP_LOCAL, "02:ff:00:00:00:01", "ff:ff:ff:ff:ff:fe")]


def osken_bytes(action: object, xid: int) -> bytes:
    (msg,) = to_ofp_messages(FakeDatapath(), action)  # type: ignore[arg-type]
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


@pytest.mark.parametrize("action", [
    PacketOut(2, eth(H2, H1)),
    PacketOut(ofproto_v1_3.OFPP_LOCAL, eth(H1, H2, payload=b"z" * 1400)),
    *[AddFlow(m, 7, 30) for m in MATCHES],
    AddFlow(MATCHES[0], ofproto_v1_3.OFPP_LOCAL, 0, priority=11, hard_timeout=600, counted=True),
    *[DeleteFlow(m) for m in MATCHES],
])
def test_each_packed_message_is_what_os_ken_serializes(action: object) -> None:
    for xid in (1, 0xFFFF_FFFF):
        assert openflow_wire.encode(action, xid) == osken_bytes(action, xid)  # type: ignore[arg-type]


def test_other_actions_are_left_to_os_ken() -> None:
    assert not isinstance(DeleteFlowsToMac(H1), openflow_wire.ENCODED)


def test_a_packet_in_at_the_destination_is_answered_in_one_write_of_packed_messages_os_ken_reads_back() -> None:
    """Through the app, as a switch connection's receive thread calls it: the flow, its way back, then the frame
    (to a local host: the way back first, 0047), one write; what os-ken's own parser makes of those bytes."""
    app, commands, _, _ = make_app()
    sock = RecordingSocket()
    dp = FakeDatapath(0xAAAA)
    dp.socket = sock  # type: ignore[attr-defined]
    commands.attach("red", 0xAAAA, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": ofp.OFPP_LOCAL}, data=eth(H2, H1))))  # H1 is local
    sock.writes.clear()
    frame = eth(H1, H2, payload=b"echo" * 16)
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=frame)))  # from the tunnel to H1
    (write,) = sock.writes
    chunks = []
    while write:
        _, _, msg_len, _ = ofproto_parser.header(write)
        chunks.append(write[:msg_len])
        write = write[msg_len:]
    assert [ofproto_parser.header(c)[1] for c in chunks] == [ofp.OFPT_FLOW_MOD, ofp.OFPT_FLOW_MOD, ofp.OFPT_PACKET_OUT]
    flow, way_back = (ofproto_parser.msg(dp, *ofproto_parser.header(c), c) for c in chunks[:2])
    assert (flow.match["in_port"], flow.match["eth_src"], flow.match["eth_dst"]) == (2, H2, H1)
    assert (way_back.match["in_port"], way_back.match["eth_src"], way_back.match["eth_dst"]) == (ofp.OFPP_LOCAL, H1, H2)
    assert [a.port for i in way_back.instructions for a in i.actions] == [2]
    # os-ken reads no PacketOut (a switch does): its output action's port, and the frame after it.
    out = chunks[2]
    assert int.from_bytes(out[28:32], "big") == ofp.OFPP_LOCAL and out[40:] == frame
    assert len({ofproto_parser.header(c)[3] for c in chunks}) == 3  # each its own xid
