"""A named router's unicast RAs and neighbour answers by either of two equal ways, and every other member's in its
name by no way but the router's (decision 0068, amended for review21l L1; no redirect crosses a tunnel, 0075).

Learning places a MAC by one of its root's two flood directions; where both ways are equally short (the node
opposite the router in an even ring), or where Symphony's routes to and from a node differ, a unicast frame from
the router may come by the other. A node takes a unicast RA, or a unicast solicitation or advertisement for a
router's bound address, only by the router's link or its MAC's place; so the router's node floods its hosts'
unicast RAs, and their unicast solicitations and advertisements for link-local
addresses, rooted at itself. Checked over rings of 4 to 8 and Symphony-like graphs of 12 and 16 nodes with every
member as the target and, for the forgeries, every member adjacent to the target as the sender.
"""

from __future__ import annotations

import ipaddress

import pytest

from evio.sdn import frb
from evio.sdn.router_addresses import HEARD_FOR, MAX_HEARD_PER_MEMBER, MAX_HOLD, Claim, RouterAddresses, claim
from evio.sdn.switch_terms import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, symphony_network
from evio.testing.frames import arp_request
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_review21k_router_link_local_taken import RA_SOURCE, advert, neighbor_advert, neighbor_solicit
from tests.unit.sdn.test_sdn_proactive_flows import certify, trusted_ring


def _named_ring(n: int, chords_seed: int | None = None) -> tuple[FakeNetwork, list[int], dict[int, str], int]:
    """A trusted ring of n (or, `chords_seed` given, a Symphony-like graph: a chord per node), ids[0] its router."""
    if chords_seed is None:
        net, ids, macs, _ = trusted_ring(n)
    else:
        net, ids, _ = symphony_network(n, chords_seed, long_distance=1)
        for nid in ids:
            net.inject(nid, 1, arp_request(host_mac(net, nid)))
        Announcer().announce(net, ids)
        macs = certify(net, ids)
        net.advance(0.5)
    router = ids[0]
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({router})
    net.advance(0.0)  # a tick: the router's node installs the flows that bring its hosts' ND to its controller
    net.inject(router, 1, advert(macs[router], macs[router]))  # binds fe80::66 to the router everywhere
    return net, ids, macs, router


def _reached(net: FakeNetwork, frame: bytes, send: object) -> list[int]:
    heard = {n: len(node.received[1]) for n, node in net.nodes.items()}
    send()  # type: ignore[operator]
    return [n for n, node in net.nodes.items() if frame in node.received[1][heard[n]:]]


@pytest.mark.parametrize(("n", "chords_seed"), [(4, None), (5, None), (6, None), (8, None), (12, 0), (12, 1), (16, 2)])
def test_the_named_routers_unicast_ra_and_answer_reach_every_member_by_either_way(
    n: int, chords_seed: int | None
) -> None:
    # With chords, Symphony's routes to and from a node differ: in 3 such graphs of 8-16 nodes, the router's answer
    # to a node's probe came by a port learning did not place its MAC on, or its floods come by, for 5-28 of 66
    # targets, when it rode the flows ahead (0066) instead of being flooded.
    net, ids, macs, r = _named_ring(n, chords_seed)
    for u in ids[1:]:
        ra = frb.parse_mac(macs[u]) + advert(macs[r], macs[r])[6:]
        answer = neighbor_advert(macs[r], macs[u], RA_SOURCE, macs[r], solicited=True)  # to u's NUD probe
        for frame in (ra, answer):
            net.advance(1.0)  # a flood budget's share refills: a router's RAs are a few a minute
            assert u in _reached(net, frame, lambda f=frame: net.inject(r, 1, f)), (ids.index(u), frame[54])
    drops = sum(net.nodes[x].switch.drops[reason] for x in ids
                for reason in (Drop.ROUTER_GUARD, Drop.ROUTER_ADDRESS_SPOOFED))
    assert drops == 0


