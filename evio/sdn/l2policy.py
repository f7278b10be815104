"""An overlay's L2 policy compiled into table-0 flows, and the same rules for the frames FRBs carry (pure).

The bridge has two tables (flow_actions): table 0 holds the policy, table 1
the switching. Each rule becomes one flow per port it applies to (`from`:
"any" is one flow without in_port; "members" one per tunnel port, "leaves"
one per other port, a name the port of that name), at priority
POLICY_RULE_PRIORITY less its place in the list, so the first rule that
matches decides; an "allow" flow goes on to table 1, a "drop" flow has no
instruction (OpenFlow drops the frame) and its packet counter is what the
rule dropped. A frame no rule matches takes table 0's priority-0 flow to
table 1: the default allows.

FRBs pass table 0 whole (the outer frame is evio's, from member to member);
the controller reads their inner frame and asks `PolicyTable.allows`, which
evaluates the same rules as OVS matches them (the type inside an 802.1Q tag,
IPv6 extension headers skipped), before it learns, delivers or passes the
copy on. A frame a rule drops at this node's ingress goes nowhere from here,
whether it was for a local host or passing through, as a unicast frame the
flow drops would.

Not policed: frames the node itself makes (ARP and ND answered locally,
leaf announcements), and the Ethernet header of a BROADCAST_REVERSE copy,
which is only learned from, never delivered.

`PolicyTable` keeps what was installed and returns the flow changes a new
rule list or a port change needs: adds before deletes, so a frame is never
let through by a rule between its old flow and its new one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from evio.config.model import PolicyRule
from evio.sdn.flow_actions import (
    POLICY_RULE_PRIORITY,
    AddPolicyFlow,
    DeletePolicyFlow,
    FlowAction,
    PolicyMatch,
)

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
_VLAN_TYPES = (0x8100, 0x88A8)  # 802.1Q and 802.1ad: OVS matches the VLAN id of the outer tag, the type inside it
_IPV6_EXTENSIONS = (0, 43, 44, 60)  # hop-by-hop, routing, fragment, destination options
_PORTED = (6, 17)  # TCP, UDP: the protocols a rule's ports are for


@dataclass(frozen=True, slots=True)
class PolicyPort:
    """A bridge port as the policy sees it: its number, its name, and whether a tunnel (a member) is behind it."""

    port_no: int
    name: str
    member: bool


# ---------------------------------------------------------------------- compiling


def rule_priority(index: int) -> int:
    return POLICY_RULE_PRIORITY - index


def rule_ports(rule: PolicyRule, ports: Iterable[PolicyPort]) -> list[int | None]:
    """The in_ports a rule's flows match: [None] for every port."""
    if rule.in_port == "any":
        return [None]
    if rule.in_port == "members":
        chosen = [p.port_no for p in ports if p.member]
    elif rule.in_port == "leaves":
        chosen = [p.port_no for p in ports if not p.member]
    else:
        chosen = [p.port_no for p in ports if p.name == rule.in_port]
    return [*sorted(chosen)]


def compile_policy(rules: Sequence[PolicyRule], ports: Iterable[PolicyPort]) -> list[AddPolicyFlow]:
    """Every table-0 flow the rules need with these ports on the bridge, highest priority first."""
    ports = list(ports)
    flows: list[AddPolicyFlow] = []
    for index, rule in enumerate(rules):
        # OpenFlow needs the IP type for ip_proto: a rule for either IP version is a flow for each.
        types = [rule.eth_type] if rule.eth_type is not None or rule.ip_proto is None else [ETH_TYPE_IPV4, ETH_TYPE_IPV6]
        for in_port in rule_ports(rule, ports):
            for eth_type in types:
                match = PolicyMatch(in_port, rule.eth_src, rule.eth_dst, eth_type, rule.vlan, rule.ip_proto,
                                    rule.src_port, rule.dst_port)
                flows.append(AddPolicyFlow(index, rule_priority(index), match, rule.action == "allow"))
    return flows


