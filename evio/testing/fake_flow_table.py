"""A fake OpenFlow 1.3 switch table and a fake network of Bounded Flood switches, without OVS.

The switch logic's actions take the daemon's way to the switch:
`evio.sdn.openflow_messages.to_ofp_messages` (and `base_flows` at connect) make os-ken
OpenFlow 1.3 messages of them, which are serialized to bytes as for the wire.
`FakeFlowTable` is the switch end: it parses those bytes back with os-ken's
parser and does what they say, as Open vSwitch would in its tables 0 (the L2
policy's) and 1 (the switching), a frame going on from one to the next by a
goto-table instruction:

- OFPFlowMod ADD: an entry (priority, match fields, apply-actions outputs,
  idle and hard timeouts, cookie, flags) replacing one with the same match
  and priority (the replacement's timeouts start again, as in OVS);
  DELETE: every entry whose match has the delete's fields, filtered by
  out_port and cookie/cookie_mask; DELETE_STRICT: the entry of that priority
  and match; anything else the daemon never sends is an error here.
- OFPPacketOut: the frame leaves by its output actions.
- Apply-actions may also rewrite an ARP frame before its outputs, as an ARP responder does (decision 0072): set-field
  and Nicira register moves of the Ethernet and ARP address fields, and output to IN_PORT.
- A frame entering a port goes by the highest-priority matching entry's
  actions (a miss with no table-miss entry drops it), counting its packets
  and bytes; idle entries time out, and every entry at its hard timeout.
  Entries are indexed by (priority, match), so tables of 10^4-10^5 flows
  (a hostile port's, tests/unit/sdn/test_sdn_port_bounds.py) stay quick.
- Entries with OFPFF_SEND_FLOW_REM that go (timeout or delete) become
  OFPFlowRemoved messages, encoded here and parsed by os-ken for the
  controller side (`evio.sdn.openflow_messages.removed_flow_match`); flow stats go
  through `evio.sdn.openflow_messages.flow_byte_counts`.

`FakeNetwork` joins several `BoundedFloodSwitch`es with "tunnels" (pairs of
peer ports) and runs frames through tables and controllers until the network
is quiet, recording what every leaf port received. Unit tests use it to
assert where a packet goes, as faucet does with its fake OpenFlow table, so
they test the translation to OpenFlow too.
"""

from __future__ import annotations

import ipaddress
import itertools
import random
import struct
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from os_ken.ofproto import ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser

from evio.ids import RING_SIZE
from evio.sdn import l2policy, neighbor_guard, router_addresses
from evio.sdn.flow_actions import SWITCHING_TABLE, UNICAST_PRIORITY, DeleteFlowsToMac, FlowAction, FlowMatch
from evio.sdn.neighbor_answers import icmpv6_at
from evio.sdn.openflow_messages import (
    EVIO_COOKIE,
    EVIO_COOKIE_MASK,
    base_flows,
    flow_byte_counts,
    flow_stats_request,
    removed_destination_match,
    removed_flow_match,
    to_ofp_messages,
)
from evio.sdn.router_adverts import RouterAdverts
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

ofp = ofproto_v1_3
parser = ofproto_v1_3_parser

CONTROLLER = -1  # output "port" meaning a packet-in
IN_PORT = -2  # output "port" meaning back out of the port the frame came in by
# An untagged ARP frame's fields a flow may set or move: (offset, length).
_ARP_FIELDS = {"eth_dst": (0, 6), "eth_src": (6, 6), "arp_op": (20, 2), "arp_sha": (22, 6), "arp_spa": (28, 4),
               "arp_tha": (32, 6), "arp_tpa": (38, 4)}

_UNICAST_FIELDS = frozenset({"in_port", "eth_src", "eth_dst"})


class FakeNetworkError(Exception):
    """The fake network was driven into a state a real one would not reach (e.g. a forwarding loop)."""


class FakeFlowTableError(Exception):
    """A message the fake switch does not model (the daemon does not send it): the test must say so."""


