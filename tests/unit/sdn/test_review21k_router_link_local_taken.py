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
"""

from __future__ import annotations

import pytest

from evio.sdn.switch import Drop
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_review21k_nd_behind_extension_header import unsolicited_na
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

RA_SOURCE = "fe80::66"  # the source of router_advertisement(): the next hop of every node's default route


@pytest.mark.xfail(strict=True, reason="review21k K7: a named router's link-local address is any member's to take")
def test_a_member_cannot_take_the_named_routers_link_local_address() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, a, r = ids[0], ids[1], ids[3]
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({r})
    heard = len(net.nodes[u].received[1])
    ra = router_advertisement(macs[r])
    net.inject(r, 1, ra)
    assert ra in net.nodes[u].received[1][heard:]  # the named router's RA passes the guard, as it should
    heard = len(net.nodes[u].received[1])
    forged = unsolicited_na(macs[a], RA_SOURCE, with_extension=False)  # "fe80::66 is at A's MAC", override
    net.inject(a, 1, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    drops = sum(net.nodes[n].switch.drops[reason] for n in ids
                for reason in (Drop.CERTIFIED_ADDRESS_SPOOFED, Drop.ROUTER_GUARD))
    print(f"A's NA for the router's fe80::66 at A's MAC delivered to u's interface: {delivered}, guard drops: {drops}")
    assert not delivered
