"""Review21k K7: with a router named in `ipv6_routers`, any member takes the router's link-local address (its RAs'
source, every node's IPv6 next hop) by one flooded neighbour advertisement: the RA guard's purpose undone.

Attack (a hostile member, attacker a): decision 0068 lets RAs through only from the members `ipv6_routers` names,
so that no member becomes "every node's IPv6 router". Router R's RA (from fe80::66) gives every node's kernel
`default via fe80::66`; the next hop is then resolved by neighbour discovery. The ND check of 0068 covers only
*certified* addresses (`neighbor_guard.spoofs_certified`: `certified.get(sender_ip)`), and a router's link-local
address is certified by nothing (0062 names the overlay address). Member A's host floods one unsolicited NA to
ff02::1, override flag, target fe80::66, target link-layer option A's MAC. Every switch passes it (a group frame in
A's own FRBs: no root to check, no certified address named), every kernel overrides its entry for fe80::66: the
default route's next hop is A's MAC, and all IPv6 leaving every node (the underlay's too, where the RA's route is
preferred) goes to A, as in review21i I7 before the guard. Relatedly, `router_allowed` checks an RA's Ethernet
source only, not its source link-layer option: an RA carrying R's MAC and root but A's MAC in the option (a member
relaying R's floods can write one; 0068 says "traffic reaches the router, not the relay") points the kernels'
entry for R at A just the same.

Measured (fake network, 6-node ring, trust mode, real switch logic, ipv6_routers = {R}): R's RA reaches u's
interface (the guard lets the named router by); A's NA for fe80::66 at A's MAC reaches u's interface too, 0 drops.
Checked on this machine's kernel: a namespace's veth that took `default via fe80::66 ... pref high` from the RA,
then sent this very NA, showed `fe80::66 lladdr <A's MAC> STALE`.

Impact: high: the RA guard's threat (one member as every node's IPv6 router) stays open wherever the overlay names
a router, which is when IPv6 routing over the overlay is in use at all.

Suggested fix: hold a named router's RA source addresses (and the addresses in its RAs' options, if any) as bound
to the MACs the router owns (trust: `mac_owners`; learning: its rooted MACs), as certified addresses are: NS/NA
naming them from another MAC, and an RA whose source link-layer option is not a MAC the router owns, are dropped
and counted; with ARP-like flows for the unicast case as the 0068 follow-up plans for certified IPv6.

Fixed (decision 0068, amended for K7; evio/sdn/router_addresses.py): an RA the guard lets by binds its source
address to its router for its lifetime; an RS, NS or NA speaking for a bound address, or an RA's source
link-layer option, with a MAC the router does not hold (trust: its signed announcement's; without: its first RA's)
is dropped and counted (`ROUTER_ADDRESS_SPOOFED`), in FRBs and packet-ins; table 0 sends every NS and NA naming a
bound address to the controller, so none rides a unicast flow past the check.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb
from evio.sdn.router_addresses import MAX_PER_ROUTER, MIN_HOLD, RouterAddresses, claim
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_review21k_nd_behind_extension_header import unsolicited_na
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

RA_SOURCE = "fe80::66"  # the source of router_advertisement(): the next hop of every node's default route
ALL_NODES = "33:33:00:00:00:01"
_SOURCE_LL, _TARGET_LL = 1, 2


def nd_frame(kind: int, eth_src: str, eth_dst: str, src: str, dst: str, body: bytes, option: tuple[int, str]) -> bytes:
    """An ICMPv6 neighbour-discovery frame of type `kind`: `body` after the checksum, one link-layer option."""
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    icmp = bytearray(bytes([kind, 0, 0, 0]) + body + bytes([option[0], 1]) + frb.parse_mac(option[1]))
    data = s + d + struct.pack("!I3xB", len(icmp), 58) + bytes(icmp)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    icmp[2:4] = (~total & 0xFFFF).to_bytes(2, "big")
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 255, s, d)
    return frb.parse_mac(eth_dst) + frb.parse_mac(eth_src) + b"\x86\xdd" + ipv6 + bytes(icmp)


def advert(eth_src: str, lladdr: str, src: str = RA_SOURCE, lifetime: int = 1800) -> bytes:
    """An RA to all nodes from `src`, router lifetime `lifetime`, source link-layer option `lladdr`."""
    return nd_frame(134, eth_src, ALL_NODES, src, "ff02::1", struct.pack("!BBHII", 64, 0, lifetime, 0, 0),
                    (_SOURCE_LL, lladdr))


def neighbor_advert(eth_src: str, eth_dst: str, target: str, lladdr: str, solicited: bool) -> bytes:
    """An NA for `target` at `lladdr` (override; solicited: unicast to `eth_dst`'s owner, fe80::1)."""
    flags = 0x60000000 if solicited else 0x20000000
    dst = "fe80::1" if solicited else "ff02::1"
    return nd_frame(136, eth_src, eth_dst, target, dst, struct.pack("!I16s", flags, ipaddress.IPv6Address(target).packed),
                    (_TARGET_LL, lladdr))


def neighbor_solicit(eth_src: str, src: str, lladdr: str) -> bytes:
    """An NS from `src` (at `lladdr`) for fe80::1, to its solicited-node group."""
    return nd_frame(135, eth_src, "33:33:ff:00:00:01", src, "ff02::1:ff00:1",
                    struct.pack("!I16s", 0, ipaddress.IPv6Address("fe80::1").packed), (_SOURCE_LL, lladdr))


def _spoofed(net: FakeNetwork, ids: list[int]) -> int:
    return sum(net.nodes[n].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] for n in ids)


