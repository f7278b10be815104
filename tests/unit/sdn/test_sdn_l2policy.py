"""The L2 policy (evio.sdn.l2policy): its compile step, the flows' OpenFlow form, and frames through fake tables."""

from __future__ import annotations

import json
import struct

from evio.config.model import PolicyRule
from evio.sdn.boundary import PolicyCounts
from evio.sdn.flow_actions import (
    POLICY_RULE_PRIORITY,
    AddPolicyFlow,
    DeletePolicyFlow,
    PolicyMatch,
)
from evio.sdn.l2policy import (
    PolicyPort,
    PolicyTable,
    compile_policy,
    deciding_rule,
    frame_fields,
    oxm_fields,
)
from evio.sdn.ofapp import EventTick
from evio.sdn.openflow_messages import POLICY_COOKIE, policy_packet_counts, to_ofp_messages
from evio.sdn.switch import Drop, PortKind
from evio.testing.fake_flow_table import CodecDatapath, FakeNetwork
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import H1

BCAST = "ff:ff:ff:ff:ff:ff"
LEAF = PolicyPort(1, "evbr-ov1", member=False)
TAP_A = PolicyPort(5, "evit0a", member=True)
TAP_B = PolicyPort(6, "evit0b", member=True)
VM = PolicyPort(7, "vm1-tap", member=False)

ONLY_IP = (
    PolicyRule("allow", eth_type=0x0800),
    PolicyRule("allow", eth_type=0x0806),
    PolicyRule("allow", eth_type=0x86DD),
    PolicyRule("drop", name="rest"),
)


# ---------------------------------------------------------------------- frames


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def eth(dst: str, src: str, eth_type: int, payload: bytes, vlan: int | None = None) -> bytes:
    tag = struct.pack("!HH", 0x8100, vlan) if vlan is not None else b""
    return mac_bytes(dst) + mac_bytes(src) + tag + struct.pack("!H", eth_type) + payload


def ipv4(proto: int, l4: bytes, fragment_offset: int = 0) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, fragment_offset, 64, proto, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return header + l4


def udp(src_port: int, dst_port: int) -> bytes:
    return struct.pack("!HHHH", src_port, dst_port, 8 + 20, 0) + b"d" * 20


def tcp(src_port: int, dst_port: int) -> bytes:
    return struct.pack("!HHIIHHHH", src_port, dst_port, 1, 0, 0x5002, 65535, 0, 0)


def ipv6(next_header: int, payload: bytes, hop_by_hop: bool = False) -> bytes:
    if hop_by_hop:  # as MLD reports carry one (router alert)
        payload = bytes([next_header, 0, 5, 2, 0, 0, 1, 0]) + payload
        next_header = 0
    return struct.pack("!IHBB16s16s", 6 << 28, len(payload), next_header, 1, b"\xfe\x80" + b"\0" * 14,
                       b"\xff\x02" + b"\0" * 13 + b"\x01") + payload


def arp_body(sender: str, op: int = 1) -> bytes:
    """A well-formed Ethernet/IPv4 ARP body: the switch drops ARP it cannot read from tunnels (0068, review21k K3)."""
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, mac_bytes(sender), bytes(4), bytes(6), bytes(4))


ICMPV6_ECHO = bytes([128, 0, 0, 0, 0, 1, 0, 1]) + b"p" * 32


# ---------------------------------------------------------------------- reading a frame as OVS does


def test_frame_fields_are_read_as_ovs_matches_them() -> None:
    a, b = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
    dhcp = frame_fields(eth(BCAST, a, 0x0800, ipv4(17, udp(67, 68))))
    assert dhcp is not None and (dhcp.eth_type, dhcp.ip_proto, dhcp.src_port, dhcp.dst_port) == (0x0800, 17, 67, 68)
    tagged = frame_fields(eth(b, a, 0x0800, ipv4(6, tcp(4000, 5201)), vlan=10))
    assert tagged is not None and (tagged.vlan, tagged.eth_type, tagged.dst_port) == (10, 0x0800, 5201)
    mld = frame_fields(eth("33:33:00:00:00:01", a, 0x86DD, ipv6(58, ICMPV6_ECHO, hop_by_hop=True)))
    assert mld is not None and mld.ip_proto == 58  # past the hop-by-hop header
    later = frame_fields(eth(b, a, 0x0800, ipv4(17, udp(67, 68), fragment_offset=185)))
    assert later is not None and (later.ip_proto, later.src_port) == (17, None)  # a later fragment has no ports
    assert frame_fields(b"\x00" * 13) is None