@pytest.mark.parametrize("n", [4, 5, 6, 8])
def test_no_member_off_the_routers_ways_passes_a_unicast_ra_or_answer_in_its_name(n: int) -> None:
    net, ids, macs, r = _named_ring(n)
    forged_ways = relays = 0
    for u in ids[1:]:
        switch = net.nodes[u].switch
        place = switch.learning.lookup(macs[r], net.now)
        assert place is not None and place.root == r
        for a, port in switch.peer_ports().items():
            if a == r:
                continue
            ra = frb.parse_mac(macs[u]) + advert(macs[r], macs[r])[6:]
            # "The router's address is at the router's MAC, and it is no router": u's kernel would drop its route.
            no_router = neighbor_advert(macs[r], macs[u], RA_SOURCE, macs[r], solicited=False)
            assert no_router[58] & 0x80 == 0  # the router flag clear
            ra_in = _reached(net, ra, lambda f=ra, x=a, t=u: net.from_neighbour(t, x, f))
            na_in = _reached(net, no_router, lambda f=no_router, x=a, t=u: net.from_neighbour(t, x, f))
            if port == place.port:
                relays += 1  # a relay of the router's floods: 0068's residual (it can forge them flooded too)
                continue
            forged_ways += 1
            assert ra_in == [] and na_in == [], (ids.index(u), ids.index(a))
    print(f"ring of {n}: the unicast RA and advertisement of {forged_ways} forgers off the router's place refused, "
          f"{relays} relays left to 0068")
    assert forged_ways > 0


# ---------------------------------------------------------------- what a binding may take (pure, review21l L2)

R, V = 7, 9
MAC_R, MAC_V = "02:00:00:00:00:07", "02:00:00:00:00:09"
OWNERS = {MAC_R: R, MAC_V: V}


def _ra(src: str, lifetime: int = 1800) -> Claim:
    said = claim(advert(MAC_R, MAC_R, src, lifetime))
    assert said is not None
    return said


def test_a_binding_takes_only_a_link_local_source_for_at_most_9000_s() -> None:
    bound = RouterAddresses()
    assert not bound.admit_advert(R, _ra("2001:db8::77"), OWNERS, now=0.0)  # no kernel takes it; some member's
    assert not bound.admit_advert(R, _ra("fd00:7::3"), OWNERS, now=0.0)
    assert bound.admit_advert(R, _ra(RA_SOURCE, lifetime=65535), OWNERS, now=0.0)
    assert bound.bound[ipaddress.IPv6Address(RA_SOURCE)].until == MAX_HOLD == 9000.0


def test_an_address_another_members_mac_spoke_for_or_is_certified_for_is_not_bound() -> None:
    bound = RouterAddresses()
    solicit = claim(neighbor_solicit(MAC_V, "fe80::77", MAC_V))
    assert solicit is not None
    bound.hear(solicit, V, now=0.0)
    assert not bound.admit_advert(R, _ra("fe80::77"), OWNERS, now=HEARD_FOR)
    assert not bound.admit_advert(R, _ra("fe80::78"), OWNERS, now=0.0, certified=MAC_V)
    own = claim(neighbor_solicit(MAC_R, RA_SOURCE, MAC_R))  # the router speaking for its own address: no conflict
    assert own is not None
    bound.hear(own, R, now=0.0)
    assert bound.admit_advert(R, _ra(RA_SOURCE), OWNERS, now=1.0)
    bound.expire(HEARD_FOR + 1.0)
    assert bound.admit_advert(R, _ra("fe80::77"), OWNERS, now=HEARD_FOR + 1.0)  # V silent since: no longer V's


def test_a_member_inventing_addresses_pushes_out_only_its_own() -> None:
    bound = RouterAddresses()
    heard_v = claim(neighbor_solicit(MAC_V, "fe80::77", MAC_V))
    assert heard_v is not None
    bound.hear(heard_v, V, now=0.0)
    mac_a = "02:00:00:00:00:0a"
    for i in range(10 * MAX_HEARD_PER_MEMBER):
        invented = claim(neighbor_solicit(mac_a, f"fe80::a:{i:x}", mac_a))
        assert invented is not None
        bound.hear(invented, 10, now=1.0)
    assert not bound.admit_advert(R, _ra("fe80::77"), OWNERS, now=2.0)
    assert sum(len(macs) for macs in bound._heard.values()) == MAX_HEARD_PER_MEMBER + 1


def test_only_the_routers_node_sends_its_hosts_solicitations_and_advertisements_to_its_controller() -> None:
    net, ids, _, r = _named_ring(4)

    def leaf_nd(nid: int) -> set[tuple[int, int]]:
        return {(e.fields["in_port"], e.fields["icmpv6_type"]) for e in net.nodes[nid].table.entries
                if e.table == 0 and "in_port" in e.fields and "icmpv6_type" in e.fields}

    assert leaf_nd(r) == {(1, 133), (1, 135), (1, 136)}
    assert all(leaf_nd(n) == set() for n in ids if n != r)
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset()
    net.advance(0.0)
    assert leaf_nd(r) == set()
