"""The RA and ARP guards (decision 0068, evio/sdn/neighbor_guard.py) in a fake network with the real switch logic
and its flows: what passes, what is dropped, what is counted, and what the flows cost."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb, neighbor_guard
from evio.sdn.openflow_messages import GUARD_COOKIE
from evio.sdn.switch_terms import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import icmp_redirect
from tests.unit.sdn.test_review21i_certified_address_spoofed import arp
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_sdn_neighbor_answers import ndp
from tests.unit.sdn.test_sdn_proactive_flows import packet_ins, trusted_ring


def name_router(net: FakeNetwork, router: int) -> None:
    for node in net.nodes.values():
        node.switch.ipv6_routers = frozenset({router})
    net.advance(0.0)  # a tick: the router's node installs the flows that bring its hosts' ND to its controller


def reached(net: FakeNetwork, frame: bytes, heard: dict[int, int]) -> list[int]:
    return [n for n, node in net.nodes.items() if frame in node.received[1][heard[n]:]]


def heard(net: FakeNetwork) -> dict[int, int]:
    return {n: len(node.received[1]) for n, node in net.nodes.items()}


def unicast(frame: bytes, dst: str) -> bytes:
    return frb.parse_mac(dst) + frame[6:]


def redirect(src_mac: str, dst_mac: str) -> bytes:
    """An ICMPv6 redirect (137): "reach 2001:db8::1 by fe80::66" (the checksum is not read on the way)."""
    body = struct.pack("!BBHI16s16s", 137, 0, 0, 0, ipaddress.IPv6Address("fe80::66").packed,
                       ipaddress.IPv6Address("2001:db8::1").packed)  # fmt: skip
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(body), 58, 255, ipaddress.IPv6Address("fe80::66").packed,
                       ipaddress.IPv6Address("fe80::1").packed)  # fmt: skip
    return frb.parse_mac(dst_mac) + frb.parse_mac(src_mac) + b"\x86\xdd" + ipv6 + body


def test_a_named_routers_advertisement_reaches_every_node_and_an_unnamed_ones_none_counted() -> None:
    net, ids = ring_network(6)
    router, rogue = ids[1], ids[3]
    name_router(net, router)
    before = heard(net)
    ra = router_advertisement(host_mac(net, router))
    net.inject(router, 1, ra)
    assert sorted(reached(net, ra, before)) == sorted(n for n in ids if n != router)  # SLAAC works (issue 23)
    before = heard(net)
    rogue_ra = router_advertisement(host_mac(net, rogue))
    net.inject(rogue, 1, rogue_ra)
    assert reached(net, rogue_ra, before) == []
    # Dropped by the rogue's neighbours, not passed on: two drops in a ring, none further.
    assert sum(node.switch.drops[Drop.ROUTER_GUARD] for node in net.nodes.values()) == 2


def test_in_trust_mode_a_member_cannot_pass_its_advertisement_off_as_the_named_routers() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, router = ids[0], ids[3], ids[2]  # the router's floods come to u through A: a plausible root
    name_router(net, router)
    before = heard(net)
    # A floods its own RA under the router's id as root: the MAC is A's (signed announcement), not the router's.
    forged = frb.pack(frb.broadcast(router_advertisement(macs[a]), root_nid=router, bound_nid=router, hop_count=2))
    net.from_neighbour(u, a, forged)
    assert reached(net, router_advertisement(macs[a]), before) == []
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 1


@pytest.mark.parametrize("kind", ["advertisement", "redirect", "advertisement behind a hop-by-hop header"])
def test_a_unicast_advertisement_or_redirect_riding_a_flow_is_stopped(kind: str) -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    if kind == "redirect":
        frame = redirect(macs[a], macs[u])
    else:
        frame = unicast(router_advertisement(macs[a]), macs[u])
        if kind != "advertisement":  # next header 0, then an 8-byte hop-by-hop header leading to ICMPv6 (RFC 7113)
            ip = bytearray(frame[14:54])
            ip[6] = 0
            ip[4:6] = (len(frame) - 54 + 8).to_bytes(2, "big")
            frame = frame[:14] + bytes(ip) + bytes([58, 0]) + b"\x01\x04\x00\x00\x00\x00" + frame[54:]
    assert neighbor_guard.is_router_message(frame)
    before, asked = heard(net), packet_ins(net)[u]
    net.from_neighbour(u, a, frame)
    assert reached(net, frame, before) == []
    assert packet_ins(net)[u] == asked + 1  # table 0 sent it to the controller, past the flow installed ahead
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 1


def ipv4_redirect(src_mac: str, dst_mac: str) -> bytes:
    """"From 10.7.0.5 (a gateway member): for 192.168.50.7, use 10.7.0.2 (the sender)", to u at 10.7.0.1."""
    return icmp_redirect(dst_mac, src_mac, "10.7.0.5", "10.7.0.1", "192.168.50.7", "10.7.0.2")


def tagged(frame: bytes, vlan: int) -> bytes:
    return frame[:12] + b"\x81\x00" + vlan.to_bytes(2, "big") + frame[12:]


@pytest.mark.parametrize("kind", ["unicast", "unicast in VLAN 42", "first fragment"])
def test_an_ipv4_redirect_from_a_member_riding_a_flow_is_stopped_and_counted(kind: str) -> None:
    """review21l L5: whatever the host's sysctls say (`all` 1, forwarding off: the kernel takes it), no interface
    behind the switch is given a member's ICMP redirect; table 0 sends it past the flows installed ahead."""
    net, ids, macs, _ = trusted_ring(4)
    u, a = ids[0], ids[1]
    frame = ipv4_redirect(macs[a], macs[u])
    if kind == "first fragment":  # more fragments: the kernel reassembles it, then takes it
        frame = frame[:20] + b"\x20\x00" + frame[22:]
    elif kind != "unicast":
        frame = tagged(frame, 42)
    before, asked = heard(net), packet_ins(net)[u]
    net.from_neighbour(u, a, frame)
    assert reached(net, frame, before) == []
    assert packet_ins(net)[u] == asked + 1
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 1
    assert sum(n for (_, reason), n in net.nodes[u].switch.port_drops.items() if reason is Drop.ROUTER_GUARD) == 1