class CodecDatapath:
    """What os-ken's message classes need of a datapath to encode and decode: the OF 1.3 codec."""

    ofproto = ofproto_v1_3
    ofproto_parser = ofproto_v1_3_parser

    def __init__(self, dpid: int = 1) -> None:
        self.id = dpid
        self._xids = itertools.count(1)

    def encode(self, msg: Any) -> bytes:
        """`msg` as it would go on the wire."""
        msg.set_xid(next(self._xids))
        msg.serialize()
        return bytes(msg.buf)

    def decode(self, data: bytes) -> Any:
        """A message parsed from the wire by os-ken's parser (for the types it has one for)."""
        version, msg_type, msg_len, xid = ofproto_parser.header(data)
        if version != ofp.OFP_VERSION:
            raise FakeFlowTableError(f"OpenFlow version {version:#x}, not 1.3")
        msg = ofproto_parser.msg(self, version, msg_type, msg_len, xid, data)
        if msg is None:
            raise FakeFlowTableError(f"os-ken could not parse message type {msg_type}")
        return msg


@dataclass
class FakeFlow:
    """One entry of table 0."""

    priority: int
    fields: dict[str, Any]  # OXM field -> value, or (value, mask)
    outputs: tuple[int, ...]  # ports of its output actions, CONTROLLER for OFPP_CONTROLLER
    idle_timeout: int
    cookie: int
    flags: int
    last_used: float
    packets: int = 0
    bytes: int = 0
    hard_timeout: int = 0
    installed: float = 0.0
    table: int = 0
    goto: int | None = None  # the table a goto-table instruction sends the frame on to
    edits: tuple[tuple[str, str, Any], ...] = ()  # ("set", field, value) / ("move", src, dst), before the outputs

    @property
    def is_unicast(self) -> bool:
        """One of evio's learned flows `(in_port, eth_src, eth_dst) -> out_port`."""
        return self.cookie & EVIO_COOKIE_MASK == EVIO_COOKIE and set(self.fields) == _UNICAST_FIELDS and len(self.outputs) == 1

    @property
    def match(self) -> FlowMatch:
        return FlowMatch(self.fields["in_port"], self.fields["eth_src"], self.fields["eth_dst"])

    @property
    def out_port(self) -> int:
        (port,) = self.outputs
        return port

    def matches(self, packet: dict[str, Any]) -> bool:
        for name, wanted in self.fields.items():
            have = packet.get(name)
            if have is None:
                return False
            if isinstance(wanted, tuple):
                value, mask = wanted
                if _masked(have, mask) != _masked(value, mask):
                    return False
            elif have != wanted:
                return False
        return True

    def outputs_to(self, port: int) -> bool:
        return port in self.outputs


