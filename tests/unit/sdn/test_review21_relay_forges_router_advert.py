"""Issue 21, decision 0068's first accepted limit: a relay of a named router's floods forges the router's RA content.

Attack (trust mode, `ipv6_routers` names R, hostile member A on the arc from R to u, so R's floods come to u by A):
FRBs are not signed, so A writes an RA with R's root, R's MAC in the Ethernet header and the source link-layer
option, and R's source address (everything the RA guard and the address binding judge, 0068 and its K7 amendment)
but content of its own: router lifetime 0 (RFC 4861 6.3.4: the kernel drops its default route through R, a denial
of IPv6 routing at every node behind A), or an on-link prefix 2000::/3 (the kernel then resolves every global
destination by neighbour discovery on the overlay, which guards only certified addresses). Measured on main (fake
network, 6-node ring, real switch logic and flows): both forgeries reached u's interface, 0 drops.

Second (medium): a router whose link-local address is neither made from its MAC nor named in
`ipv6_router_addresses` (fe80::66): a member that spoke for it first kept R's RAs from binding it, hence from every
node (0068's review21p amendment, "still open").

Fixed (decision 0081, `evio/sdn/router_adverts.py`): R's node floods a statement signed with its certificate's key
ahead of each RA from its leaf ports (R's MAC, the RA's source, a digest of its ICMPv6 message, the issue time); a
node delivers an RA in R's name from a tunnel port only when the newest fresh statement held for its (MAC, source)
names its digest, holding one a while for its statement, then dropping it (`ROUTER_ADVERT_UNVOUCHED`). A vouched
RA binds its source over a squatter's word.
"""

from __future__ import annotations

import ipaddress
import struct
import time

from evio.sdn import frb, router_adverts
from evio.sdn.router_adverts import FRESH, HOLD, RouterAdverts
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, sign_router_adverts
from tests.unit.sdn.test_review21k_router_link_local_taken import (
    ALL_NODES,
    RA_SOURCE,
    _named,
    advert,
    nd_frame,
    neighbor_solicit,
)
from tests.unit.sdn.test_review21p_router_address_squat import eui64_link_local
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def advert_with_prefix(mac: str, prefix: str, src: str = RA_SOURCE) -> bytes:
    """An RA from `mac` (and its option) announcing `prefix` on-link (L flag), router lifetime 1800."""
    net = ipaddress.IPv6Network(prefix)
    option = struct.pack("!BBBBIII16s", 3, 4, net.prefixlen, 0x80, 86400, 14400, 0, net.network_address.packed)
    body = struct.pack("!BBHII", 64, 0, 1800, 0, 0) + option
    return nd_frame(134, mac, ALL_NODES, src, "ff02::1", body, (1, mac))


def _fleet(signed: bool = True) -> tuple[FakeNetwork, list[int], dict[int, str], int, int, int]:
    """A trusted 6-ring naming R (ids[3]), with u (ids[0]) behind relay A (ids[5]) on the arc from R."""
    net, ids, macs, _ = trusted_ring(6)
    _named(net, ids, ids[3])
    if signed:
        sign_router_adverts(net, ids)
    return net, ids, macs, ids[0], ids[5], ids[3]


def _adverts(net: FakeNetwork, node: int) -> RouterAdverts:
    found = net.nodes[node].switch.router_adverts
    assert found is not None
    return found


def _relayed(net: FakeNetwork, u: int, a: int, r: int, frame: bytes) -> bool:
    """A's copy of a flood of `frame` rooted at R reaches u: whether u's interface got `frame`."""
    heard = len(net.nodes[u].received[1])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(frame, root_nid=r, bound_nid=r, hop_count=2)))
    return frame in net.nodes[u].received[1][heard:]


def _reached(net: FakeNetwork, ids: list[int], r: int, frame: bytes) -> list[int]:
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    net.inject(r, 1, frame)
    return [n for n in ids if n != r and frame in net.nodes[n].received[1][heard[n]:]]


