"""Review21k K1: a priority tag (802.1Q, VLAN id 0) carries a rogue router advertisement, and ARP for another
member's certified address, past the RA and ARP guards (decision 0068) to every node's interface.

Attack (a hostile member, attacker a): the guards read the frame's EtherType at bytes 12-13 only
(`neighbor_guard.icmpv6_type`: `frame[12:14] != b"\\x86\\xdd"` -> not a router message; `switch.guard_allows`:
`data[12:14] in (ARP, IPv6)` before it parses a neighbour message). Member A's host sends review21i I7's RA (to
ff02::1, lifetime 1800 s, preference high, an autoconf prefix) or I3's ARP ("V's certified 10.7.0.3 is at A's MAC")
with one 802.1Q tag of VLAN id 0 (a priority tag) inserted after the MACs. The switch floods the RA as FRBs like
any broadcast; every receiver's `guard_allows` looks at the inner frame, sees EtherType 0x8100, and passes it to
its leaf ports, the bridge's own interface among them. Linux treats a VLAN-0 tag as "priority only": with no VLAN
device it clears the tag and delivers the frame as untagged (`__netif_receive_skb_core`: only a non-zero VLAN id
makes the frame PACKET_OTHERHOST), so the kernel takes A as its IPv6 default router (and an address in A's
prefix), or V's address at A's MAC: I7 and I3 again, with one field changed. The table-0 guard flows do not help:
OVS matches `eth_type`, `icmpv6_type` and `arp_spa` past a VLAN tag, so real OVS sends the frame to the controller,
which then passes it; a tagged unicast ARP reply to a node's MAC likewise.

Measured (fake network, real switch logic): the tagged RA reaches the interfaces of 5 of 5 other nodes in a
6-node ring with 0 ROUTER_GUARD drops (the untagged one: 0 of 5); the tagged forged ARP (broadcast, and unicast
to u's MAC) reaches u's interface with 0 CERTIFIED_ADDRESS_SPOOFED drops. Checked on this machine's kernel: a
namespace's veth (accept_ra 1) sent this very tagged RA took `default via fe80::66 proto ra metric 1024 pref high`
and the address 2001:db8:66:0:<eui64>/64, as with the untagged one; behind three VLAN-0 tags the same.

Impact: high. Any member redirects every other node's IPv6 traffic (the underlay's too) into the overlay to
itself, or a member's IPv4 traffic at one node, exactly what 0068 was written to stop.

Suggested fix: drop frames with a VLAN-0 tag from tunnel ports (the kernel strips any number of them, so reading
through "up to two" tags is not enough: see K2), and read the frame through every VLAN tag (0x8100, 0x88a8) in
`neighbor_guard.icmpv6_type` and in `guard_allows`/`neighbor_answers.parse`, so a tagged RA/ARP is judged like an
untagged one (a host behind an attached port may have VLAN devices, so a non-zero VLAN id matters there too). Add the tag cases to
`tests/unit/sdn/test_sdn_neighbor_guard.py` and to the fake flow table's `_guard_fields` (it reads `arp_spa` at
untagged offsets).
"""

from __future__ import annotations

import ipaddress

import pytest

from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from tests.unit.sdn.test_review21i_certified_address_spoofed import arp
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

PRIORITY_TAG = b"\x81\x00\x00\x00"  # 802.1Q, PCP 0, VLAN id 0: "priority only", delivered by Linux as untagged


def priority_tagged(frame: bytes, tags: int = 1) -> bytes:
    return frame[:12] + PRIORITY_TAG * tags + frame[12:]


def _drops(net: FakeNetwork, ids: list[int], reason: Drop) -> int:
    return sum(net.nodes[n].switch.drops[reason] for n in ids)


@pytest.mark.parametrize("tags", [1, 3])  # Linux strips any number of VLAN-0 tags; a fix reading two is not enough
def test_a_priority_tagged_router_advertisement_does_not_reach_other_nodes_interfaces(tags: int) -> None:
    net, ids = ring_network(6)
    a = ids[3]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    ra = priority_tagged(router_advertisement(host_mac(net, a)), tags)
    net.inject(a, 1, ra)
    reached = [n for n in ids if n != a and ra in net.nodes[n].received[1][heard[n]:]]
    print(f"A's RA behind {tags} tag(s) reached the interfaces of {len(reached)} of {len(ids) - 1} other nodes, "
          f"ROUTER_GUARD drops: {_drops(net, ids, Drop.ROUTER_GUARD)}")
    assert not reached


@pytest.mark.parametrize("how", ["flooded", "unicast"])
def test_a_priority_tagged_arp_for_a_certified_address_does_not_reach_the_interface(how: str) -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, v = ids[0], ids[1], ids[2]
    assert net.nodes[u].switch.neighbors.certified[ipaddress.IPv4Address("10.7.0.3")] == macs[v]
    heard = len(net.nodes[u].received[1])
    if how == "flooded":  # a gratuitous reply to all from A's host, carried in A's FRBs
        forged = priority_tagged(arp("ff:ff:ff:ff:ff:ff", macs[a], 2, "10.7.0.3", "ff:ff:ff:ff:ff:ff", "10.7.0.3"))
        net.inject(a, 1, forged)
    else:  # a reply to u's interface over A's tunnel
        forged = priority_tagged(arp(macs[u], macs[a], 2, "10.7.0.3", macs[u], "10.7.0.1"))
        net.from_neighbour(u, a, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    print(f"tagged forged ARP ({how}) delivered to u's interface: {delivered}, "
          f"CERTIFIED_ADDRESS_SPOOFED drops: {_drops(net, ids, Drop.CERTIFIED_ADDRESS_SPOOFED)}")
    assert not delivered