class FakeFlowTable:
    """Table 0 of one switch, fed with encoded OpenFlow 1.3 messages."""

    def __init__(self, codec: CodecDatapath | None = None) -> None:
        self.codec = codec or CodecDatapath()
        self._entries: dict[tuple[int, int, frozenset[tuple[str, Any]]], FakeFlow] = {}  # (table, priority, match) -> entry
        self.notices: list[bytes] = []  # encoded OFPFlowRemoved messages not yet read by the controller

    # ---------------------------------------------------------------- from the controller

    def receive(self, data: bytes, now: float) -> list[tuple[int, bytes]]:
        """Carry out one encoded message; frames it sends out, as (port, frame)."""
        _version, msg_type, msg_len, _xid = ofproto_parser.header(data)
        if msg_type == ofp.OFPT_FLOW_MOD:
            self._flow_mod(self.codec.decode(data), now)
            return []
        if msg_type == ofp.OFPT_PACKET_OUT:
            return self._packet_out(data, msg_len)
        raise FakeFlowTableError(f"message type {msg_type} is not modelled")

    def _flow_mod(self, msg: Any, now: float) -> None:
        fields = dict(msg.match.items())
        if msg.command == ofp.OFPFC_ADD:
            if msg.table_id not in (0, SWITCHING_TABLE):
                raise FakeFlowTableError(f"flow added to table {msg.table_id}: only tables 0 and 1 exist")
            flow = FakeFlow(msg.priority, fields, _outputs(msg.instructions), msg.idle_timeout, msg.cookie,
                            msg.flags, now, hard_timeout=msg.hard_timeout, installed=now, table=msg.table_id,
                            goto=_goto(msg.instructions), edits=_edits(msg.instructions))
            key = _key(flow.priority, fields, flow.table)
            old = self._entries.get(key)
            if old is not None and not flow.flags & ofp.OFPFF_RESET_COUNTS:
                flow.packets, flow.bytes = old.packets, old.bytes
            self._entries[key] = flow
        elif msg.command == ofp.OFPFC_DELETE:
            if msg.table_id not in (0, ofp.OFPTT_ALL):
                return  # a table that has no entries
            if any(isinstance(v, tuple) for v in fields.values()):
                raise FakeFlowTableError("masked fields in a delete are not modelled")
            gone = [
                f for f in self._entries.values()
                if (msg.table_id == ofp.OFPTT_ALL or f.table == msg.table_id) and all(f.fields.get(k) == v for k, v in fields.items())
                and (msg.out_port == ofp.OFPP_ANY or f.outputs_to(_port(msg.out_port)))
                and f.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask
            ]  # fmt: skip
            self._remove(gone, ofp.OFPRR_DELETE, now)
        elif msg.command == ofp.OFPFC_DELETE_STRICT:
            strict = self._entries.get(_key(msg.priority, fields, msg.table_id))
            if strict is not None and strict.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask:
                self._remove([strict], ofp.OFPRR_DELETE, now)
        else:
            raise FakeFlowTableError(f"flow mod command {msg.command} is not modelled")

    def _packet_out(self, data: bytes, msg_len: int) -> list[tuple[int, bytes]]:
        # os-ken has no parser for a message the switch never sends: its body by the spec's layout.
        buffer_id, _in_port, actions_len = struct.unpack_from(ofp.OFP_PACKET_OUT_PACK_STR, data, ofp.OFP_HEADER_SIZE)
        if buffer_id != ofp.OFP_NO_BUFFER:
            raise FakeFlowTableError("packet out of a buffered packet: the switch buffers nothing")
        offset, end = ofp.OFP_PACKET_OUT_SIZE, ofp.OFP_PACKET_OUT_SIZE + actions_len
        actions = []
        while offset < end:
            action = parser.OFPAction.parser(data, offset)
            actions.append(action)
            offset += action.len
        frame = data[end:msg_len]
        return [(port, frame) for port in _output_ports(actions)]

    # ---------------------------------------------------------------- the datapath

    @property
    def entries(self) -> list[FakeFlow]:
        return list(self._entries.values())

    def lookup(self, in_port: int, frame: bytes, now: float) -> list[int]:
        """Where `frame` entering `in_port` goes (CONTROLLER: a packet-in); [] if dropped."""
        return [port for port, _ in self.lookup_frames(in_port, frame, now)]

    def lookup_frames(self, in_port: int, frame: bytes, now: float) -> list[tuple[int, bytes]]:
        """Where `frame` entering `in_port` goes, and as what (a flow may rewrite it); IN_PORT resolved."""
        packet = _packet_fields(in_port, frame)
        table: int | None = 0
        outputs: list[tuple[int, bytes]] = []
        while table is not None:
            best = self._best(table, packet)
            if best is None:
                return outputs  # a miss with no table-miss entry: dropped
            best.last_used = now
            best.packets += 1
            best.bytes += len(frame)
            out = _edited(frame, best.edits) if best.edits else frame
            outputs += [(in_port if port == IN_PORT else port, out) for port in best.outputs]
            table = best.goto
        return outputs

    def _best(self, table: int, packet: dict[str, Any]) -> FakeFlow | None:
        best: FakeFlow | None = None
        for flow in self._entries.values():
            if flow.is_unicast or flow.table != table:
                continue  # unicast flows are found by the index below
            if (best is None or flow.priority > best.priority) and flow.matches(packet):
                best = flow
        if "eth_src" in packet and table == SWITCHING_TABLE:
            unicast = {k: packet[k] for k in _UNICAST_FIELDS}
            learned = self._entries.get(_key(UNICAST_PRIORITY, unicast, SWITCHING_TABLE))
            if learned is not None and learned.is_unicast and (best is None or learned.priority > best.priority):
                best = learned
        return best

    def expire(self, now: float) -> list[FakeFlow]:
        """Remove entries idle for their timeout or at their hard timeout, as the switch would; return them."""
        idle = [f for f in self._entries.values() if f.idle_timeout and now - f.last_used >= f.idle_timeout]
        self._remove(idle, ofp.OFPRR_IDLE_TIMEOUT, now)
        hard = [f for f in self._entries.values() if f.hard_timeout and now - f.installed >= f.hard_timeout]
        self._remove(hard, ofp.OFPRR_HARD_TIMEOUT, now)
        return idle + hard

    def take_notices(self) -> list[bytes]:
        """The OFPFlowRemoved messages sent since the last call."""
        notices, self.notices = self.notices, []
        return notices

    def _remove(self, gone: list[FakeFlow], reason: int, now: float) -> None:
        for flow in gone:
            del self._entries[_key(flow.priority, flow.fields, flow.table)]
            if flow.flags & ofp.OFPFF_SEND_FLOW_REM:
                self.notices.append(self._flow_removed(flow, reason, now))

    def _flow_removed(self, flow: FakeFlow, reason: int, now: float) -> bytes:
        match = parser.OFPMatch(**flow.fields)
        body = bytearray(struct.pack(
            ofp.OFP_FLOW_REMOVED_PACK_STR0, flow.cookie, flow.priority, reason, 0, 0, 0,
            flow.idle_timeout, flow.hard_timeout, flow.packets, flow.bytes,
        ))
        match_at = ofp.OFP_HEADER_SIZE + len(body)
        buf = bytearray(ofp.OFP_HEADER_SIZE) + body
        match_len = match.serialize(buf, match_at)
        length = match_at + match_len
        struct.pack_into(ofp.OFP_HEADER_PACK_STR, buf, 0, ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, length, 0)
        return bytes(buf[:length])

    # ---------------------------------------------------------------- views

    @property
    def flows(self) -> dict[FlowMatch, FakeFlow]:
        """evio's unicast flows by match."""
        return {f.match: f for f in self.entries if f.is_unicast}

    def flow_stats(self, cookie: int = 0, cookie_mask: int = 0) -> list[Any]:
        """What a flow stats reply would carry, one OFPFlowStats per entry whose cookie matches."""
        return [
            parser.OFPFlowStats(0, 0, 0, f.priority, f.idle_timeout, f.hard_timeout, f.flags, f.cookie, f.packets, f.bytes,
                                parser.OFPMatch(**f.fields), [])
            for f in self.entries
            if f.cookie & cookie_mask == cookie & cookie_mask
        ]

    def byte_counts(self) -> dict[FlowMatch, int]:
        """evio's flows' byte counters as the adapter reads them from the reply to its request (the on-demand
        policy's feed: the counted flows only)."""
        request = flow_stats_request(self.codec)
        return flow_byte_counts(self.flow_stats(request.cookie, request.cookie_mask))

    def flows_of_port(self, port: int) -> list[FakeFlow]:
        return [f for f in self.flows.values() if f.match.in_port == port or f.out_port == port]


