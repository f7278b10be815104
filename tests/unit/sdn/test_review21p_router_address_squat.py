"""Review21p (decision 0068, "still open" of the review21l amendment): a member that keeps speaking for the named
router's link-local address from its own MAC keeps the router's RAs from binding it, hence from reaching the kernel,
at every node that has not bound it yet.

Attack (trust mode, `ipv6_routers` names R, hostile member A, any position): R's link-local address is known before
R ever advertises: a kernel makes it from the interface's MAC (modified EUI-64, RFC 4291 appendix A; Linux's
default `addr_gen_mode` 0, which the bridge interface evio creates keeps), and R's MACs are in its signed
announcement (0055), which every member holds. A's host floods a neighbour solicitation from that address, at A's
own MAC, once every `HEARD_FOR` (300 s). Code path: `BoundedFloodSwitch.guard_allows` lets it by (nothing is bound
yet, no certified address is named) and `RouterAddresses.hear` records the address as spoken for by A's MAC at every
node; R's first RA then reaches each node's `_router_address_allowed` -> `RouterAddresses.admit_advert`, which
refuses to bind an address a MAC the router does not hold spoke for (review21l L2's fix), so the RA is dropped as
`ROUTER_ADDRESS_SPOOFED` where it is first refused (R's two neighbours: a refused FRB is not passed on), and so
reaches no other node.

Impact: medium: a denial of IPv6 routing (no default route, no SLAAC) through the named router at every node that
had not bound its address yet (all of them at the router's start, and any node joining or restarting later), held
for as long as A keeps speaking, one frame each 300 s; the drops are counted against R's port, not A's.
A relay of R's floods did the same by another way: it filled R's `MAX_PER_ROUTER` (4) bindings with forged RAs from
other addresses in R's name, and R's true one was then refused (0068's K7 amendment, "still open").

Fixed (decision 0068, amended for review21p; evio/sdn/router_addresses.py `derived_from`): a link-local address whose
interface identifier is the modified EUI-64 of a MAC a named router holds is that router's from the start: its RA
from it binds whatever another member's MAC said of it and whatever else is bound in the router's name, and a
solicitation or advertisement speaking for it from a MAC the router does not hold is dropped as
`ROUTER_ADDRESS_SPOOFED` before any RA (so it is never heard either). Nor does a router's RA bind an address made
from a MAC another member holds (review21l L2 for a victim quiet for 300 s).
"""

from __future__ import annotations

import ipaddress

from evio.sdn import frb
from evio.sdn.boundary import AttachOverlay
from evio.sdn.overlay_switch import OverlaySwitch
from evio.sdn.router_addresses import HEARD_FOR, MAX_PER_ROUTER, Claim, RouterAddresses, claim
from evio.sdn.switch import Drop
from tests.unit.sdn.test_review21k_router_link_local_taken import RA_SOURCE, _named, advert, neighbor_solicit
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def claim_of(frame: bytes) -> Claim:
    said = claim(frame)
    assert said is not None
    return said


def eui64_link_local(mac: str) -> str:
    """The link-local address a kernel makes from `mac` (modified EUI-64, RFC 4291 appendix A)."""
    octets = bytearray(frb.parse_mac(mac))
    octets[0] ^= 0x02
    return str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + octets[:3] + b"\xff\xfe" + octets[3:]))


def test_a_member_speaking_for_the_routers_address_keeps_no_node_from_binding_it() -> None:
    net, ids, macs, _ = trusted_ring(6)
    r, a = ids[3], ids[1]
    _named(net, ids, r)
    address = eui64_link_local(macs[r])
    squat = neighbor_solicit(macs[a], address, macs[a])  # from R's address, at A's own MAC
    others = [n for n in ids if n != r]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    for _ in range(3):  # once within each HEARD_FOR: the claim never lapses
        net.inject(a, 1, squat)
        net.advance(HEARD_FOR - 50.0)
    assert not any(squat in net.nodes[n].received[1][heard[n]:] for n in ids if n != a)  # refused by A's neighbours
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    ra = advert(macs[r], macs[r], src=address)
    net.inject(r, 1, ra)
    reached = [n for n in others if ra in net.nodes[n].received[1][heard[n]:]]
    spoofed = sum(net.nodes[n].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] for n in ids)
    print(f"R's RA from its own EUI-64 address reached {len(reached)} of {len(others)} other nodes; "
          f"ROUTER_ADDRESS_SPOOFED {spoofed}")
    assert reached == others
    assert all(address in map(str, net.nodes[n].switch.router_addresses.bound) for n in others)