def oxm_fields(match: PolicyMatch) -> dict[str, object]:
    """The OpenFlow 1.3 match fields (os-ken's OFPMatch keywords) of a policy flow."""
    fields: dict[str, object] = {}
    if match.in_port is not None:
        fields["in_port"] = match.in_port
    if match.eth_src is not None:
        fields["eth_src"] = match.eth_src
    if match.eth_dst is not None:
        fields["eth_dst"] = match.eth_dst
    if match.eth_type is not None:
        fields["eth_type"] = match.eth_type
    if match.vlan is not None:
        fields["vlan_vid"] = 0x1000 | match.vlan  # OFPVID_PRESENT: a tagged frame of this VLAN
    if match.ip_proto is not None:
        fields["ip_proto"] = match.ip_proto
        kind = {6: "tcp", 17: "udp"}.get(match.ip_proto)
        if kind is not None and match.src_port is not None:
            fields[f"{kind}_src"] = match.src_port
        if kind is not None and match.dst_port is not None:
            fields[f"{kind}_dst"] = match.dst_port
    return fields


# ---------------------------------------------------------------------- the rules over a frame


@dataclass(frozen=True, slots=True)
class FrameFields:
    """What the rules can match in a frame, read as OVS reads it (None: absent)."""

    eth_dst: str
    eth_src: str
    eth_type: int
    vlan: int | None = None
    ip_proto: int | None = None
    src_port: int | None = None
    dst_port: int | None = None


def frame_fields(frame: bytes) -> FrameFields | None:
    """The matchable fields of an Ethernet frame; None for a runt."""
    if len(frame) < 14:
        return None
    dst, src = frame[0:6].hex(":"), frame[6:12].hex(":")
    eth_type = int.from_bytes(frame[12:14], "big")
    at = 14
    vlan = None
    if eth_type in _VLAN_TYPES and len(frame) >= 18:
        # One tag, as Open vSwitch reads (its vlan-limit is 1: evio does not set it): behind a second, the type is
        # 0x8100 or 0x88a8 and no rule naming an IP field matches. A tunnel port's frames of two tags or a VLAN-0
        # tag never meet the rules: the guards drop them first (review21k K2, decision 0068 amended).
        vlan = int.from_bytes(frame[14:16], "big") & 0x0FFF
        eth_type = int.from_bytes(frame[16:18], "big")
        at = 18
    proto, l4 = _ip_payload(frame, at, eth_type)
    src_port = dst_port = None
    if proto in _PORTED and l4 is not None and len(frame) >= l4 + 4:
        src_port = int.from_bytes(frame[l4:l4 + 2], "big")
        dst_port = int.from_bytes(frame[l4 + 2:l4 + 4], "big")
    return FrameFields(dst, src, eth_type, vlan, proto, src_port, dst_port)


def _ip_payload(frame: bytes, at: int, eth_type: int) -> tuple[int | None, int | None]:
    """(IP protocol, offset of its header) of an IPv4 or IPv6 packet at `at`; (None, None) otherwise.
    The offset is None for a later fragment, whose ports OVS does not read either."""
    if eth_type == ETH_TYPE_IPV4 and len(frame) >= at + 20:
        ihl = (frame[at] & 0x0F) * 4
        later_fragment = int.from_bytes(frame[at + 6:at + 8], "big") & 0x1FFF != 0
        return frame[at + 9], None if later_fragment else at + ihl
    if eth_type == ETH_TYPE_IPV6 and len(frame) >= at + 40:
        proto, offset = frame[at + 6], at + 40
        while proto in _IPV6_EXTENSIONS and len(frame) >= offset + 8:
            if proto == 44:  # fragment header: 8 bytes; a later fragment has no ports
                if int.from_bytes(frame[offset + 2:offset + 4], "big") & 0xFFF8:
                    return frame[offset], None
                proto, offset = frame[offset], offset + 8
            else:
                proto, offset = frame[offset], offset + 8 + frame[offset + 1] * 8
        return proto, offset
    return None, None