def _key(priority: int, fields: dict[str, Any], table: int) -> tuple[int, int, frozenset[tuple[str, Any]]]:
    return table, priority, frozenset(fields.items())


def _port(no: int) -> int:
    return CONTROLLER if no == ofp.OFPP_CONTROLLER else no


def _output_ports(actions: Iterable[Any]) -> list[int]:
    ports = []
    for action in actions:
        if isinstance(action, parser.OFPActionSetField | parser.NXActionRegMove):
            continue  # _edits
        if not isinstance(action, parser.OFPActionOutput):
            raise FakeFlowTableError(f"action {type(action).__name__} is not modelled")
        if action.port == ofp.OFPP_IN_PORT:
            ports.append(IN_PORT)
            continue
        if action.port > ofp.OFPP_MAX and action.port != ofp.OFPP_CONTROLLER:
            raise FakeFlowTableError(f"output to reserved port {action.port:#x} is not modelled")
        ports.append(_port(action.port))
    return ports


def _edits(instructions: Iterable[Any]) -> tuple[tuple[str, str, Any], ...]:
    """The set-field and register-move actions of apply-actions, in order (ARP and Ethernet addresses only)."""
    edits: list[tuple[str, str, Any]] = []
    for inst in instructions:
        for action in getattr(inst, "actions", ()):
            if isinstance(action, parser.OFPActionSetField):
                edit: tuple[str, str, Any] = ("set", action.key, action.value)
                names = [action.key]
            elif isinstance(action, parser.NXActionRegMove):
                edit, names = ("move", action.src_field, action.dst_field), [action.src_field, action.dst_field]
            else:
                continue
            if any(name not in _ARP_FIELDS for name in names):
                raise FakeFlowTableError(f"an edit of {names} is not modelled")
            if edit[0] == "move" and (action.src_ofs or action.dst_ofs or action.n_bits != 8 * _ARP_FIELDS[names[0]][1]):
                raise FakeFlowTableError("a partial register move is not modelled")
            edits.append(edit)
    return tuple(edits)


