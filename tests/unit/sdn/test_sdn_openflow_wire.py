"""The first packet's messages packed by hand are byte for byte what os-ken serializes for the same actions; the
byte counters' poll read by hand is what os-ken reads."""

from __future__ import annotations

import inspect
import random
import struct
from typing import Any

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser

from evio.sdn import openflow_wire
from evio.sdn.flow_actions import AddFlow, DeleteFlow, DeleteFlowsToMac, FlowMatch, PacketOut
from evio.sdn.openflow_messages import (
    COUNTED_COOKIE,
    POLICY_COOKIE,
    flow_byte_counts,
    policy_packet_counts,
    to_ofp_messages,
)
from evio.sdn.osken_flow_stats import read_flow_stats_by_hand
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import H1, H2, eth
from tests.unit.sdn.test_sdn_ofapp import RecordingSocket

ofp = ofproto_v1_3

# os-ken's own reader of a flow stats entry, under the length guard and the reader by hand the app installs
ORIGINAL_PARSER = inspect.unwrap(vars(ofproto_v1_3_parser.OFPFlowStats)["parser"].__func__)

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


# -- the byte counters' poll, read by hand ----------------------------------------------------------------------


def flow_stats_bytes(match: object, cookie: int, packets: int, octets: int, *, ovs_order: bool = False) -> bytes:
    """One `ofp_flow_stats` as a switch sends it: os-ken's match serialized (in_port, eth_dst, eth_src), or the
    eth fields swapped as Open vSwitch writes them, and one output instruction."""
    parser = ofproto_v1_3_parser
    buf = bytearray()
    parser.OFPMatch.serialize(match, buf, 0)
    if ovs_order and len(buf) == 32:
        buf = buf[:12] + buf[22:32] + buf[12:22]
    inst = bytearray()
    parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(7, 0)]).serialize(inst, 0)
    body = struct.pack("!BxIIHHHH4xQQQ", 1, 5, 7, 10, 30, 300, 1, cookie, packets, octets) + bytes(buf) + bytes(inst)
    return struct.pack("!H", 2 + len(body)) + body


def stats_reply(*entries: bytes) -> bytes:
    body = struct.pack("!HH4x", ofp.OFPMP_FLOW, 0) + b"".join(entries)
    return struct.pack("!BBHI", ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, 8 + len(body), 9) + body


def parse_reply(raw: bytes) -> Any:
    return ofproto_parser.msg(FakeDatapath(), ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, len(raw), 9, raw)


@pytest.mark.parametrize("ovs_order", [False, True])
def test_a_counted_flows_stats_entry_read_by_hand_is_what_os_ken_reads(ovs_order: bool) -> None:
    rng = random.Random(74)
    for _ in range(50):
        in_port = rng.choice([1, 7, ofp.OFPP_LOCAL, rng.getrandbits(32)])
        src, dst = (":".join(f"{rng.getrandbits(8):02x}" for _ in range(6)) for _ in range(2))
        cookie, packets, octets = rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64)
        raw = flow_stats_bytes(ofproto_v1_3_parser.OFPMatch(in_port=in_port, eth_src=src, eth_dst=dst), cookie,
                               packets, octets, ovs_order=ovs_order)  # fmt: skip
        theirs = ORIGINAL_PARSER(ofproto_v1_3_parser.OFPFlowStats, raw, 0)
        ours = openflow_wire.flow_stats_entry(raw, 0)
        assert ours is not None
        for name in ("length", "table_id", "duration_sec", "duration_nsec", "priority", "idle_timeout",
                     "hard_timeout", "flags", "cookie", "packet_count", "byte_count"):  # fmt: skip
            assert getattr(ours, name) == getattr(theirs, name), name
        assert ours.match == {key: theirs.match[key] for key in ("in_port", "eth_src", "eth_dst")}


def test_other_stats_entries_go_to_os_ken_and_a_reply_reads_the_same_counts_either_way() -> None:
    parser = ofproto_v1_3_parser
    counted = flow_stats_bytes(parser.OFPMatch(in_port=1, eth_src=H1, eth_dst=H2), COUNTED_COOKIE, 3, 300)
    policy = flow_stats_bytes(parser.OFPMatch(in_port=1, eth_type=0x0800), POLICY_COOKIE | 2 << 32, 4, 400)
    masked = flow_stats_bytes(parser.OFPMatch(in_port=1, eth_src=H1, eth_dst=(H2, "ff:ff:ff:00:00:00")),
                              COUNTED_COOKIE, 5, 500)  # fmt: skip
    for raw in (policy, masked):
        assert openflow_wire.flow_stats_entry(raw, 0) is None
    reply = stats_reply(counted, policy, masked, counted)
    assert read_flow_stats_by_hand() in (True, False)  # the app's import installed it already
    msg = parse_reply(reply)
    assert [type(entry).__name__ for entry in msg.body] == ["FlowStatsEntry", "OFPFlowStats", "OFPFlowStats",
                                                            "FlowStatsEntry"]
    theirs = [ORIGINAL_PARSER(parser.OFPFlowStats, raw, 0) for raw in (counted, policy, masked, counted)]
    assert flow_byte_counts(msg.body) == flow_byte_counts(theirs) and FlowMatch(1, H1, H2) in flow_byte_counts(theirs)
    assert policy_packet_counts(msg.body) == policy_packet_counts(theirs) == {2: 4}


def test_a_truncated_stats_entry_is_a_malformed_message_as_before() -> None:
    parser = ofproto_v1_3_parser
    entry = flow_stats_bytes(parser.OFPMatch(in_port=1, eth_src=H1, eth_dst=H2), COUNTED_COOKIE, 3, 300)
    with pytest.raises(struct.error):
        openflow_wire.flow_stats_entry(entry[:60], 0)
    raw = stats_reply(entry)
    raw = raw[:2] + struct.pack("!H", len(raw) - 20) + raw[4:-20]
    assert parse_reply(raw) is None  # os-ken logs it as malformed; the connection stays
