"""Certified IPv6 addresses guarded in table 0, router solicitations judged, redirects from tunnels dropped (decision
0075, review21m M1-M3): what the fix keeps working and the ways around it the review did not name.

The attacks themselves are in `test_review21m_*.py`; here: an advertisement whose link-layer option comes twice
(Open vSwitch then reads no target, Linux takes the first option), the owner's own solicitation and
advertisement (delivered, one packet-in per switch: no pass flow), the flows' count and bound, and a named
router's own redirect.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb, neighbor_guard
from evio.sdn.flow_actions import AddGuardFlow
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, _lladdr_doubled
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_review21k_router_link_local_taken import _SOURCE_LL, _TARGET_LL, _named, advert, nd_frame
from tests.unit.sdn.test_review21m_relayed_redirect import HOST, redirect
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(6)
    _certify_v6(net, ids, macs)  # V = ids[2] is fd00::3
    net.advance(0.5)
    return net, ids, macs


def _option(kind: int, mac: str) -> bytes:
    return bytes([kind, 1]) + frb.parse_mac(mac)


def _na_two_options(eth_src: str, eth_dst: str, target: str, first: str, second: str) -> bytes:
    """A solicited override NA for `target` with two target link-layer options (`nd_frame` writes the second)."""
    body = struct.pack("!I16s", 0x60000000, ipaddress.IPv6Address(target).packed) + _option(_TARGET_LL, first)
    return nd_frame(136, eth_src, eth_dst, target, "fe80::1", body, (_TARGET_LL, second))


def test_an_advertisement_whose_option_comes_twice_is_judged_by_the_first_as_linux_reads_it() -> None:
    # OVS reads no target of it (lib/flow.c: a second link-layer option of a type voids the ND fields), so the flow by
    # target misses it; Linux takes the first option: A's MAC. The flow for unread targets brings it to the guard.
    net, ids, macs = _setup()
    u, a, v = ids[0], ids[1], ids[2]
    heard = len(net.nodes[u].received[1])
    ins = net.nodes[u].packet_ins
    forged = _na_two_options(macs[a], macs[u], V6.format(3), macs[a], macs[v])
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].packet_ins - ins == 1
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] == 1


def test_the_fake_table_reads_a_doubled_option_as_open_vswitch_does() -> None:
    a, v = "02:00:00:00:00:0a", "02:00:00:00:00:03"
    assert not _lladdr_doubled(_option(_TARGET_LL, a))
    assert _lladdr_doubled(_option(_TARGET_LL, a) + _option(_TARGET_LL, v))
    assert _lladdr_doubled(_option(_TARGET_LL, a) + _option(_TARGET_LL, "00:00:00:00:00:00"))
    assert not _lladdr_doubled(_option(_TARGET_LL, "00:00:00:00:00:00") + _option(_TARGET_LL, v))  # zero: none read
    assert not _lladdr_doubled(_option(_SOURCE_LL, a) + _option(_TARGET_LL, v))


def test_the_owners_own_unicast_solicitation_and_advertisement_reach_u_at_a_packet_in_each() -> None:
    net, ids, macs = _setup()
    u, v = ids[0], ids[2]
    body = struct.pack("!I16s", 0, ipaddress.IPv6Address(V6.format(1)).packed)
    ns = nd_frame(135, macs[v], macs[u], V6.format(3), V6.format(1), body, (_SOURCE_LL, macs[v]))
    body = struct.pack("!I16s", 0x60000000, ipaddress.IPv6Address(V6.format(3)).packed)
    na = nd_frame(136, macs[v], macs[u], V6.format(3), V6.format(1), body, (_TARGET_LL, macs[v]))
    for frame in (ns, na):
        heard = len(net.nodes[u].received[1])
        ins = net.nodes[u].packet_ins
        net.inject(v, 1, frame)
        assert frame in net.nodes[u].received[1][heard:]
        print(f"V's own ICMPv6 {frame[54]} to u: packet-ins at u {net.nodes[u].packet_ins - ins}")
        assert net.nodes[u].packet_ins - ins == 1
    assert sum(net.nodes[n].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] for n in ids) == 0


def test_three_flows_per_certified_ipv6_address_bounded_like_ipv4() -> None:
    mac = "02:00:00:00:00:03"
    certified = {ipaddress.ip_address(f"fd00::{i:x}"): mac for i in range(1, neighbor_guard.MAX_GUARDED + 11)}
    certified[ipaddress.IPv4Address("10.0.0.3")] = mac
    flows = neighbor_guard.guard_flows(certified)
    # RA, redirect, IPv4 redirect, unread NA target, every DAD probe (one flow for all targets: review21s 1; it was
    # one per certified address, 0076); ARP; IPv6: RS, NS by source, NA by target
    assert len(flows) == 5 + 2 + 3 * neighbor_guard.MAX_GUARDED
    assert AddGuardFlow((("eth_type", 0x86DD), ("ip_proto", 58), ("icmpv6_type", 136), ("ipv6_nd_target", "fd00::1")),
                        to_switching=False) in flows
    assert AddGuardFlow((("eth_type", 0x86DD), ("ip_proto", 58), ("icmpv6_type", 135), ("ipv6_src", "::")),
                        to_switching=False) in flows
    # This node's own certified address, beyond the bound too: its advertisements, which fail its DAD
    # (`fails_owners_dad`; its probes come by the flow above); not its solicitations (the node's own outgoing ones
    # would each cost a packet-in here).
    own = neighbor_guard.guard_flows(certified, own=[ipaddress.IPv6Address("fd00::ffff")]) - flows
    assert own == {AddGuardFlow((("eth_type", 0x86DD), ("ip_proto", 58), ("icmpv6_type", 136),
                                 ("ipv6_nd_target", "fd00::ffff")), to_switching=False)}
    assert not any(f.to_switching for f in flows if ("eth_type", 0x86DD) in f.fields)  # no pass flow (0075)


def test_a_named_routers_own_redirect_reaches_no_attached_host() -> None:
    # Decision 0075: no redirect crosses the overlay, the named router's own neither (its hosts still reach what
    # it would redirect them to, by it).
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)
    host = net.add_leaf(u, "host", hw_addr=HOST)
    net.inject(u, host, frb.parse_mac("ff:ff:ff:ff:ff:ff") + frb.parse_mac(HOST) + b"\x88\xb5" + bytes(46))
    net.inject(r, 1, advert(macs[r], macs[r]))
    own = redirect(macs[r], HOST, "2001:db8::1", macs[r])
    heard = len(net.nodes[u].received[host])
    net.inject(r, 1, own)
    assert own not in net.nodes[u].received[host][heard:]
    assert sum(net.nodes[n].switch.drops[Drop.ROUTER_GUARD] for n in ids) == 1  # at the first switch on its way