def _edited(frame: bytes, edits: Iterable[tuple[str, str, Any]]) -> bytes:
    """`frame` (an untagged ARP frame) after the edits."""
    out = bytearray(frame)
    for kind, name, arg in edits:
        offset, length = _ARP_FIELDS[name]
        if kind == "move":
            at, _ = _ARP_FIELDS[arg]
            out[at:at + length] = out[offset:offset + length]
        elif length == 6:
            out[offset:offset + 6] = bytes.fromhex(str(arg).replace(":", ""))
        elif length == 4:
            out[offset:offset + 4] = ipaddress.IPv4Address(arg).packed
        else:
            out[offset:offset + length] = int(arg).to_bytes(length, "big")
    return bytes(out)


def _goto(instructions: Iterable[Any]) -> int | None:
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionGotoTable):
            return int(inst.table_id)
    return None


def _outputs(instructions: Iterable[Any]) -> tuple[int, ...]:
    ports: list[int] = []
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionGotoTable):
            continue  # _goto
        if not isinstance(inst, parser.OFPInstructionActions) or inst.type != ofp.OFPIT_APPLY_ACTIONS:
            raise FakeFlowTableError(f"instruction {inst!r} is not modelled")
        ports += _output_ports(inst.actions)
    return tuple(ports)


def _packet_fields(in_port: int, frame: bytes) -> dict[str, Any]:
    """The OXM fields of a frame, as OVS reads them (the policy's reading, evio.sdn.l2policy, is OVS's)."""
    packet: dict[str, Any] = {"in_port": in_port}
    fields = l2policy.frame_fields(frame)
    if fields is None:
        return packet
    packet.update(eth_dst=fields.eth_dst, eth_src=fields.eth_src, eth_type=fields.eth_type)
    if fields.eth_type == 0x0806 and fields.vlan is None and len(frame) >= 42:
        for name in ("arp_op", "arp_sha", "arp_spa", "arp_tha", "arp_tpa"):
            offset, length = _ARP_FIELDS[name]
            raw = frame[offset:offset + length]
            packet[name] = int.from_bytes(raw, "big") if length == 2 else (
                raw.hex(":") if length == 6 else str(ipaddress.IPv4Address(raw)))
    packet["vlan_vid"] = 0 if fields.vlan is None else 0x1000 | fields.vlan
    if fields.ip_proto is not None:
        packet["ip_proto"] = fields.ip_proto
        kind = {6: "tcp", 17: "udp"}.get(fields.ip_proto)
        if kind is not None and fields.src_port is not None:
            packet[f"{kind}_src"], packet[f"{kind}_dst"] = fields.src_port, fields.dst_port
    _guard_fields(packet, frame)
    _nd_fields(packet, frame)
    return packet


def _nd_fields(packet: dict[str, Any], frame: bytes) -> None:
    """The IPv6 source and a neighbour solicitation's or advertisement's target, as OVS reads them, for the guards of
    named routers' and certified addresses (evio.sdn.router_addresses, neighbor_guard): the target only for code 0
    and while no link-layer option of one type comes twice with a non-zero MAC in each, :: otherwise (lib/flow.c
    `parse_icmpv6`; Linux takes the first such option: decision 0075)."""
    if packet.get("vlan_vid"):
        frame = frame[:12] + frame[16:]  # past one tag, as OVS reads (its vlan-limit is 1)
    if packet.get("eth_type") != 0x86DD or len(frame) < 54:
        return
    packet["ipv6_src"] = str(ipaddress.IPv6Address(frame[22:38]))
    found = icmpv6_at(frame)
    if found is not None and found[0] in (135, 136):
        packet["ipv6_nd_target"] = "::"  # read below when OVS reads it
    said = router_addresses.claim(frame)
    if said is not None:
        packet.setdefault("icmpv6_type", said.kind)  # past the tag too
        if said.kind in (135, 136) and found is not None and not _lladdr_doubled(frame[found[1] + 24:]):
            packet["ipv6_nd_target"] = str(ipaddress.IPv6Address(frame[found[1] + 8:found[1] + 24]))