def test_an_ipv4_redirect_flooded_by_a_members_host_reaches_no_node_and_other_icmp_rides_the_flows() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a = ids[1]
    before = heard(net)
    flooded = ipv4_redirect(macs[a], "ff:ff:ff:ff:ff:ff")  # the kernel takes an L2 broadcast addressed to it by IP
    net.inject(a, 1, flooded)
    assert reached(net, flooded, before) == []
    assert sum(node.switch.drops[Drop.ROUTER_GUARD] for node in net.nodes.values()) == 2  # A's two neighbours
    # An echo request (type 8), and a later fragment of anything (no ICMP header in it), from A to u: flows only.
    u = ids[0]
    echo = bytearray(ipv4_redirect(macs[a], macs[u]))
    echo[34] = 8
    later = ipv4_redirect(macs[a], macs[u])
    later = later[:20] + b"\x00\x02" + later[22:]
    for frame in (bytes(echo), later):
        before, asked = heard(net), packet_ins(net)[u]
        net.from_neighbour(u, a, frame)
        assert reached(net, frame, before) == [u]
        assert packet_ins(net)[u] == asked


def test_the_true_pairs_arp_still_rides_the_flows_and_a_spoofed_flood_is_dropped() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, v = ids[0], ids[1], ids[2]
    before, asked = heard(net), packet_ins(net)[u]
    true_reply = arp(macs[u], macs[a], 2, "10.7.0.2", macs[u], "10.7.0.1")  # A's own certified address
    net.from_neighbour(u, a, true_reply)
    assert reached(net, true_reply, before) == [u]
    assert packet_ins(net)[u] == asked  # no packet-in for a member's true ARP
    # A gratuitous ARP flooded by A naming V's address: no interface takes it, and it goes no further.
    before = heard(net)
    garp = arp("ff:ff:ff:ff:ff:ff", macs[a], 1, "10.7.0.3", "00:00:00:00:00:00", "10.7.0.3")
    net.from_neighbour(u, a, frb.pack(frb.broadcast(garp, root_nid=a, bound_nid=a, hop_count=1)))
    assert reached(net, garp, before) == []
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] == 1
    assert v not in reached(net, garp, before)


def test_a_neighbour_advertisement_for_a_certified_ipv6_address_with_another_mac_is_dropped() -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, v = ids[0], ids[3], ids[2]  # V's floods come to u through A
    v6 = ipaddress.IPv6Address("fd00:7::3")
    net.nodes[u].switch.neighbors.certified[v6] = macs[v]
    before = heard(net)
    na = ndp(136, macs[a], v6, ipaddress.IPv6Address("ff02::1"), v6, flags=0x20000000, option_mac=macs[a])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(na, root_nid=a, bound_nid=a, hop_count=1)))
    assert reached(net, na, before) == []
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] == 1
    # V's own advertisement passes.
    own = ndp(136, macs[v], v6, ipaddress.IPv6Address("ff02::1"), v6, flags=0x20000000, option_mac=macs[v])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(own, root_nid=v, bound_nid=v, hop_count=2)))
    assert u in reached(net, own, before)


def test_the_guards_flows_are_three_plus_two_per_certified_ipv4_address_and_follow_the_certificates() -> None:
    net, ids, _, _ = trusted_ring(4)
    node = net.nodes[ids[0]]

    def guards() -> int:
        return sum(1 for f in node.table.entries if f.cookie == GUARD_COOKIE)

    # RA and redirect, the IPv4 redirect (review21l L5), an NA whose target OVS does not read (0075) and every DAD
    # probe (review21s 1); the three others' addresses; four for each of its two tunnel ports (review21k K1-K3); an NA
    # of an address made from each of the bridge's two own MACs (the switch's and its internal port's: review21s 1);
    # the signed documents' unicasts for its interface (decision 0043, amended for review21r's residual)
    assert guards() == 5 + 2 * 3 + 4 * 2 + 2 + 1
    node.switch.neighbors.certified = {}
    net.advance(0.5)
    assert guards() == 5 + 4 * 2 + 2 + 1
