"""The first packet's messages packed straight to OpenFlow 1.3 bytes: PacketOut, AddFlow, DeleteFlow; and the
entries of the byte counters' poll read straight from them.

A packet-in's answer is a PacketOut and one or two unicast flows (their evictions, at a full port, a
DeleteFlow each). Built and serialized by os-ken's classes they cost about 160 us of Python together, most
of a packet-in's handling (`docs/performance.md`, "Where the first packet's time goes"), on the critical
path of every new flow and paid once per switch on its path. These have one fixed shape each, so they are
packed here with `struct`, byte for byte what `evio.sdn.openflow_messages.to_ofp_messages` serializes to
(`tests/unit/sdn/test_sdn_openflow_wire.py` compares them); every other action still goes through os-ken.

The other way, the flow stats reply of the on-demand links' poll (`flow_stats_entry`): every `stats_interval`
(0.5 s) the switch reports each counted flow, and in trust mode every switch holds two per member ahead
(decision 0066), 62 in a 32-node overlay. os-ken read such a reply in 8-25 ms (130-400 us a flow: its match
objects, MACs through netaddr, the instructions), the largest share of a lab daemon's controller CPU (decision
0074). An entry whose match is evio's unicast shape is read here (the counters and the three fields, the
instructions skipped); any other goes to os-ken as before.

Layouts from the OpenFlow 1.3.5 specification: `ofp_header` (7.1), `ofp_flow_mod` (7.3.4.1), `ofp_match`
and its OXM TLVs (7.2.2), `ofp_instruction_actions` (7.2.4), `ofp_action_output` (7.2.5), `ofp_packet_out`
(7.3.7), `ofp_flow_stats` (7.3.5.2). Pure: no os-ken, no I/O.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from evio.sdn import flow_actions
from evio.sdn.flow_actions import SWITCHING_TABLE
from evio.sdn.frb import parse_mac
from evio.sdn.openflow_messages import COUNTED_COOKIE, EVIO_COOKIE, EVIO_COOKIE_MASK

VERSION = 0x04
OFPT_PACKET_OUT, OFPT_FLOW_MOD = 13, 14
OFPFC_ADD, OFPFC_DELETE = 0, 3
OFPFF_SEND_FLOW_REM = 1
OFPTT_ALL = 0xFF
OFP_NO_BUFFER = 0xFFFF_FFFF
OFPP_CONTROLLER, OFPP_ANY = 0xFFFF_FFFD, 0xFFFF_FFFF
OFPG_ANY = 0xFFFF_FFFF
OFPCML_MAX = 0xFFE5  # os-ken's default max_len of an output action (only used for the controller port)
OFPIT_APPLY_ACTIONS = 4
OFP_DEFAULT_PRIORITY = 0x8000

_HEADER = struct.Struct("!BBHI")
# cookie, cookie_mask, table_id, command, idle_timeout, hard_timeout, priority, buffer_id, out_port, out_group,
# flags, 2 bytes of pad
_FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")
# ofp_match: OXM type 1, length 4 + three fields (8 + 10 + 10 = 28) = 32: no padding. The fields in the order
# os-ken writes them (by OXM field number): in_port (0), eth_dst (3), eth_src (4).
_MATCH_3 = struct.Struct("!HH II I6s I6s")
_OXM_IN_PORT, _OXM_ETH_DST, _OXM_ETH_SRC = 0x8000_0004, 0x8000_0606, 0x8000_0806
_OUTPUT = struct.Struct("!HHIH6x")  # type 0, length 16, port, max_len
_APPLY = struct.Struct("!HH4x")  # type, length (with its actions)
_PACKET_OUT = struct.Struct("!IIH6x")  # buffer_id, in_port, actions_len
# ofp_flow_stats up to its match: length, table_id, pad, duration_sec, duration_nsec, priority, idle_timeout,
# hard_timeout, flags, 4 bytes of pad, cookie, packet_count, byte_count
_FLOW_STATS = struct.Struct("!HBxIIHHHH4xQQQ")
_OFPMT_OXM = 1

ENCODED = (flow_actions.PacketOut, flow_actions.AddFlow, flow_actions.DeleteFlow)
Encoded = flow_actions.PacketOut | flow_actions.AddFlow | flow_actions.DeleteFlow


def encode(action: Encoded, xid: int) -> bytes:
    """`action` (one of ENCODED; the rest go through os-ken) as one OpenFlow 1.3 message with `xid`."""
    if isinstance(action, flow_actions.PacketOut):
        return packet_out(action, xid)
    if isinstance(action, flow_actions.AddFlow):
        return add_flow(action, xid)
    return delete_flow(action, xid)


def packet_out(action: flow_actions.PacketOut, xid: int) -> bytes:
    output = _OUTPUT.pack(0, _OUTPUT.size, action.port, OFPCML_MAX)
    length = _HEADER.size + _PACKET_OUT.size + len(output) + len(action.data)
    return b"".join((_HEADER.pack(VERSION, OFPT_PACKET_OUT, length, xid),
                     _PACKET_OUT.pack(OFP_NO_BUFFER, OFPP_CONTROLLER, len(output)), output, action.data))


def add_flow(action: flow_actions.AddFlow, xid: int) -> bytes:
    output = _OUTPUT.pack(0, _OUTPUT.size, action.out_port, OFPCML_MAX)
    instruction = _APPLY.pack(OFPIT_APPLY_ACTIONS, _APPLY.size + len(output)) + output
    body = _FLOW_MOD.pack(COUNTED_COOKIE if action.counted else EVIO_COOKIE, 0, SWITCHING_TABLE, OFPFC_ADD,
                          action.idle_timeout, action.hard_timeout, action.priority, OFP_NO_BUFFER, 0, 0,
                          OFPFF_SEND_FLOW_REM)
    match = _match(action.match)
    length = _HEADER.size + len(body) + len(match) + len(instruction)
    return b"".join((_HEADER.pack(VERSION, OFPT_FLOW_MOD, length, xid), body, match, instruction))


def delete_flow(action: flow_actions.DeleteFlow, xid: int) -> bytes:
    # A non-strict delete ignores the priority; os-ken writes its default there.
    body = _FLOW_MOD.pack(EVIO_COOKIE, EVIO_COOKIE_MASK, OFPTT_ALL, OFPFC_DELETE, 0, 0, OFP_DEFAULT_PRIORITY, OFP_NO_BUFFER,
                          OFPP_ANY, OFPG_ANY, 0)
    match = _match(action.match)
    length = _HEADER.size + len(body) + len(match)
    return b"".join((_HEADER.pack(VERSION, OFPT_FLOW_MOD, length, xid), body, match))


def _match(m: flow_actions.FlowMatch) -> bytes:
    # 4 + 8 + 10 + 10 = 32 bytes, a multiple of 8: no padding after the fields.
    return _MATCH_3.pack(1, _MATCH_3.size, _OXM_IN_PORT, m.in_port, _OXM_ETH_DST, parse_mac(m.eth_dst),
                         _OXM_ETH_SRC, parse_mac(m.eth_src))


class FlowStatsEntry(NamedTuple):
    """One `ofp_flow_stats` of evio's unicast shape, with what os-ken's `OFPFlowStats` gives of it: its fields by
    the same names, the match as the mapping os-ken's `OFPMatch` reads as (`in_port`, `eth_src` and `eth_dst` as
    "aa:bb:cc:dd:ee:ff"). Its instructions are not read: evio never looks at a polled flow's. (A tuple: made 62
    times a poll, twice a second.)"""

    length: int
    table_id: int
    duration_sec: int
    duration_nsec: int
    priority: int
    idle_timeout: int
    hard_timeout: int
    flags: int
    cookie: int
    packet_count: int
    byte_count: int
    match: dict[str, Any]


def flow_stats_entry(buf: bytes | bytearray | memoryview, offset: int) -> FlowStatsEntry | None:
    """The flow stats entry at `offset` of a multipart reply if its match is in_port, then eth_src and eth_dst in
    either order, unmasked: the flows evio counts, as os-ken writes them and Open vSwitch reports them. None for
    any other (os-ken reads those). Raises `struct.error` on a truncated entry, as os-ken does."""
    fixed = _FLOW_STATS.unpack_from(buf, offset)
    if fixed[0] < _FLOW_STATS.size + _MATCH_3.size:
        return None
    if offset + fixed[0] > len(buf):  # os-ken, reading its instructions, would fail: the message is malformed
        raise struct.error(f"a flow stats entry of {fixed[0]} bytes at {offset} of {len(buf)}")
    kind, length, port_field, port, first, first_mac, second, second_mac = _MATCH_3.unpack_from(
        buf, offset + _FLOW_STATS.size)
    if kind != _OFPMT_OXM or length != _MATCH_3.size or port_field != _OXM_IN_PORT:
        return None
    if first == _OXM_ETH_DST and second == _OXM_ETH_SRC:
        dst, src = first_mac, second_mac
    elif first == _OXM_ETH_SRC and second == _OXM_ETH_DST:
        src, dst = first_mac, second_mac
    else:
        return None  # another field, or a mask: os-ken's to read
    return FlowStatsEntry._make((*fixed, {"in_port": port, "eth_src": src.hex(":"), "eth_dst": dst.hex(":")}))