def _named(net: FakeNetwork, ids: list[int], router: int) -> None:
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({router})
    net.advance(0.0)  # a tick: the router's node installs the flows that bring its hosts' ND to its controller


def test_a_member_cannot_take_the_named_routers_link_local_address() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    _named(net, ids, r)
    heard = len(net.nodes[u].received[1])
    ra = router_advertisement(macs[r])
    net.inject(r, 1, ra)
    assert ra in net.nodes[u].received[1][heard:]  # the named router's RA passes the guard, as it should
    heard = len(net.nodes[u].received[1])
    forged = unsolicited_na(macs[a], RA_SOURCE, with_extension=False)  # "fe80::66 is at A's MAC", override
    net.inject(a, 1, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    drops = _spoofed(net, ids)
    print(f"A's NA for the router's fe80::66 at A's MAC delivered to u's interface: {delivered}, guard drops: {drops}")
    assert not delivered
    assert drops >= 1


def test_a_unicast_advertisement_for_the_routers_address_rides_no_flow_past_the_guard() -> None:
    # The flows ahead (0066) join A's certified MAC and u's interface: A's NA to u would ride one, 0 packet-ins.
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    _named(net, ids, r)
    net.inject(r, 1, advert(macs[r], macs[r]))
    ins = net.nodes[u].packet_ins
    heard = len(net.nodes[u].received[1])
    forged = neighbor_advert(macs[a], macs[u], RA_SOURCE, macs[a], solicited=True)
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].packet_ins == ins + 1  # table 0 sent it to u's controller, which dropped it
    assert net.nodes[u].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] == 1
    assert net.nodes[u].switch.port_drops[(net.nodes[u].switch.ports[net.port_towards(u, a)].name,
                                           Drop.ROUTER_ADDRESS_SPOOFED)] == 1


def test_an_advertisement_for_the_routers_address_in_a_vlan_is_dropped_too() -> None:
    # A host's VLAN device takes the tagged frame as its own: the guard reads past one tag, as table 0 matches.
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    _named(net, ids, r)
    net.inject(r, 1, advert(macs[r], macs[r]))
    heard = len(net.nodes[u].received[1])
    for solicited, dst in ((False, ALL_NODES), (True, macs[u])):
        plain = neighbor_advert(macs[a], dst, RA_SOURCE, macs[a], solicited=solicited)
        tagged = plain[:12] + b"\x81\x00\x00\x2a" + plain[12:]
        net.inject(a, 1, tagged)
        assert tagged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] == 2


def test_a_solicitation_from_the_routers_address_at_another_mac_is_dropped() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    _named(net, ids, r)
    net.inject(r, 1, advert(macs[r], macs[r]))
    heard = len(net.nodes[u].received[1])
    forged = neighbor_solicit(macs[a], RA_SOURCE, macs[a])
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    assert _spoofed(net, ids) >= 1


def test_a_relay_cannot_pass_the_routers_advertisement_with_its_own_mac_in_the_option() -> None:
    # A is on the arc from R to u (R's floods come round by successors): its copy of R's flood is plausible; the
    # Ethernet source is R's, the option A's.
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[5], ids[3]
    _named(net, ids, r)
    forged = advert(macs[r], macs[a])
    heard = len(net.nodes[u].received[1])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    assert forged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] == 1
    assert net.nodes[u].switch.drops[Drop.ROUTER_GUARD] == 0  # the guard of 0068 alone let it by
    honest = advert(macs[r], macs[r])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(honest, root_nid=r, bound_nid=r, hop_count=2)))
    assert honest in net.nodes[u].received[1][heard:]


