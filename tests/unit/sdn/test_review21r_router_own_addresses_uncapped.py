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
does not hold, so the bound is R's host count, not A's choice. And such a binding hurts the host it was made from
(the third test): H, on R's LAN when A forged the RA, moves to W's site; once W holds H, every solicitation H sends
from its own link-local address is dropped as `ROUTER_ADDRESS_SPOOFED` at u (`spoofs`: the binding is R's, R no
longer holds H's MAC) for up to 2.5 h: a relay takes IPv6 neighbour discovery from a moved host of its choice at
every switch past it. (Before review21p the same was possible for 4 of R's hosts, the cap; now for all.)

Suggested fix: the cap counts the router's own addresses too, with its own small allowance (e.g. the config's named
addresses plus those made from the MACs of R's *own* interfaces, not every host its announcement lists: a host on
R's leaf ports is not R's router), or `made_by` looks only at the router's bridge MAC(s) (the kernel's address of
the router's interface), not at every MAC its announcement holds; and `spoofs` (or `expire`) drops a binding whose
address `owner()` now says is another member's, instead of judging that member's own frames by it.

Fixed (decision 0068, amended for review21r; evio/sdn/router_addresses.py): a router's own addresses (`own`) are only
the config's named ones and those made from the router's interface MACs (`interfaces`: the MACs the CA certified an
address for that the router holds, and at its own node its bridge's), not every MAC its announcement holds; they
bind past `MAX_PER_ROUTER` but within their own `MAX_OWN_PER_ROUTER` (6); a host's address counts against the cap
like any other. New signed host claims drop a binding whose address was made from a MAC another member now holds
(`rehome`), so a moved host's solicitations are judged by nothing in the router's name.
"""

from __future__ import annotations

import ipaddress

from evio.sdn import frb
from evio.sdn.router_addresses import MAX_OWN_PER_ROUTER, MAX_PER_ROUTER, RouterAddresses
from tests.unit.sdn.test_review21k_router_link_local_taken import advert
from tests.unit.sdn.test_review21p_router_address_squat import claim_of, eui64_link_local

R = 7
HOSTS = 256  # MACs R's signed list holds (four pages): a site gateway's LAN


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


def test_a_host_that_left_the_router_s_site_keeps_its_neighbour_discovery() -> None:
    # What the bindings above cost a host: H, on R's LAN when A forged the RA, moves to W's site (0078's host that
    # moved); the binding, R's for 2.5 h, makes H's own solicitations "spoofed" at u once W holds H.
    from evio.signal.host_claims import ALONE_HOLD
    from tests.unit.sdn.test_review21k_router_link_local_taken import _named, neighbor_solicit
    from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

    net, ids, _, announcer = trusted_ring(6)
    u, w, r, a = ids[0], ids[1], ids[3], ids[5]
    host = "02:10:00:00:00:01"
    announcer.announce(net, ids, extra={r: [host]})
    _named(net, ids, r)
    forged = advert(host, host, src=eui64_link_local(host), lifetime=65535)
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    assert eui64_link_local(host) in map(str, net.nodes[u].switch.router_addresses.bound)
    announcer.announce(net, ids, extra={w: [host]})  # H moved: R's list drops it, W's names it
    net.advance(ALONE_HOLD + 1.0)
    announcer.announce(net, ids, extra={w: [host]})
    assert net.nodes[u].switch.mac_owners.get(host) == w
    heard = len(net.nodes[u].received[1])
    solicit = neighbor_solicit(host, eui64_link_local(host), host)  # H's own, from its own address, at W's site
    net.inject(w, 1, solicit)
    from evio.sdn.switch import Drop

    print(f"H's solicitation reached u: {solicit in net.nodes[u].received[1][heard:]}; "
          f"ROUTER_ADDRESS_SPOOFED at u {net.nodes[u].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED]}")
    assert solicit in net.nodes[u].received[1][heard:]


def test_a_routers_own_interfaces_bind_past_the_cap_within_their_own_allowance() -> None:
    # What the fix keeps of review21p (its own addresses bind whatever forged ones fill the cap), and bounds: a router
    # told more interface MACs than it has (or a certificate's error) binds at most MAX_OWN_PER_ROUTER of them.
    interfaces = [frb.format_mac(bytes([0x02, 0x20, 0, 0, 0, i])) for i in range(MAX_OWN_PER_ROUTER + 4)]
    hosts = [frb.format_mac(bytes([0x02, 0x10, 0, 0, 0, i])) for i in range(MAX_PER_ROUTER + 4)]
    owners = {mac: R for mac in [*interfaces, *hosts]}
    guard = RouterAddresses()
    guard.interfaces = {mac: R for mac in interfaces}
    for mac in [*hosts, *interfaces]:
        guard.admit_advert(R, claim_of(advert(mac, mac, src=eui64_link_local(mac), lifetime=65535)), owners, now=0.0)
    own = [a for a in guard.bound if guard.own(a) == R]
    assert len(own) == MAX_OWN_PER_ROUTER
    assert len(guard.bound) - len(own) == MAX_PER_ROUTER