def test_a_relay_cannot_take_every_nodes_default_route_with_a_lifetime_0_advert() -> None:
    for signed in (False, True):
        net, ids, macs, u, a, r = _fleet(signed)
        assert len(_reached(net, ids, r, advert(macs[r], macs[r]))) == 5  # R's own, its first among them
        net.advance(30.0)
        forged = advert(macs[r], macs[r], lifetime=0)
        delivered = _relayed(net, u, a, r, forged)
        net.advance(HOLD + 0.5)
        drops = net.nodes[u].switch.drops[Drop.ROUTER_ADVERT_UNVOUCHED]
        print(f"signed={signed}: relay's lifetime-0 RA in R's name delivered to u: {delivered}, unvouched drops {drops}")
        assert delivered == (not signed)
        assert drops == (1 if signed else 0)


def test_a_relay_cannot_announce_a_bogus_on_link_prefix_in_the_routers_name() -> None:
    for signed in (False, True):
        net, ids, macs, u, a, r = _fleet(signed)
        assert len(_reached(net, ids, r, advert_with_prefix(macs[r], "2001:db8:66::/64"))) == 5
        forged = advert_with_prefix(macs[r], "2000::/3")
        delivered = _relayed(net, u, a, r, forged)
        print(f"signed={signed}: relay's RA with on-link 2000::/3 in R's name delivered to u: {delivered}")
        assert delivered == (not signed)


def test_the_routers_own_adverts_reach_every_node_its_first_and_a_changed_one_included() -> None:
    net, ids, macs, u, a, r = _fleet()
    for ra in (advert(macs[r], macs[r]), advert_with_prefix(macs[r], "2001:db8:66::/64"),
               advert(macs[r], macs[r], lifetime=0)):  # R's own lifetime 0 (its shutdown) reaches everyone too
        assert len(_reached(net, ids, r, ra)) == 5
        net.advance(1.0)
    assert sum(net.nodes[n].switch.drops[Drop.ROUTER_ADVERT_UNVOUCHED] for n in ids) == 0
    assert sum(net.nodes[n].switch.drops[Drop.ROUTER_STATEMENT_REFUSED] for n in ids) == 0
    # Each node checked each statement once (it comes once per flood) and vouched once per RA.
    assert all(_adverts(net, n).counts["taken"] == 3 for n in ids if n != r)
    assert _adverts(net, r).counts["signed"] == 3


def test_an_advert_before_its_statement_is_held_and_goes_when_the_statement_comes() -> None:
    net, ids, macs, u, a, r = _fleet()
    ra = advert(macs[r], macs[r])
    statement = _adverts(net, r).statement(r, ra)
    assert statement is not None
    assert not _relayed(net, u, a, r, ra)  # held: the statement is still to come
    heard = len(net.nodes[u].received[1])
    net.from_neighbour(u, a, frb.pack(frb.broadcast(statement, root_nid=r, bound_nid=r, hop_count=2)))
    assert ra in net.nodes[u].received[1][heard:]
    assert statement not in net.nodes[u].received[1]  # the switches' word: never delivered to a leaf
    net.advance(HOLD + 0.5)
    assert net.nodes[u].switch.drops[Drop.ROUTER_ADVERT_UNVOUCHED] == 0


def test_a_replayed_older_statement_does_not_bring_back_an_advert_the_router_no_longer_sends() -> None:
    net, ids, macs, u, a, r = _fleet()
    old = advert(macs[r], macs[r])
    old_statement = _adverts(net, r).statement(r, old)
    assert old_statement is not None
    assert len(_reached(net, ids, r, old)) == 5
    net.advance(1.0)
    assert len(_reached(net, ids, r, advert(macs[r], macs[r], lifetime=0))) == 5  # R goes away
    for wait in (0.0, FRESH + 1.0):  # within the statements' freshness (older than the held one) and past it
        net.advance(wait)
        refused = net.nodes[u].switch.drops[Drop.ROUTER_STATEMENT_REFUSED]
        net.from_neighbour(u, a, frb.pack(frb.broadcast(old_statement, root_nid=r, bound_nid=r, hop_count=2)))
        assert net.nodes[u].switch.drops[Drop.ROUTER_STATEMENT_REFUSED] == refused + 1
        assert not _relayed(net, u, a, r, old)
    counts = _adverts(net, u).counts
    assert counts["refused_not_newer"] == 1 and counts["refused_stale"] == 1