def rule_applies(rule: PolicyRule, port: PolicyPort, fields: FrameFields) -> bool:
    """Whether `rule` matches a frame with `fields` entering by `port` (as its flows would)."""
    if rule.in_port == "members" and not port.member or rule.in_port == "leaves" and port.member:
        return False
    if rule.in_port not in ("any", "members", "leaves") and rule.in_port != port.name:
        return False
    if rule.ip_proto is not None and rule.eth_type is None and fields.eth_type not in (ETH_TYPE_IPV4, ETH_TYPE_IPV6):
        return False
    wanted = (rule.eth_src, rule.eth_dst, rule.eth_type, rule.vlan, rule.ip_proto, rule.src_port, rule.dst_port)
    have = (fields.eth_src, fields.eth_dst, fields.eth_type, fields.vlan, fields.ip_proto, fields.src_port,
            fields.dst_port)
    return all(w is None or w == h for w, h in zip(wanted, have, strict=True))


def deciding_rule(rules: Sequence[PolicyRule], port: PolicyPort, frame: bytes) -> int | None:
    """The index of the first rule that matches the frame; None when none does (allowed)."""
    fields = frame_fields(frame)
    if fields is None:
        return None
    for index, rule in enumerate(rules):
        if rule_applies(rule, port, fields):
            return index
    return None


# ---------------------------------------------------------------------- one bridge's policy


@dataclass(frozen=True, slots=True)
class RuleCount:
    """One rule's count: frames its flows matched, and FRB inner frames it matched in the controller."""

    name: str
    action: str
    in_port: str
    packets: int
    frb_packets: int


class PolicyTable:
    """The rules of one overlay, the flows installed for them, and what each rule matched."""

    def __init__(self, rules: Sequence[PolicyRule] = ()) -> None:
        self.rules: tuple[PolicyRule, ...] = tuple(rules)
        self._installed: dict[tuple[int, PolicyMatch], AddPolicyFlow] = {}
        self.frb_matched: Counter[int] = Counter()  # rule index -> inner frames it matched (controller side)
        self.flow_packets: dict[int, int] = {}  # rule index -> its flows' packet counters, last poll

    @property
    def polices_members(self) -> bool:
        """Whether any rule sees frames from tunnels (then no frame may bypass the bridge: transit.py)."""
        return any(rule.in_port != "leaves" for rule in self.rules)

    def set_rules(self, rules: Sequence[PolicyRule]) -> bool:
        """New rules (a reload); True if they differ. Counts start again: rule numbers may mean others now."""
        rules = tuple(rules)
        if rules == self.rules:
            return False
        self.rules = rules
        self.frb_matched.clear()
        self.flow_packets = {}
        return True

    def switch_cleared(self) -> None:
        """The switch's flows were all deleted (it connected): nothing of ours is installed."""
        self._installed.clear()
        self.flow_packets = {}

    def sync(self, ports: Iterable[PolicyPort]) -> list[FlowAction]:
        """The flow changes that bring the switch to the rules over `ports`: adds first, then deletes."""
        wanted = {(flow.priority, flow.match): flow for flow in compile_policy(self.rules, ports)}
        adds: list[FlowAction] = [flow for key, flow in wanted.items() if self._installed.get(key) != flow]
        deletes: list[FlowAction] = [DeletePolicyFlow(priority, match) for priority, match in self._installed
                                     if (priority, match) not in wanted]
        self._installed = wanted
        return adds + deletes

    def allows(self, port: PolicyPort, frame: bytes) -> bool:
        """Whether the rules let `frame` (an FRB's inner frame) in by `port`; counts the rule that decided."""
        if not self.rules:
            return True
        index = deciding_rule(self.rules, port, frame)
        if index is None:
            return True
        self.frb_matched[index] += 1
        return self.rules[index].action == "allow"

    def flow_stats(self, packets_by_rule: Mapping[int, int]) -> None:
        """One complete poll of the policy flows' packet counters, summed by rule."""
        self.flow_packets = {i: n for i, n in packets_by_rule.items() if 0 <= i < len(self.rules)}

    def counts(self) -> tuple[RuleCount, ...]:
        return tuple(RuleCount(rule.label(i), rule.action, rule.in_port, self.flow_packets.get(i, 0),
                               self.frb_matched.get(i, 0)) for i, rule in enumerate(self.rules))
