"""Review21r: any member fails the named IPv6 router's link-local address with one duplicate address detection probe,
so the router sends no RA (decisions 0068 review21p and 0076 leave the router's link-local address out of the DAD
guard).

Attack (trust mode, `ipv6_routers` names R; the router is a host on R's leaf port, its link-local address made from
its MAC, modified EUI-64, as review21p says every member can compute; hostile member A, any position): the router's
kernel runs DAD on that address each time its interface comes up (a reboot, a link flap, R's site switch
restarting): tentative for about a second, and it floods its own probe (an NS from :: for the address), which
every member sees. A, on seeing it (or blindly, twice a second), floods its own probe for the same target from its
own MAC. Code path: A's flood -> `BoundedFloodSwitch.guard_allows`: `router_addresses.claim` reads an NS's
*source* (::), so `RouterAddresses.spoofs` (review21p's check 4, "known to be the router's before any frame")
finds no router address; `neighbor_guard.fails_owners_dad` (0076) judges only certified addresses and this node's
own, and a router's link-local address is neither -> delivered to R's leaf port, where Linux fails the router's
DAD (RFC 4862 5.4.3, as 0076 measured on this host's kernel for a global address; the same code path for a
link-local one): `dadfailed`, the address is never used. An RA must come from a link-local source (RFC 4861 6.1.2):
radvd and the kernel send none without one. review21p closed the NA for the same tentative address (`spoofs` by
target), not the probe.

Impact: medium (as review21p's squat it closes: a denial of IPv6 routing, no default route nor SLAAC, through the
named router at every node, by any member, one frame per restart of the router's interface), until the router's
interface is reset by hand and the next reset meets the next probe.

Suggested fix: judge a probe (NS from ::) for an address `RouterAddresses.owner()` or a binding says is a router's
as `fails_owners_dad` judges one for a certified address: delivered only as that router's own flood (rooted at
it, from a MAC it holds), and its table-0 flow by target (`ipv6_src=::, ipv6_nd_target=<address>`) for the
named and bound addresses, so that unicast ones are judged too.

Fixed (decision 0068, amended for review21r; `RouterAddresses.fails_dad`, check 5): a probe for a bound address or
a named router's own (the config's, or made from its interface MACs) passes only as the router's own flood, rooted
at it and from a MAC it holds, and at the router's node none from a tunnel passes, nor an advertisement of its own;
table 0 brings each probe for such an address to the controller by its target (a unicast one rode a flow ahead),
counted as `ROUTER_ADDRESS_SPOOFED`.
"""

from __future__ import annotations

import pytest

from evio.sdn import frb, neighbor_guard
from evio.sdn.switch import Drop
from evio.testing.frames import dad_probe
from tests.unit.sdn.test_review21k_router_link_local_taken import _named, advert
from tests.unit.sdn.test_review21p_router_address_squat import eui64_link_local
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


@pytest.mark.parametrize("bound", [False, True], ids=["first-start", "restart-after-its-ra-bound"])

def test_a_members_dad_probe_for_the_routers_link_local_address_does_not_reach_the_router(bound: bool) -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, r = ids[0], ids[3]
    _named(net, ids, r)
    address = eui64_link_local(macs[r])  # the router's, from its MAC (review21p: R's from the start)
    if bound:  # the router advertised before (its address bound at every node), then its interface came up again
        net.inject(r, 1, advert(macs[r], macs[r], src=address))
        assert all(address in map(str, net.nodes[n].switch.router_addresses.bound) for n in ids if n != r)
    heard = len(net.nodes[r].received[1])
    probe = dad_probe(macs[a], address)
    net.inject(a, 1, probe)  # A's own interface floods it: A's MAC, A's root
    delivered = probe in net.nodes[r].received[1][heard:]
    print(f"A's DAD probe for the router's {address} delivered to the router's port: {delivered}")
    assert not delivered


def test_the_routers_own_dad_probe_still_goes_out() -> None:
    """What a fix must keep: the router's own probe reaches the others."""
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)
    heard = len(net.nodes[u].received[1])
    probe = dad_probe(macs[r], eui64_link_local(macs[r]))
    net.inject(r, 1, probe)
    assert probe in net.nodes[u].received[1][heard:]


@pytest.mark.parametrize("where", [2, 0], ids=["routers-neighbour", "two-hops"])
def test_a_unicast_probe_to_the_routers_mac_is_brought_to_the_guard_by_its_target(where: int) -> None:
    # Ethernet to R's MAC, IPv6 to the solicited-node group: R's kernel takes it as a probe. Without a flow by target
    # it rode 0072's `eth_dst=<R's MAC>` flow to R's interface with no packet-in.
    net, ids, macs, _ = trusted_ring(6)
    a, r = ids[where], ids[3]  # ids[2] has a tunnel to R, ids[0] none
    _named(net, ids, r)
    unicast = frb.parse_mac(macs[r]) + dad_probe(macs[a], eui64_link_local(macs[r]))[6:]
    heard = len(net.nodes[r].received[1])
    net.inject(a, 1, unicast)
    drops = sum(net.nodes[n].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] for n in ids)
    print(f"A's unicast probe delivered to the router's port: {unicast in net.nodes[r].received[1][heard:]}, "
          f"ROUTER_ADDRESS_SPOOFED {drops}")
    assert unicast not in net.nodes[r].received[1][heard:]
    assert drops == 1  # at the first switch after A's


def test_a_neighbours_unicast_advertisement_of_the_routers_address_is_judged_at_the_routers_node() -> None:
    # Linux fails DAD on any NA for a tentative address (RFC 4862 5.4.4). The router's node binds none of its own
    # addresses (its RAs come by a leaf port), so no flow by target brought A's unicast NA to its controller: it rode
    # the flow ahead to R's MAC, past check 2.
    from tests.unit.sdn.test_review21k_router_link_local_taken import neighbor_advert

    net, ids, macs, _ = trusted_ring(6)
    a, r = ids[2], ids[3]  # A has a tunnel to R
    _named(net, ids, r)
    forged = neighbor_advert(macs[a], macs[r], eui64_link_local(macs[r]), macs[a], solicited=False)
    heard, ins = len(net.nodes[r].received[1]), net.nodes[r].packet_ins
    net.inject(a, 1, forged)
    assert forged not in net.nodes[r].received[1][heard:]
    assert net.nodes[r].packet_ins - ins == 1
    assert net.nodes[r].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] == 1


def test_the_router_address_flows_a_switch_holds() -> None:
    # What check 5 adds to table 0 (decision 0068, review21r): at the router's node an advertisement flow per own
    # address; a bound address has three. Probes for either come by `neighbor_guard.DAD_PROBE_FLOW`, one flow for
    # every target (review21s 1: it was a probe flow per own and bound address here).
    net, ids, macs, _ = trusted_ring(6)
    u, r = ids[0], ids[3]
    _named(net, ids, r)

    def router_flows(node: int) -> int:
        return len(net.nodes[node].switch.router_addresses.flows(node))

    assert (router_flows(u), router_flows(r)) == (0, 1)
    net.inject(r, 1, advert(macs[r], macs[r], src=eui64_link_local(macs[r])))
    assert (router_flows(u), router_flows(r)) == (3, 1)
    assert all(neighbor_guard.DAD_PROBE_FLOW in net.nodes[n].switch._guards for n in (u, r))