# ---------------------------------------------------------------------- compiling


def test_rules_compile_in_order_one_flow_per_port_they_apply_to() -> None:
    rules = (
        PolicyRule("allow", name="dhcp-server", ip_proto=17, src_port=67, eth_src="52:54:00:00:00:01"),
        PolicyRule("drop", name="rogue-dhcp", ip_proto=17, src_port=67),  # either IP version: two flows
        PolicyRule("drop", in_port="members", eth_type=0x86DD),  # one per tunnel port
        PolicyRule("allow", in_port="vm1-tap", eth_dst="52:54:00:00:00:fe", vlan=10),
        PolicyRule("drop", in_port="leaves"),
    )
    flows = compile_policy(rules, [LEAF, TAP_A, TAP_B, VM])
    summary = [(f.rule, f.priority, f.match.in_port, f.match.eth_type, f.allow) for f in flows]
    p = POLICY_RULE_PRIORITY
    assert summary == [
        (0, p, None, 0x0800, True), (0, p, None, 0x86DD, True),
        (1, p - 1, None, 0x0800, False), (1, p - 1, None, 0x86DD, False),
        (2, p - 2, 5, 0x86DD, False), (2, p - 2, 6, 0x86DD, False),
        (3, p - 3, 7, None, True),
        (4, p - 4, 1, None, False), (4, p - 4, 7, None, False),
    ]  # fmt: skip
    assert oxm_fields(flows[0].match) == {"eth_src": "52:54:00:00:00:01", "eth_type": 0x0800, "ip_proto": 17,
                                          "udp_src": 67}
    assert oxm_fields(flows[6].match) == {"in_port": 7, "eth_dst": "52:54:00:00:00:fe", "vlan_vid": 0x1000 | 10}
    assert compile_policy(rules[2:3], [LEAF]) == []  # no tunnel yet: nothing to install


def test_policy_flows_become_table_0_flow_mods_with_the_rule_in_the_cookie() -> None:
    codec = CodecDatapath()
    ofp = codec.ofproto
    allow = AddPolicyFlow(3, POLICY_RULE_PRIORITY - 3, PolicyMatch(in_port=5, eth_type=0x86DD, ip_proto=58), True)
    drop = AddPolicyFlow(4, POLICY_RULE_PRIORITY - 4, PolicyMatch(ip_proto=6, eth_type=0x0800, dst_port=5201), False)
    (allow_msg,) = to_ofp_messages(codec, allow)
    (drop_msg,) = to_ofp_messages(codec, drop)
    assert (allow_msg.table_id, allow_msg.cookie, allow_msg.priority) == (0, POLICY_COOKIE | 3 << 32, 1997)
    assert [type(i).__name__ for i in allow_msg.instructions] == ["OFPInstructionGotoTable"]
    assert allow_msg.instructions[0].table_id == 1
    assert drop_msg.instructions == [] and drop_msg.match["tcp_dst"] == 5201  # no instruction: dropped
    (delete,) = to_ofp_messages(codec, DeletePolicyFlow(drop.priority, drop.match))
    assert (delete.command, delete.table_id, delete.priority) == (ofp.OFPFC_DELETE_STRICT, 0, drop.priority)
    for msg in (allow_msg, drop_msg, delete):
        codec.encode(msg)  # valid OpenFlow 1.3 on the wire (prerequisites and all)
    parser = codec.ofproto_parser

    def stat(cookie: int, packets: int) -> object:
        return parser.OFPFlowStats(0, 0, 0, 1, 0, 0, 0, cookie, packets, packets * 100, parser.OFPMatch(), [])

    stats = [stat(POLICY_COOKIE | 4 << 32, 7), stat(POLICY_COOKIE | 4 << 32, 2), stat(POLICY_COOKIE, 1), stat(5, 99)]
    assert policy_packet_counts(stats) == {4: 9, 0: 1}  # by rule, summed over its ports; others' flows ignored