def _lladdr_doubled(options: bytes) -> bool:
    """Whether OVS finds a source or target link-layer option (8 bytes) again after one of its type with a non-zero
    MAC: it then reads no target and no link-layer address of the message (a zero MAC counts as none read)."""
    read: set[int] = set()
    while len(options) >= 8:
        kind, units = options[0], options[1]
        if units == 0 or units * 8 > len(options):
            return False  # OVS stops reading, keeping what it read
        if kind in (1, 2) and units == 1:
            if kind in read:
                return True
            if any(options[2:8]):
                read.add(kind)
        options = options[units * 8 :]
    return False


def _guard_fields(packet: dict[str, Any], frame: bytes) -> None:
    """The fields the RA and ARP guards match (evio.sdn.neighbor_guard), as OVS reads them: past one VLAN tag (its
    vlan-limit is 1); ARP's fields only for hardware type 1 with IPv4 and lengths 6 and 4, its op only up to 255,
    all 0 otherwise (lib/flow.c); the ICMPv6 type past extension headers, and the ICMP (IPv4) type, a first
    fragment's too."""
    if packet.get("vlan_vid"):
        frame = frame[:12] + frame[16:]
    if packet.get("eth_type") == 0x0806:
        ethernet_ipv4 = len(frame) >= 42 and frame[14:16] == b"\x00\x01" and frame[16:20] == b"\x08\x00\x06\x04"
        op = int.from_bytes(frame[20:22], "big") if ethernet_ipv4 else 0
        packet["arp_op"] = op if op <= 0xFF else 0
        packet["arp_sha"] = frame[22:28].hex(":") if ethernet_ipv4 else "00:00:00:00:00:00"
        packet["arp_spa"] = ".".join(str(b) for b in frame[28:32]) if ethernet_ipv4 else "0.0.0.0"
    found = icmpv6_at(frame)
    if found is not None:
        packet["icmpv6_type"] = found[0]
    icmp = neighbor_guard.icmpv4_type(frame)
    if icmp is not None:
        packet["icmpv4_type"] = icmp


def _masked(value: Any, mask: Any) -> Any:
    if isinstance(value, str) and "::" not in value and value.count(":") == 5:  # a MAC address
        return bytes(a & b for a, b in zip(bytes.fromhex(value.replace(":", "")), bytes.fromhex(mask.replace(":", ""))))
    if isinstance(value, str):  # an IPv6 address (an NA's target by its interface identifier: review21s 1)
        return int(ipaddress.IPv6Address(value)) & int(ipaddress.IPv6Address(mask))
    return value & mask


@dataclass
class FakeNode:
    node_id: int
    switch: BoundedFloodSwitch
    table: FakeFlowTable = field(default_factory=FakeFlowTable)
    received: dict[int, list[bytes]] = field(default_factory=dict)  # leaf port -> frames delivered
    packet_ins: int = 0
    next_port: int = 1

    def allocate_port(self) -> int:
        port = self.next_port
        self.next_port += 1
        return port


