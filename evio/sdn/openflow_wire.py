"""The first packet's messages packed straight to OpenFlow 1.3 bytes: PacketOut, AddFlow, DeleteFlow.

A packet-in's answer is a PacketOut and one or two unicast flows (their evictions, at a full port, a
DeleteFlow each). Built and serialized by os-ken's classes they cost about 160 us of Python together, most
of a packet-in's handling (`docs/performance.md`, "Where the first packet's time goes"), on the critical
path of every new flow and paid once per switch on its path. These have one fixed shape each, so they are
packed here with `struct`, byte for byte what `evio.sdn.openflow_messages.to_ofp_messages` serializes to
(`tests/unit/sdn/test_sdn_openflow_wire.py` compares them); every other action still goes through os-ken.

Layouts from the OpenFlow 1.3.5 specification: `ofp_header` (7.1), `ofp_flow_mod` (7.3.4.1), `ofp_match`
and its OXM TLVs (7.2.2), `ofp_instruction_actions` (7.2.4), `ofp_action_output` (7.2.5), `ofp_packet_out`
(7.3.7). Pure: no os-ken, no I/O.
"""

from __future__ import annotations

import struct

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