def test_sync_adds_before_it_deletes_and_touches_only_what_changed() -> None:
    table = PolicyTable((PolicyRule("drop", in_port="members", eth_type=0x86DD),))
    first = table.sync([LEAF, TAP_A])
    assert [type(a).__name__ for a in first] == ["AddPolicyFlow"]
    assert table.sync([LEAF, TAP_A]) == []  # nothing new
    second = table.sync([LEAF, TAP_A, TAP_B])  # a tunnel came: its port's flow only
    assert [(type(a).__name__, a.match.in_port) for a in second] == [("AddPolicyFlow", 6)]  # type: ignore[union-attr]
    gone = table.sync([LEAF, TAP_B])
    assert [(type(a).__name__, a.match.in_port) for a in gone] == [("DeletePolicyFlow", 5)]  # type: ignore[union-attr]
    # A reload: the new rule's flows go in before the old ones come out, so nothing slips through between.
    assert table.set_rules((PolicyRule("drop", in_port="members", eth_type=0x0800),))
    swap = table.sync([LEAF, TAP_B])
    assert [type(a).__name__ for a in swap] == ["AddPolicyFlow", "DeletePolicyFlow"]
    assert not table.set_rules((PolicyRule("drop", in_port="members", eth_type=0x0800),))  # the same: no change
    table.switch_cleared()  # the switch connected again: everything goes in again
    assert len(table.sync([LEAF, TAP_B])) == 1


def test_the_first_matching_rule_decides_and_no_match_allows() -> None:
    a = "02:00:00:00:00:0a"
    v4 = eth(BCAST, a, 0x0800, ipv4(17, udp(68, 67)))
    v6 = eth("33:33:00:00:00:01", a, 0x86DD, ipv6(58, ICMPV6_ECHO))
    ipx = eth(BCAST, a, 0x8137, b"x" * 46)
    assert deciding_rule(ONLY_IP, TAP_A, v4) == 0
    assert deciding_rule(ONLY_IP, TAP_A, v6) == 2
    assert deciding_rule(ONLY_IP, TAP_A, ipx) == 3
    members_only = (PolicyRule("drop", in_port="members"),)
    assert deciding_rule(members_only, LEAF, ipx) is None  # not for this port: allowed
    table = PolicyTable(ONLY_IP)
    assert table.allows(TAP_A, v4) and table.allows(TAP_A, v6) and not table.allows(TAP_A, ipx)
    assert [(c.name, c.frb_packets) for c in table.counts()] == [("rule-1", 1), ("rule-2", 0), ("rule-3", 1),
                                                                  ("rest", 1)]


# ---------------------------------------------------------------------- through fake tables


def with_policy(net: FakeNetwork, node_id: int, rules: tuple[PolicyRule, ...]) -> PolicyTable:
    """Install `rules` on a fake node as OverlaySwitch does: flows into its table, the FRB check into its switch."""
    node = net.nodes[node_id]
    table = PolicyTable(rules)

    def ports() -> list[PolicyPort]:
        return [PolicyPort(p.port_no, p.name, p.kind is PortKind.PEER) for p in node.switch.ports.values()]

    net._execute(node, table.sync(ports()))

    def allows(in_port: int, inner: bytes) -> bool:
        port = node.switch.ports[in_port]
        return table.allows(PolicyPort(port.port_no, port.name, port.kind is PortKind.PEER), inner)

    node.switch.frame_filter = allows
    return table


def two_nodes() -> tuple[FakeNetwork, str, str]:
    net = FakeNetwork()
    net.add_node(0x100)
    net.add_node(0x200)
    net.connect(0x100, 0x200)
    mac1, mac2 = net.nodes[0x100].switch.ports[1].hw_addr, net.nodes[0x200].switch.ports[1].hw_addr
    assert mac1 is not None and mac2 is not None
    # Each host learned where the other is (an ARP each way), so unicast has flows.
    net.inject(0x100, 1, eth(BCAST, mac1, 0x0806, arp_body(mac1)))
    net.inject(0x200, 1, eth(mac1, mac2, 0x0806, arp_body(mac2, 2)))
    for node in net.nodes.values():
        node.received[1].clear()
    return net, mac1, mac2


def drop_count(net: FakeNetwork, node_id: int, rule: int) -> int:
    entries = net.nodes[node_id].table.entries
    return sum(f.packets for f in entries if f.table == 0 and f.cookie == POLICY_COOKIE | rule << 32)