class FakeNetwork:
    """Switches joined by tunnels; `inject` a frame at a leaf port and everything runs to quiet."""

    max_events = 1_000_000  # a forwarding loop trips this instead of hanging the test

    def __init__(self, flow_idle_timeout: int = 30, reverse_copies: bool = True, **switch_options: Any) -> None:
        self.reverse_copies = reverse_copies
        self.switch_options = switch_options  # more BoundedFloodSwitch arguments (max_macs=..., say)
        self.nodes: dict[int, FakeNode] = {}
        self.tunnels: dict[tuple[int, int], tuple[int, int]] = {}  # (node, port) -> (peer node, peer port)
        self.flow_idle_timeout = flow_idle_timeout
        self.now = 0.0
        self.frames_on_tunnels = 0

    def add_node(self, node_id: int, local_mac: str | None = None) -> FakeNode:
        """A switch with its internal (leaf) port as port 1, whose MAC is `local_mac`."""
        mac = local_mac if local_mac is not None else _mac_for(node_id, 0xFE)
        switch = BoundedFloodSwitch(node_id, _mac_for(node_id, 0x02), self.flow_idle_timeout,
                                    reverse_copies=self.reverse_copies, **self.switch_options)
        node = FakeNode(node_id, switch, FakeFlowTable(CodecDatapath(node_id)))
        self.nodes[node_id] = node
        for msg in base_flows(node.table.codec):  # what the adapter installs when the switch connects
            node.table.receive(node.table.codec.encode(msg), self.now)
        self.add_leaf(node_id, name="internal", hw_addr=mac)
        return node

    def add_leaf(self, node_id: int, name: str, hw_addr: str | None = None) -> int:
        node = self.nodes[node_id]
        port = node.allocate_port()
        node.received[port] = []
        self._execute(node, node.switch.port_added(SwitchPort(port, name, PortKind.LEAF, None, hw_addr), self.now))
        return port

    def connect(self, a: int, b: int) -> tuple[int, int]:
        """A tunnel between nodes a and b; returns (port on a, port on b)."""
        na, nb = self.nodes[a], self.nodes[b]
        pa, pb = na.allocate_port(), nb.allocate_port()
        self.tunnels[(a, pa)] = (b, pb)
        self.tunnels[(b, pb)] = (a, pa)
        port_a = SwitchPort(pa, f"t{b:x}"[:15], PortKind.PEER, b)
        port_b = SwitchPort(pb, f"t{a:x}"[:15], PortKind.PEER, a)
        in_flight = self._execute(na, na.switch.port_added(port_a, self.now))
        in_flight += self._execute(nb, nb.switch.port_added(port_b, self.now))
        self._run(deque(in_flight))  # the leaf announcements each side sends on a new tunnel
        return pa, pb

    def disconnect(self, a: int, b: int) -> None:
        pa = self.port_towards(a, b)
        pb = self.tunnels[(a, pa)][1]
        del self.tunnels[(a, pa)], self.tunnels[(b, pb)]
        for node_id, port in ((a, pa), (b, pb)):
            node = self.nodes[node_id]
            self._execute(node, node.switch.port_removed(port, self.now))

    def port_towards(self, a: int, b: int) -> int:
        for (node_id, port), (peer, _) in self.tunnels.items():
            if node_id == a and peer == b:
                return port
        raise FakeNetworkError(f"no tunnel between {a:x} and {b:x}")

    def inject(self, node_id: int, port: int, frame: bytes) -> None:
        """A host on leaf `port` of `node_id` sends `frame`; run until nothing is in flight."""
        self._run(deque([(node_id, port, frame)]))

    def from_neighbour(self, node_id: int, neighbour: int, frame: bytes) -> None:
        """`frame` arrives at `node_id` over its tunnel from `neighbour` (a hostile member's forgeries, say);
        run until nothing is in flight."""
        self._run(deque([(node_id, self.port_towards(node_id, neighbour), frame)]))

    def upcalled(self, node_id: int, port: int, frame: bytes) -> None:
        """`frame`, from `port` of `node_id`, reaches its controller whatever the table holds now (it missed the
        table before a flow that matches it went in); run until nothing is in flight."""
        node = self.nodes[node_id]
        node.packet_ins += 1
        self._run(deque(self._execute(node, node.switch.packet_in(port, frame, self.now))))

    def forget(self, node_id: int, mac: str) -> None:
        """`node_id`'s switch forgets `mac` and the flows towards it, as if its entry aged out there alone."""
        node = self.nodes[node_id]
        node.switch.learning.forget(mac)
        self._execute(node, [DeleteFlowsToMac(mac)])

    def tell_owners(self, owners: Mapping[str, int]) -> None:
        """Every switch hears who announced which MAC (what evio/node/host_claims.py tells it)."""
        for node in self.nodes.values():
            self._run(deque(self._execute(node, node.switch.set_mac_owners(owners, self.now))))

    def advance(self, seconds: float) -> None:
        """Move time on: idle flows time out and the switches hear of it."""
        self.now += seconds
        for node in self.nodes.values():
            node.table.expire(self.now)
            self._execute(node, [])  # the flow-removed notices
            self._execute(node, node.switch.expire(self.now))

    # ------------------------------------------------------------------ internals

    def _run(self, queue: deque[tuple[int, int, bytes]]) -> None:
        events = 0
        while queue:
            events += 1
            if events > self.max_events:
                raise FakeNetworkError("forwarding loop: too many frames in flight")
            node_id, in_port, frame = queue.popleft()
            node = self.nodes[node_id]
            outputs = node.table.lookup_frames(in_port, frame, self.now)
            forwarded = any(out != CONTROLLER for out, _ in outputs)  # a copy: a flow ahead by destination (0072)
            for out, sent in outputs:
                if out == CONTROLLER:
                    node.packet_ins += 1
                    queue.extend(self._execute(node, node.switch.packet_in(in_port, frame, self.now, forwarded)))
                else:
                    queue.extend(self._output(node, out, sent))

    def _execute(self, node: FakeNode, actions: Iterable[FlowAction]) -> list[tuple[int, int, bytes]]:
        """Send the actions to `node`'s switch as encoded OpenFlow; return frames now travelling to other nodes.

        Flow-removed notices the switch sends meanwhile go to the logic, and what it answers goes too.
        """
        in_flight: list[tuple[int, int, bytes]] = []
        table = node.table
        pending = deque(actions)
        while True:
            while pending:
                for msg in to_ofp_messages(table.codec, pending.popleft()):
                    for port, frame in table.receive(table.codec.encode(msg), self.now):
                        in_flight += self._output(node, port, frame)
            notices = table.take_notices()
            if not notices:
                return in_flight
            for data in notices:
                notice = table.codec.decode(data)
                match = removed_flow_match(notice)
                if match is not None:
                    pending.extend(node.switch.flow_removed(match))
                elif (ahead := removed_destination_match(notice)) is not None:
                    pending.extend(node.switch.destination_removed(ahead))

    def _output(self, node: FakeNode, port: int, frame: bytes) -> list[tuple[int, int, bytes]]:
        if port == CONTROLLER:
            raise FakeNetworkError("a packet out to the controller")
        if port in node.received:
            node.received[port].append(frame)
            return []
        far = self.tunnels.get((node.node_id, port))
        if far is None:
            return []  # a port that went away: the frame is lost, as on a real switch
        self.frames_on_tunnels += 1
        return [(far[0], far[1], frame)]


