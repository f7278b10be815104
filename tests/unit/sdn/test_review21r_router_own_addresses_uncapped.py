"""Review21r: the cap on a router's bound link-local addresses (`MAX_PER_ROUTER`, 4) does not hold for addresses
made from the router's MACs (review21p), and a router's signed announcement holds up to 1,024 MACs: a relay forging
RAs in the router's name binds one address per MAC at every switch past it, each three table-0 flows to the
controller, for up to `MAX_HOLD` (2.5 h) each.

Attack (trust mode, `ipv6_routers` names R, R a site gateway whose signed host list names its LAN's MACs, up to
`MAX_MACS` x `MAX_PAGES` = 1,024; hostile member A on the arc from R, as in review21p's relay test): for each MAC m
that R's announcement holds, A sends an FRB rooted at R carrying an RA with Ethernet source m, source link-layer
option m, source address fe80::EUI-64(m) and router lifetime 65535. Code path: `BoundedFloodSwitch.guard_allows` ->
`_router_address_allowed` -> `RouterAddresses.admit_advert`: `owner()` says the address is R's (`made_by`: m is R's),
so `own` is true, the heard speakers are skipped, and `MAX_PER_ROUTER` is not asked: each RA binds a new address.
`flows()` then makes three table-0 flows (RS and NS by source, NA by target) per binding.

Impact: medium (an unbounded-by-the-cap resource under a condition: a named router hosting many MACs): at every
switch that takes A's copies, up to 1,024 bindings and 3,072 table-0 flows in R's name where review21p meant at most
4 forged ones (the decision says the router's own bypass the cap, not that a router has a thousand own); and every
neighbour message any of R's LAN hosts sends from its own link-local address becomes a packet-in at each such
switch (a bound address's RS, NS and NA go to the controller), for 2.5 h after A's last RA. A cannot bind a MAC R
does not hold, so the bound is R's host count, not A's choice.

Suggested fix: the cap counts the router's own addresses too, with its own small allowance (e.g. the config's named
addresses plus those made from the MACs of R's *own* interfaces, not every host its announcement lists: a host on
R's leaf ports is not R's router), or `made_by` looks only at the router's bridge MAC(s) (the kernel's address of
the router's interface), not at every MAC its announcement holds.
"""

from __future__ import annotations

import ipaddress

import pytest

from evio.sdn import frb
from evio.sdn.router_addresses import MAX_PER_ROUTER, RouterAddresses
from tests.unit.sdn.test_review21k_router_link_local_taken import advert
from tests.unit.sdn.test_review21p_router_address_squat import claim_of, eui64_link_local

R = 7
HOSTS = 256  # MACs R's signed list holds (four pages): a site gateway's LAN


@pytest.mark.xfail(strict=True, reason="review21r: addresses made from a router's MACs bypass MAX_PER_ROUTER")
def test_a_relay_cannot_bind_more_than_the_cap_of_addresses_in_a_routers_name() -> None:
    macs = [frb.format_mac(bytes([0x02, 0x10, 0, 0, i >> 8, i & 0xFF])) for i in range(HOSTS)]
    owners = {mac: R for mac in macs}
    guard = RouterAddresses()
    for mac in macs:  # the relay's forged RAs, each from one of R's MACs and the address made from it
        guard.admit_advert(R, claim_of(advert(mac, mac, src=eui64_link_local(mac), lifetime=65535)), owners, now=0.0)
    flows = guard.flows()
    print(f"{len(guard.bound)} addresses bound in R's name, {len(flows)} table-0 flows (cap {MAX_PER_ROUTER})")
    assert all(isinstance(a, ipaddress.IPv6Address) for a in guard.bound)
    assert len(guard.bound) <= MAX_PER_ROUTER


@pytest.mark.xfail(strict=True, reason="review21r: addresses made from a router's MACs bypass MAX_PER_ROUTER")
def test_a_relays_forged_ras_from_the_routers_hosts_bind_no_more_than_the_cap_at_a_switch() -> None:
    from tests.unit.sdn.test_review21k_router_link_local_taken import _named
    from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

    net, ids, _, announcer = trusted_ring(6)
    u, r, a = ids[0], ids[3], ids[5]  # A is on the arc from R to u: its copies of R's floods are plausible
    hosts = [frb.format_mac(bytes([0x02, 0x10, 0, 0, 0, i])) for i in range(64)]  # R's LAN, in its signed list
    announcer.announce(net, ids, extra={r: hosts})
    _named(net, ids, r)
    before = len(net.nodes[u].switch.router_addresses.bound)
    for mac in hosts:
        forged = advert(mac, mac, src=eui64_link_local(mac), lifetime=65535)
        net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    net.advance(0.5)  # a tick: the guard flows follow the bindings
    bound = len(net.nodes[u].switch.router_addresses.bound) - before
    print(f"at u: {bound} addresses bound in R's name by A's copies, "
          f"{len(net.nodes[u].switch.router_addresses.flows())} router-address flows")
    assert bound <= MAX_PER_ROUTER