def test_a_member_rule_drops_icmpv6_unicast_in_table_0_and_broadcast_in_the_controller() -> None:
    net, mac1, mac2 = two_nodes()
    table = with_policy(net, 0x200, (PolicyRule("drop", name="no-icmpv6", in_port="members", ip_proto=58),))
    ping6 = eth(mac2, mac1, 0x86DD, ipv6(58, ICMPV6_ECHO))
    ping4 = eth(mac2, mac1, 0x0800, ipv4(1, b"\x08\0\0\0\0\1\0\1" + b"p" * 32))
    net.inject(0x100, 1, ping6)
    net.inject(0x100, 1, ping4)
    assert net.nodes[0x200].received[1] == [ping4]  # ICMPv6 dropped at node 2's ingress, IPv4 delivered
    assert drop_count(net, 0x200, 0) == 1
    # Multicast goes as an FRB: table 0 lets the FRB by, the controller drops its inner frame.
    solicit = eth("33:33:ff:00:00:02", mac1, 0x86DD, ipv6(58, bytes([135, 0, 0, 0]) + b"\0" * 20, hop_by_hop=True))
    net.inject(0x100, 1, solicit)
    assert net.nodes[0x200].received[1] == [ping4]
    assert net.nodes[0x200].switch.drops[Drop.POLICY] == 1
    assert [(c.name, c.frb_packets) for c in table.counts()] == [("no-icmpv6", 1)]
    # The sender's own node has no policy: its own leaves got the multicast (none here but the sender).
    assert net.nodes[0x100].switch.drops[Drop.POLICY] == 0


def test_a_leaf_rule_keeps_a_port_to_the_macs_it_allows() -> None:
    net, mac1, mac2 = two_nodes()
    stranger = "02:00:00:00:00:99"
    with_policy(net, 0x100, (
        PolicyRule("allow", name="to-node2", in_port="leaves", eth_dst=mac2),
        PolicyRule("allow", name="broadcast", in_port="leaves", eth_dst=BCAST),
        PolicyRule("drop", name="others", in_port="leaves"),
    ))  # fmt: skip
    to_node2 = eth(mac2, mac1, 0x0800, ipv4(17, udp(1000, 2000)))
    to_stranger = eth(stranger, mac1, 0x0800, ipv4(17, udp(1000, 2000)))
    frames_before = net.frames_on_tunnels
    net.inject(0x100, 1, to_stranger)  # unknown unicast would be flooded: the rule drops it first
    assert net.frames_on_tunnels == frames_before and drop_count(net, 0x100, 2) == 1
    net.inject(0x100, 1, to_node2)
    assert net.nodes[0x200].received[1] == [to_node2]


def test_a_reload_that_removes_the_rule_lets_the_frames_through_again() -> None:
    net, mac1, mac2 = two_nodes()
    table = with_policy(net, 0x200, (PolicyRule("drop", in_port="members", ip_proto=6, dst_port=5201),))
    iperf = eth(mac2, mac1, 0x0800, ipv4(6, tcp(40000, 5201)))
    ssh = eth(mac2, mac1, 0x0800, ipv4(6, tcp(40001, 22)))
    net.inject(0x100, 1, iperf)
    net.inject(0x100, 1, ssh)
    assert net.nodes[0x200].received[1] == [ssh]
    node = net.nodes[0x200]
    assert table.set_rules(())
    net._execute(node, table.sync([]))
    assert [f for f in node.table.entries if f.cookie & 0xFFFF_FFFF == POLICY_COOKIE] == []
    net.inject(0x100, 1, iperf)
    assert net.nodes[0x200].received[1] == [ssh, iperf]


# ---------------------------------------------------------------------- 802.1Q through the switch


def test_tagged_frames_cross_the_frb_path_and_unicast_flows_with_their_tag() -> None:
    net, mac1, mac2 = two_nodes()
    tagged_broadcast = eth(BCAST, mac1, 0x0806, arp_body(mac1), vlan=42)
    net.inject(0x100, 1, tagged_broadcast)
    assert net.nodes[0x200].received[1] == [tagged_broadcast]  # through an FRB, tag and all
    tagged = eth(mac2, mac1, 0x0800, ipv4(17, udp(1, 2)), vlan=42)
    net.inject(0x100, 1, tagged)  # the first by the controller, installing the flow
    net.inject(0x100, 1, tagged)  # the second by the flow
    assert net.nodes[0x200].received[1] == [tagged_broadcast, tagged, tagged]
    # A rule for VLAN 42 sees the tag; untagged frames are not its business.
    with_policy(net, 0x200, (PolicyRule("drop", in_port="members", vlan=42),))
    untagged = eth(mac2, mac1, 0x0800, ipv4(17, udp(1, 2)))
    net.inject(0x100, 1, tagged)
    net.inject(0x100, 1, untagged)
    net.inject(0x100, 1, tagged_broadcast)
    assert net.nodes[0x200].received[1][3:] == [untagged]