def test_a_statement_forged_by_the_relay_is_refused_and_not_passed_on() -> None:
    net, ids, macs, u, a, r = _fleet()
    forged = advert(macs[r], macs[r], lifetime=0)
    # A signs with its own key, in R's name and flood: the signature is not R's.
    signed_by_a = _adverts(net, a).statement(r, forged)
    assert signed_by_a is not None
    sent = net.frames_on_tunnels
    net.from_neighbour(u, a, frb.pack(frb.broadcast(signed_by_a, root_nid=r, bound_nid=r, hop_count=2)))
    assert net.frames_on_tunnels == sent  # not passed on
    assert _adverts(net, u).counts["refused_signature"] == 1
    assert not _relayed(net, u, a, r, forged)
    # A's statement in its own flood naming R's MAC: not A's flood to name R, nor A named.
    own_flood = _adverts(net, a).statement(a, forged)
    assert own_flood is not None
    net.from_neighbour(u, a, frb.pack(frb.broadcast(own_flood, root_nid=a, bound_nid=a, hop_count=1)))
    assert _adverts(net, u).counts["refused_not_named"] == 1


def test_a_router_address_squatted_first_is_bound_when_named_not_because_it_vouches() -> None:
    # fe80::66: neither made from R's MAC nor, at first, named. A spoke for it first. A signed statement does not
    # override that: a member using an address of its own would look the same (review21t 1); named, it binds.
    for signed, named in ((False, False), (True, False), (True, True)):
        net, ids, macs, u, a, r = _fleet(signed)
        if named:
            for nid in ids:
                net.nodes[nid].switch.router_addresses.named = {ipaddress.IPv6Address(RA_SOURCE): r}
        squat = neighbor_solicit(macs[a], RA_SOURCE, macs[a])
        net.inject(a, 1, squat)
        net.advance(10.0)
        reached = _reached(net, ids, r, advert(macs[r], macs[r]))
        print(f"signed={signed} named={named}: R's RA from a squatted fe80::66 reached {len(reached)} of 5 others")
        assert len(reached) == (5 if named else 0)
        if named:
            heard = len(net.nodes[u].received[1])
            net.inject(a, 1, squat)  # the squat again, now that the address is bound to R
            assert squat not in net.nodes[u].received[1][heard:]


def test_a_router_on_a_hosts_leaf_port_vouches_for_its_adverts_too() -> None:
    net, ids, macs, u, a, r = _fleet()
    gateway = "02:00:00:00:66:01"
    port = net.add_leaf(r, "gw", hw_addr=gateway)
    owners = {m: n for n, m in macs.items()} | {gateway: r}
    net.tell_owners(owners)
    net.advance(1.0)
    ra = advert_with_prefix(gateway, "2001:db8:67::/64", src=eui64_link_local(gateway))
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    net.inject(r, port, ra)
    assert [n for n in ids if n != r and ra in net.nodes[n].received[1][heard[n]:]] == [n for n in ids if n != r]
    forged = advert_with_prefix(gateway, "2000::/3", src=eui64_link_local(gateway))
    assert not _relayed(net, u, a, r, forged)


def test_the_cost_of_checking_a_statement() -> None:
    net, ids, macs, u, a, r = _fleet()
    ra = advert(macs[r], macs[r])
    signer, checker = _adverts(net, r), _adverts(net, u)
    rounds = 200
    statements = []
    began = time.perf_counter()
    for _ in range(rounds):
        statements.append(signer.statement(r, ra))
    signed = (time.perf_counter() - began) / rounds
    began = time.perf_counter()
    for i, statement in enumerate(statements):
        assert statement is not None
        checker.take(statement, r, 1, frozenset({r}), net.nodes[u].switch.mac_owners, float(i))
        assert checker.vouched(r, ra, float(i))
    checked = (time.perf_counter() - began) / rounds
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"statement signed in {signed * 1e6:.0f} us, checked and an RA vouched in {checked * 1e6:.0f} us "
          f"(load {load})")
    assert router_adverts.advert_of(ra) is not None