def test_the_routers_own_advertisement_solicitation_and_answers_still_reach_every_node() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)
    others = [n for n in ids if n != r]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    ra = advert(macs[r], macs[r])
    net.inject(r, 1, ra)
    assert all(ra in net.nodes[n].received[1][heard[n]:] for n in others)
    ns = neighbor_solicit(macs[r], RA_SOURCE, macs[r])
    na = neighbor_advert(macs[r], ALL_NODES, RA_SOURCE, macs[r], solicited=False)
    net.inject(r, 1, ns)
    net.inject(r, 1, na)
    assert all(ns in net.nodes[n].received[1][heard[n]:] and na in net.nodes[n].received[1][heard[n]:]
               for n in others)
    answer = neighbor_advert(macs[r], macs[u], RA_SOURCE, macs[r], solicited=True)  # to u's NUD probe
    net.inject(r, 1, answer)
    assert answer in net.nodes[u].received[1][heard[u]:]
    net.inject(r, 1, answer)  # again: the guard flow sends it to the controller each time, which lets it by
    assert net.nodes[u].received[1][heard[u]:].count(answer) == 2
    assert _spoofed(net, ids) == 0


def test_the_routers_address_is_guarded_by_flows_in_table_0() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)
    net.inject(r, 1, advert(macs[r], macs[r]))
    guarded = {(e.fields.get("icmpv6_type"), e.fields.get("ipv6_src") or e.fields.get("ipv6_nd_target"))
               for e in net.nodes[u].table.entries if e.table == 0}
    assert {(133, RA_SOURCE), (135, RA_SOURCE), (136, RA_SOURCE)} <= guarded


def test_without_trust_the_address_is_bound_to_the_mac_of_the_routers_first_advertisement() -> None:
    net, ids = ring_network(6)
    u, a, r = ids[0], ids[5], ids[3]
    _named(net, ids, r)
    mac_r, mac_a = host_mac(net, r), host_mac(net, a)
    heard = len(net.nodes[u].received[1])
    ra = advert(mac_r, mac_r)
    net.inject(r, 1, ra)
    assert ra in net.nodes[u].received[1][heard:]
    forged = unsolicited_na(mac_a, RA_SOURCE, with_extension=False)
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    na = neighbor_advert(mac_r, ALL_NODES, RA_SOURCE, mac_r, solicited=False)
    net.inject(r, 1, na)
    assert na in net.nodes[u].received[1][heard:]
    # A relay's RA with R's root and address but its own MAC is refused now the address is bound.
    relayed = advert(mac_a, mac_a)
    net.from_neighbour(u, a, frb.pack(frb.broadcast(relayed, root_nid=r, bound_nid=r, hop_count=2)))
    assert relayed not in net.nodes[u].received[1][heard:]


# ---------------------------------------------------------------- the binding itself (pure)

R, R2 = 7, 8
MAC_R, MAC_A = "02:00:00:00:00:07", "02:00:00:00:00:0a"


def _ra(src: str = RA_SOURCE, eth_src: str = MAC_R, lladdr: str = MAC_R, lifetime: int = 1800):  # type: ignore[no-untyped-def]
    said = claim(advert(eth_src, lladdr, src, lifetime))
    assert said is not None
    return said


def test_a_binding_lasts_the_routers_lifetime_and_then_goes_with_its_flows() -> None:
    bound = RouterAddresses()
    assert bound.admit_advert(R, _ra(lifetime=1800), {MAC_R: R}, now=0.0)
    assert len(bound.flows()) == 3 and not bound.changed  # RS and NS from it, NA for it (probes: review21s 1's flow)
    na = claim(neighbor_advert(MAC_A, ALL_NODES, RA_SOURCE, MAC_A, solicited=False))
    assert na is not None
    assert bound.spoofs(na, {MAC_R: R, MAC_A: 9}, now=1799.0)
    bound.expire(1801.0)
    assert bound.changed and not bound.flows()
    assert not bound.spoofs(na, {MAC_R: R, MAC_A: 9}, now=1801.0)
    assert bound.admit_advert(R, _ra(lifetime=0), {MAC_R: R}, now=2000.0)  # lifetime 0: held MIN_HOLD all the same
    assert bound.spoofs(na, {MAC_R: R, MAC_A: 9}, now=2000.0 + MIN_HOLD - 1)


def test_a_router_binds_a_bounded_number_of_addresses_and_none_of_another_routers() -> None:
    bound = RouterAddresses()
    owners = {MAC_R: R, MAC_A: R2}
    for i in range(MAX_PER_ROUTER):
        assert bound.admit_advert(R, _ra(src=f"fe80::{i + 1}"), owners, now=0.0)
    assert not bound.admit_advert(R, _ra(src="fe80::99"), owners, now=0.0)  # a relay's forgeries stop here
    assert bound.admit_advert(R, _ra(src="fe80::1"), owners, now=1.0)  # a bound one is refreshed
    assert not bound.admit_advert(R2, _ra(src="fe80::1", eth_src=MAC_A, lladdr=MAC_A), owners, now=1.0)
    assert not bound.admit_advert(R, _ra(src="fe80::1", lladdr=MAC_A), owners, now=1.0)  # A's MAC in the option