def test_a_relay_filling_the_routers_bindings_keeps_its_true_address_bindable() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, r, a = ids[0], ids[3], ids[5]  # A is on the arc from R to u: its copies of R's floods are plausible
    _named(net, ids, r)
    for i in range(MAX_PER_ROUTER):
        forged = advert(macs[r], macs[r], src=f"fe80::bad:{i}")
        net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    heard = len(net.nodes[u].received[1])
    ra = advert(macs[r], macs[r], src=eui64_link_local(macs[r]))
    net.inject(r, 1, ra)
    assert ra in net.nodes[u].received[1][heard:]


def test_a_relays_ra_does_not_take_a_quiet_members_address_made_from_its_mac() -> None:
    # Review21l L2's residual: V spoke for its address more than HEARD_FOR ago, so nothing at u says it is V's but
    # the address itself, made from V's MAC.
    net, ids, macs, _ = trusted_ring(6)
    u, v, r, a = ids[0], ids[2], ids[3], ids[5]
    _named(net, ids, r)
    victim = eui64_link_local(macs[v])
    solicit = neighbor_solicit(macs[v], victim, macs[v])
    net.inject(v, 1, solicit)
    net.advance(HEARD_FOR + 10.0)
    forged = advert(macs[r], macs[r], src=victim, lifetime=9000)
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    assert victim not in map(str, net.nodes[u].switch.router_addresses.bound)
    heard = len(net.nodes[u].received[1])
    net.inject(v, 1, solicit)
    assert solicit in net.nodes[u].received[1][heard:]


def test_before_any_ra_a_members_claim_for_the_routers_address_is_dropped() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    _named(net, ids, r)
    heard = len(net.nodes[u].received[1])
    squat = neighbor_solicit(macs[a], eui64_link_local(macs[r]), macs[a])
    net.inject(a, 1, squat)
    assert squat not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] >= 1
    own = neighbor_solicit(macs[r], eui64_link_local(macs[r]), macs[r])  # R's own, before its first RA
    net.inject(r, 1, own)
    assert own in net.nodes[u].received[1][heard:]


def test_an_address_the_config_names_for_the_router_is_its_from_the_start() -> None:
    # A router whose link-local address is not made from its MAC (RFC 7217, a configured fe80::66): without the
    # config naming it, the squat holds (0068's limit); named (`ipv6_router_addresses`), it does not.
    for named in (False, True):
        net, ids, macs, _ = trusted_ring(6)
        r, a = ids[3], ids[1]
        _named(net, ids, r)
        if named:
            for nid in ids:
                net.nodes[nid].switch.router_addresses.named = {ipaddress.IPv6Address(RA_SOURCE): r}
        net.inject(a, 1, neighbor_solicit(macs[a], RA_SOURCE, macs[a]))
        net.advance(HEARD_FOR - 50.0)
        others = [n for n in ids if n != r]
        heard = {n: len(net.nodes[n].received[1]) for n in ids}
        ra = advert(macs[r], macs[r])
        net.inject(r, 1, ra)
        reached = [n for n in others if ra in net.nodes[n].received[1][heard[n]:]]
        assert reached == (others if named else [])


def test_an_address_named_or_made_for_one_router_binds_to_no_other() -> None:
    mac_r, mac_a = "02:00:00:00:00:07", "02:00:00:00:00:0a"
    owners = {mac_r: 7, mac_a: 8}
    fresh = RouterAddresses()
    fresh.named = {ipaddress.IPv6Address(RA_SOURCE): 7}
    assert not fresh.admit_advert(8, claim_of(advert(mac_a, mac_a)), owners, now=0.0)
    assert not fresh.admit_advert(8, claim_of(advert(mac_a, mac_a, src=eui64_link_local(mac_r))), owners, now=0.0)
    assert fresh.admit_advert(7, claim_of(advert(mac_r, mac_r)), owners, now=0.0)
    assert set(map(str, fresh.bound)) == {RA_SOURCE}
    assert not RouterAddresses().spoofs(claim_of(neighbor_solicit(mac_a, RA_SOURCE, mac_a)), owners, 0.0, frozenset({7}))
    assert fresh.spoofs(claim_of(neighbor_solicit(mac_a, eui64_link_local(mac_r), mac_a)), owners, 0.0, frozenset({7}))


def test_the_config_s_addresses_reach_the_switch() -> None:
    pinned = ipaddress.IPv6Address("fe80::1")
    attached = OverlaySwitch(AttachOverlay("ov1", datapath_id=1, node_id=5, ipv6_routers=(7,),
                                           ipv6_router_addresses=((7, pinned),)))
    assert attached.switch.router_addresses.named == {pinned: 7}