# -- networks the tests build ------------------------------------------------------------------------


def host_mac(net: FakeNetwork, node_id: int) -> str:
    """The MAC of a node's internal port (1), where its host's frames enter."""
    mac = net.nodes[node_id].switch.ports[1].hw_addr
    assert mac is not None
    return mac


def ring_network(n: int) -> tuple[FakeNetwork, list[int]]:
    """n nodes in a ring of successor links; ids with distinct low bits, so distinct host MACs."""
    net = FakeNetwork(flow_idle_timeout=30)
    ids = [(i + 1) << 120 | (i + 1) for i in range(n)]
    for nid in ids:
        net.add_node(nid)
    for i, nid in enumerate(ids):
        net.connect(nid, ids[(i + 1) % n])
    return net, ids


def symphony_like(n: int, long_distance: int, seed: int) -> tuple[list[int], set[tuple[int, int]]]:
    """n random ids on the ring, each linked to its successor plus `long_distance` random chords."""
    rng = random.Random(seed)
    ids = sorted(rng.randrange(RING_SIZE) for _ in range(n))
    links: set[tuple[int, int]] = set()
    for i, nid in enumerate(ids):
        links.add(_pair(nid, ids[(i + 1) % n]))
        for other in rng.sample([x for x in ids if x != nid], long_distance):
            links.add(_pair(nid, other))
    return ids, links


def symphony_network(
    n: int = 16, seed: int = 7, long_distance: int = 2
) -> tuple[FakeNetwork, list[int], set[tuple[int, int]]]:
    """A network of `symphony_like` overlay: (network, ids, links)."""
    net = FakeNetwork(flow_idle_timeout=30)
    ids, links = symphony_like(n, long_distance, seed=seed)
    for nid in ids:
        net.add_node(nid)
    for a, b in sorted(links):
        net.connect(a, b)
    return net, ids, links


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a <= b else (b, a)


def _mac_for(node_id: int, first_octet: int) -> str:
    """A locally administered unicast MAC derived from a node id (first octet's low bits set by caller)."""
    tail = (node_id & 0xFFFF_FFFF_FF).to_bytes(5, "big")
    return bytes([first_octet]).hex() + ":" + tail.hex(":")


def sign_router_adverts(net: FakeNetwork, ids: list[int], overlay: str = "ov1", epoch: float = 1.8e9) -> None:
    """Give every switch a node key, the others' public keys and a wall clock `epoch` + the network's time: named
    routers' nodes then vouch for their RAs and every node asks for it (decision 0081, what the daemon does in trust
    mode with the certificates the host claims found the CA's)."""
    keys = {nid: ec.generate_private_key(ec.SECP256R1()) for nid in ids}
    public = {nid: key.public_key() for nid, key in keys.items()}
    for nid in ids:
        net.nodes[nid].switch.router_adverts = RouterAdverts(overlay, keys[nid], public.get, lambda: epoch + net.now)
