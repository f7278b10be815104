"""Review21l L2: a relay of a named router's floods binds any address it chooses (another member's link-local, a
certified or global address) to that router for up to 65535 s; the address's true owner then loses neighbour
discovery at that node (`ROUTER_ADDRESS_SPOOFED`), and, for a link-local one, the node's kernel moves it to R.

Attack (a hostile member A on the way of R's floods to node U, trust mode, `ipv6_routers` names R): A forwards, as
R's flood (root R, R's Ethernet source and source link-layer option, which 0068's amendment for K7 accepts from a
relay), an RA whose source is V's link-local address fe80::77 (V: another member, heard at U from V's MAC) and
whose router lifetime is 65535. `RouterAddresses.admit_advert` binds any source: it asks neither whether the
address is link-local (the kernel takes RAs only from link-local sources, RFC 4861 6.1.2: a global one binds
for nothing, silently), nor whether the switch heard it from another member's MAC or the CA certified it for one,
and it holds the binding for the RA's lifetime (65535 s; RFC 4861's maximum router lifetime is 9000). From then
on, every NS from fe80::77 and NA for it from V's own MAC that reaches U by a tunnel, flooded or unicast, is
dropped as `ROUTER_ADDRESS_SPOOFED`, and U's kernel, which took the RA's option, holds fe80::77 at R's MAC.

Impact: medium: a targeted denial of a chosen member's IPv6 address (link-local or global) at every node where
A relays R's floods, 18 hours per frame, renewed at will, and the drops count against the victim's MAC. 0068's
"still open" grants a relay forged RAs that take R's four slots (a denial of IPv6 routing), not other members'
addresses. (Without the relay position, L1's unicast RA does the same from any member.)

Suggested fix: bind only link-local sources (`is_link_local`); never bind an address the switch has heard from,
or the CA certified for, a MAC the router does not hold (and drop that RA as `ROUTER_ADDRESS_SPOOFED`); hold a
binding at most RFC 4861's 9000 s.

Fixed (decision 0068, amended for review21l; evio/sdn/router_addresses.py): an RA binds only a link-local source,
for at most 9000 s, and not one the CA certified for, or the switch heard (by whatever way it came, within 300 s)
spoken for by, a MAC the router does not hold: such an RA is dropped as `ROUTER_ADDRESS_SPOOFED`.
"""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.switch import Drop
from tests.unit.sdn.test_review21k_router_link_local_taken import advert, neighbor_solicit
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

VICTIM_ADDRESS = "fe80::77"  # V's link-local address


def test_a_relays_ra_in_the_routers_name_does_not_take_another_members_address() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, v, r, a = ids[0], ids[2], ids[3], ids[5]  # A is on the arc from R to U: its copy of R's flood is plausible
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({r})
    solicit = neighbor_solicit(macs[v], VICTIM_ADDRESS, macs[v])
    heard = len(net.nodes[u].received[1])
    net.inject(v, 1, solicit)
    assert solicit in net.nodes[u].received[1][heard:]  # before: V's solicitation reaches U's interface

    forged = advert(macs[r], macs[r], src=VICTIM_ADDRESS, lifetime=65535)
    net.from_neighbour(u, a, frb.pack(frb.broadcast(forged, root_nid=r, bound_nid=r, hop_count=2)))
    switch = net.nodes[u].switch

    net.advance(3600.0)  # an hour on: the binding (65535 s) still holds
    heard = len(net.nodes[u].received[1])
    spoofed = switch.drops[Drop.ROUTER_ADDRESS_SPOOFED]
    net.inject(v, 1, solicit)
    delivered = solicit in net.nodes[u].received[1][heard:]
    print(f"bound at U: {sorted(map(str, switch.router_addresses.bound))}; V's own NS delivered to U: {delivered}, "
          f"ROUTER_ADDRESS_SPOOFED +{switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] - spoofed}")
    assert delivered
