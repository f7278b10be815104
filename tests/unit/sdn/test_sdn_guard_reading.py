"""A tunnel port's frames read as the receiving kernel reads them, or refused (decision 0068, amended for review21k
K1-K3 and K6): VLAN tags, ARP hardware types, ND behind extension headers and in fragments, in a fake network with the
real switch logic and its flows; and what attached ports and honest members keep."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb, neighbor_guard
from evio.sdn.l2policy import frame_fields
from evio.sdn.openflow_messages import GUARD_COOKIE
from evio.sdn.switch_terms import Drop
from evio.testing.fake_flow_table import FakeNetwork, _packet_fields, host_mac, ring_network
from tests.unit.sdn.test_review21i_certified_address_spoofed import arp
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_review21k_arp_hardware_type_6 import arp as arp_of_type
from tests.unit.sdn.test_review21k_nd_behind_extension_header import unsolicited_na
from tests.unit.sdn.test_sdn_proactive_flows import packet_ins, trusted_ring


def tagged(frame: bytes, *vlans: int, tpid: int = 0x8100) -> bytes:
    return frame[:12] + b"".join(struct.pack("!HH", tpid, vlan) for vlan in vlans) + frame[12:]


def unreadable(net: FakeNetwork) -> int:
    return sum(node.switch.drops[Drop.UNREADABLE_FRAME] for node in net.nodes.values())


def delivered(net: FakeNetwork, node: int, frame: bytes, heard: int) -> bool:
    return frame in net.nodes[node].received[1][heard:]


def fragmented(frame: bytes) -> bytes:
    """`frame` (IPv6) with its payload behind a fragment header: offset 0, no more fragments (an atomic fragment)."""
    ip = bytearray(frame[14:54])
    next_header = ip[6]
    ip[6] = 44
    ip[4:6] = (len(frame) - 54 + 8).to_bytes(2, "big")
    return frame[:14] + bytes(ip) + bytes([next_header, 0, 0, 0, 0, 0, 0, 7]) + frame[54:]


# ---------------------------------------------------------------------- the reading


def test_the_guards_read_one_tag_of_a_vlan_and_refuse_priority_tags_second_tags_and_arp_they_cannot_read() -> None:
    plain = arp("ff:ff:ff:ff:ff:ff", "02:00:00:00:00:0a", 1, "10.7.0.2", "00:00:00:00:00:00", "10.7.0.3")
    assert neighbor_guard.as_received(plain) == plain
    assert neighbor_guard.as_received(tagged(plain, 42)) == plain  # a host's VLAN device takes it: judged so
    assert neighbor_guard.as_received(tagged(plain, 42, tpid=0x88A8)) == plain
    assert neighbor_guard.as_received(tagged(plain, 0x2000 | 42)) == plain  # a priority in PCP, VLAN 42
    for refused in (tagged(plain, 0), tagged(plain, 0x2000), tagged(plain, 0, 0, 0), tagged(plain, 42, 0),
                    tagged(plain, 10, 42), tagged(plain, 0, tpid=0x88A8), plain[:12] + b"\x81\x00\x00"):
        assert neighbor_guard.as_received(refused) is None
    ieee802 = arp_of_type("ff:ff:ff:ff:ff:ff", "02:00:00:00:00:0a", 1, "10.7.0.2", "00:00:00:00:00:00", "10.7.0.3", 6)
    assert neighbor_guard.as_received(ieee802) == ieee802  # Linux takes it: the guard reads it (K3)
    for htype in (24, 32, 0x6161):
        assert neighbor_guard.as_received(plain[:14] + htype.to_bytes(2, "big") + plain[16:]) is None
    assert neighbor_guard.as_received(plain[:20] + b"\x00\x03" + plain[22:]) is None  # an op no kernel acts on
    assert neighbor_guard.as_received(plain[:41]) is None


def test_open_vswitch_reads_one_tag_and_no_arp_field_of_another_hardware_type_as_the_fake_table_does() -> None:
    # What `ovs-appctl ofproto/trace` showed on OVS 3.1 (vlan-limit 1) for these frames: the decision's Measured.
    syn = bytes(6) + bytes(5) + b"\x01" + b"\x08\x00" + bytes(46)
    assert frame_fields(tagged(syn, 0, 0, 0)).eth_type == 0x8100  # type: ignore[union-attr]
    assert _packet_fields(5, tagged(syn, 42, 7))["eth_type"] == 0x8100
    assert _packet_fields(5, tagged(syn, 42))["vlan_vid"] == 0x1000 | 42
    assert _packet_fields(5, tagged(syn, 0))["vlan_vid"] == 0x1000
    ieee802 = arp_of_type("ff:ff:ff:ff:ff:ff", "02:00:00:00:00:0a", 1, "10.7.0.3", "00:00:00:00:00:00", "10.7.0.3", 6)
    fields = _packet_fields(5, ieee802)
    assert (fields["arp_op"], fields["arp_spa"], fields["arp_sha"]) == (0, "0.0.0.0", "00:00:00:00:00:00")
    fields = _packet_fields(5, tagged(ieee802[:14] + b"\x00\x01" + ieee802[16:], 42))  # htype 1, past a tag
    assert (fields["arp_op"], fields["arp_spa"]) == (1, "10.7.0.3")
    na = unsolicited_na("02:00:00:00:00:0a", "fd00::3", with_extension=True)
    assert _packet_fields(5, na)["icmpv6_type"] == 136
    assert _packet_fields(5, fragmented(router_advertisement("02:00:00:00:00:0a")))["icmpv6_type"] == 134


# ---------------------------------------------------------------------- K1/K2: tags from tunnel ports


@pytest.mark.parametrize("vlans", [(0,), (0, 0, 0), (42, 0), (10, 42)], ids=["priority", "3 priority", "42+0", "10+42"])
def test_a_members_unicast_riding_a_flow_is_dropped_and_counted_behind_a_priority_or_second_tag(
        vlans: tuple[int, ...]) -> None:  # fmt: skip
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    frame = struct.pack("!6s6sH", frb.parse_mac(macs[u]), frb.parse_mac(macs[a]), 0x0800) + bytes(46)
    heard, asked = len(net.nodes[u].received[1]), packet_ins(net)[u]
    net.from_neighbour(u, a, frame)  # the honest frame rides the flow installed ahead (0066): no packet-in
    assert delivered(net, u, frame, heard) and packet_ins(net)[u] == asked
    net.from_neighbour(u, a, tagged(frame, *vlans))
    assert not delivered(net, u, tagged(frame, *vlans), heard)
    assert packet_ins(net)[u] == asked + 1  # table 0 sent it to the controller, past the flow
    assert net.nodes[u].switch.drops[Drop.UNREADABLE_FRAME] == 1
    name = net.nodes[u].switch.ports[net.port_towards(u, a)].name
    assert net.nodes[u].switch.port_drops[(name, Drop.UNREADABLE_FRAME)] == 1


def test_a_vlan_tagged_router_advertisement_or_forged_arp_is_judged_as_an_untagged_one() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    ra = tagged(router_advertisement(macs[a]), 42)
    net.inject(a, 1, ra)
    forged = tagged(arp(macs[u], macs[a], 2, "10.7.0.3", macs[u], "10.7.0.1"), 42)  # V's address at A's MAC
    net.from_neighbour(u, a, forged)
    assert not delivered(net, u, ra, heard) and not delivered(net, u, forged, heard)
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 1
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] == 1
    assert unreadable(net) == 0


def test_an_attached_trunks_tagged_frames_still_cross_and_a_leaf_keeps_its_priority_tags_locally() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    trunk = net.add_leaf(a, "trunk0")  # an attached port carrying VLANs (decision 0046)
    heard = len(net.nodes[u].received[1])
    tagged_arp = tagged(arp("ff:ff:ff:ff:ff:ff", "02:00:00:00:99:01", 1, "192.168.42.5", "00:00:00:00:00:00",
                            "192.168.42.1"), 42)  # fmt: skip
    net.inject(a, trunk, tagged_arp)  # flooded in FRBs, read through its tag: nothing certified in VLAN 42
    unicast = tagged(struct.pack("!6s6sH", frb.parse_mac(macs[u]), frb.parse_mac("02:00:00:00:99:01"), 0x0800)
                     + bytes(46), 42)  # fmt: skip
    net.inject(a, trunk, unicast)
    net.inject(a, trunk, unicast)  # the second by the flows the first installed
    assert delivered(net, u, tagged_arp, heard)
    assert net.nodes[u].received[1][heard:].count(unicast) == 2
    assert unreadable(net) == 0
    # A priority-tagged frame stays the leaf ports' business at its own node: delivered there, refused past a tunnel.
    other = net.add_leaf(a, "vm0")
    priority = tagged(arp("ff:ff:ff:ff:ff:ff", "02:00:00:00:99:01", 1, "10.7.0.9", "00:00:00:00:00:00",
                          "10.7.0.9"), 0)  # fmt: skip
    net.inject(a, trunk, priority)
    assert priority in net.nodes[a].received[other]
    assert not delivered(net, u, priority, heard)
    assert unreadable(net) == 2  # at a's two neighbours, where the FRB came in: not passed on


# ---------------------------------------------------------------------- K3: ARP hardware types


def test_a_members_true_arp_of_hardware_type_6_still_arrives_by_the_controller_and_junk_arp_is_dropped() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    heard, asked = len(net.nodes[u].received[1]), packet_ins(net)[u]
    true_reply = arp_of_type(macs[u], macs[a], 2, "10.7.0.2", macs[u], "10.7.0.1", 6)  # A's own certified address
    net.from_neighbour(u, a, true_reply)
    assert delivered(net, u, true_reply, heard)
    assert packet_ins(net)[u] == asked + 1  # OVS reads no field of it: the controller judged it
    for htype in (24, 0x6161):  # FreeBSD takes 24 (FireWire) on Ethernet; neither is Ethernet/IPv4 to Linux or OVS
        junk = true_reply[:14] + htype.to_bytes(2, "big") + true_reply[16:]
        net.from_neighbour(u, a, junk)
        assert not delivered(net, u, junk, heard)
    assert net.nodes[u].switch.drops[Drop.UNREADABLE_FRAME] == 2
    true_untyped = arp(macs[u], macs[a], 2, "10.7.0.2", macs[u], "10.7.0.1")
    asked = packet_ins(net)[u]
    net.from_neighbour(u, a, true_untyped)
    assert delivered(net, u, true_untyped, heard) and packet_ins(net)[u] == asked  # type 1 still rides the flows


# ---------------------------------------------------------------------- K6: ND behind extension headers


def test_an_advertisement_in_a_fragment_is_dropped_and_the_owners_behind_an_extension_header_passes() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, v = ids[0], ids[2]
    v6 = ipaddress.IPv6Address("fd00::3")
    for node in net.nodes.values():
        node.switch.neighbors.certified[v6] = macs[v]
    heard = len(net.nodes[u].received[1])
    own = unsolicited_na(macs[v], str(v6), with_extension=True)  # V's own, behind destination options
    net.inject(v, 1, own)
    assert delivered(net, u, own, heard)
    in_fragment = fragmented(unsolicited_na(macs[v], str(v6), with_extension=False))  # RFC 6980: never taken
    net.inject(v, 1, in_fragment)
    assert not delivered(net, u, in_fragment, heard)
    assert unreadable(net) == 2  # at V's two neighbours: not passed on
    malformed = own[:21] + b"\x40" + own[22:]  # hop limit 64: no kernel takes it, and the guard cannot read it
    net.inject(v, 1, malformed)
    assert not delivered(net, u, malformed, heard)
    assert unreadable(net) == 4


def test_a_router_advertisement_in_a_first_fragment_is_dropped_even_from_a_named_router() -> None:
    net, ids = ring_network(4)
    router = ids[1]
    for node in net.nodes.values():
        node.switch.ipv6_routers = frozenset({router})
    heard = {n: len(node.received[1]) for n, node in net.nodes.items()}
    ra = fragmented(router_advertisement(host_mac(net, router)))
    net.inject(router, 1, ra)
    assert [n for n in ids if n != router and delivered(net, n, ra, heard[n])] == []
    assert unreadable(net) == 2


# ---------------------------------------------------------------------- the flows


def test_each_tunnel_port_has_four_guard_flows_that_go_with_it() -> None:
    net, ids = ring_network(3)
    node = net.nodes[ids[0]]

    def guards() -> list[dict[str, int]]:
        return [f.fields for f in node.table.entries if f.cookie == GUARD_COOKIE and "in_port" in f.fields]

    tunnels = sorted(net.port_towards(ids[0], other) for other in ids[1:])
    assert sorted({f["in_port"] for f in guards()}) == tunnels  # installed with the port, before any tick
    assert len(guards()) == 4 * len(tunnels)
    assert all(f.priority == 2502 for f in node.table.entries if f.cookie == GUARD_COOKIE and "in_port" in f.fields)
    net.disconnect(ids[0], ids[1])
    assert sorted({f["in_port"] for f in guards()}) == [net.port_towards(ids[0], ids[2])]