def test_frbs_pass_table_0_whatever_the_rules() -> None:
    net, mac1, mac2 = two_nodes()
    with_policy(net, 0x200, ONLY_IP)  # "rest" would drop ethertype 0xC0C0 if FRBs met the rules
    arp = eth(BCAST, mac1, 0x0806, arp_body(mac1))
    net.inject(0x100, 1, arp)
    assert net.nodes[0x200].received[1] == [arp]


# ---------------------------------------------------------------------- the os-ken adapter


def test_the_app_installs_polls_and_reports_the_policy_and_a_new_one_replaces_it() -> None:
    app, commands, sink, clock = make_app(policy_stats_interval=2.0)
    dp = FakeDatapath(1)
    parser, ofp = dp.ofproto_parser, dp.ofproto
    rules = (PolicyRule("drop", name="no-icmpv6", in_port="members", eth_type=0x86DD, ip_proto=58),
             PolicyRule("drop", eth_type=0x8137))
    commands.attach("red", 1, node_id=100, policy=rules)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    policy_mods = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod) and m.cookie & 0xFFFF_FFFF == POLICY_COOKIE]
    assert sorted((m.cookie >> 32, m.match.get("in_port")) for m in policy_mods) == [(0, 2), (1, None)]
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    (request,) = [m for m in dp.sent if isinstance(m, parser.OFPFlowStatsRequest) and m.table_id == 0]
    assert (request.table_id, request.cookie) == (0, POLICY_COOKIE)

    def stat(rule: int, packets: int) -> object:
        return parser.OFPFlowStats(0, 0, 0, 1, 0, 0, 0, POLICY_COOKIE | rule << 32, packets, 0, parser.OFPMatch(), [])

    reply = FakeMsg(datapath=dp, xid=request.xid, flags=0, body=[stat(0, 3), stat(1, 1)])
    app.flow_stats_reply(FakeEvent(reply))
    (counts,) = [e for e in sink.events if isinstance(e, PolicyCounts)]
    assert [(c.name, c.packets) for c in counts.rules] == [("no-icmpv6", 3), ("rule-2", 1)]
    assert app.overlays["red"].may_have_flows  # a policy reply is not taken for an empty unicast poll
    # A reload without the second rule: its flow is deleted, the first stays as it was.
    dp.sent.clear()
    commands.set_policy("red", rules[:1])
    clock.now += 5
    app.tick(EventTick(periodic=True))
    mods = [m for m in dp.sent if isinstance(m, parser.OFPFlowMod)]
    assert [(m.command, m.priority) for m in mods] == [(ofp.OFPFC_DELETE_STRICT, POLICY_RULE_PRIORITY - 1)]


# ---------------------------------------------------------------------- the config


def test_a_bad_rule_gets_its_json_path_and_what_is_wrong() -> None:
    from evio.config.loader import ConfigError, loads_config

    def problems(rules: object, switching: str = "bounded-flood") -> list[str]:
        text = json.dumps({"overlays": {"ov1": {"signal": {"jid": "a@b.test", "password": "x"},
                                                 "bridge": {"switching": switching}, "policy": rules}}})
        try:
            loads_config(text)
        except ConfigError as err:
            return str(err).splitlines()
        return []

    at = "$.overlays.ov1.policy"
    assert problems([{"action": "allow", "eth_type": "ipv4"}, {"action": "drop"}]) == []
    assert problems([{"action": "deny"}]) == [f'{at}[0].action: "deny" is not one of "allow", "drop"']
    assert problems([{"action": "drop", "eth_type": "ipx"}]) == [
        f'{at}[0].eth_type: "ipx" is not a number or one of ipv4, arp, ipv6']
    assert problems([{"action": "drop"}, {"action": "drop", "dst_port": 80}]) == [
        f'{at}[1].dst_port: needs "ip_proto": "tcp" or "udp"']
    assert problems([{"action": "drop", "eth_type": "arp", "ip_proto": "tcp"}]) == [
        f"{at}[0].ip_proto: needs an IP eth_type (ipv4 or ipv6), or none for both"]
    assert problems([{"action": "drop", "vlan": 4096}]) == [f"{at}[0].vlan: 4096 out of range: must be <= 4095"]
    assert problems([{"action": "drop", "name": "a"}, {"action": "drop", "name": "a"}]) == [
        f"{at}[1].name: 'a' names rule 0 too"]
    assert problems([{"action": "drop"}], switching="stp") == [
        f'{at}: an L2 policy needs "switching": "bounded-flood" (its SDN controller installs the rules); with "stp" '
        "leave it out"]
