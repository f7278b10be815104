"""Review21l L1: any member's unicast router advertisement with the named router's MAC as Ethernet source passes
the RA guard and reaches any node's interface: the guard of review21i I7 undone with one frame, no relay position.

Attack (a hostile member A, trust mode, `ipv6_routers` names R): A's daemon sends over any tunnel a unicast RA to
a node's interface MAC, Ethernet source R's MAC (anyone can write it), no source link-layer option, a prefix
option with the on-link flag (here 2001:db8:66::/64; 2000::/3 in the real attack). Table 0 sends every RA to the
controller, and `switch.guard_allows` judges a unicast RA's originator as "the member owning its source MAC"
(`root = self.mac_owners.get(src)`), then `router_allowed` asks whether that member holds that MAC: a tautology,
R. `router_addresses.admit_advert` binds the source to R (Ethernet source R's, no option to refuse). Then
`_peer_frame_in` -> `_learn` refuses R's MAC on A's port (`NOT_ANNOUNCER`), but a refusal returns `[]`, not None,
so the frame is forwarded all the same, and a pair flow (in_port, R's MAC, the target) is installed. At a transit
node the same happens again, so the RA reaches any member's interface in the overlay by unicast routing.

Impact: high: the RA guard's threat (decision 0068, review21i I7) with no position at all: the kernel takes the
on-link prefix (and SLAAC addresses, and the default route's parameters: preference, lifetime 0 to delete it),
so all IPv6 to 2000::/3 is resolved on the overlay, where the attacker's host answers solicitations for
addresses no CA certifies. A redirect (137) in R's name passes the same way, to attached hosts that take
redirects (the bridge's own interface has accept_redirects=0 for IPv6). 0068's "still open" grants forgeries only to a relay of R's floods (an FRB whose way
is plausible), not to every member over every tunnel.

Suggested fix: judge a unicast RA's sender by where it came from: allowed only if R's MAC is placed on the port
it came by under R (`_may_speak_for(src, owner, in_port, None)` with the learning entry's port), else drop it as
`ROUTER_GUARD`; more generally do not forward a frame whose source `_learn` refused (`NOT_ANNOUNCER`) when that
frame is an RA, redirect or neighbour message, and bind nothing (router_addresses) before that check.

Fixed (decision 0068, amended for review21l): a unicast RA or redirect counts as the router's only if it came by
the router's own link or by the port learning places its MAC on under it, else it is dropped as `ROUTER_GUARD`
before anything is bound (`BoundedFloodSwitch._unicast_sender`); a named router's node floods its hosts' unicast
RAs and redirects rooted at itself, so they reach every member by either of two equal ways; a unicast solicitation
or advertisement for a router's bound address whose source `_learn` refused, by none of the router's ways, is not
forwarded (tests/unit/sdn/test_sdn_named_router_ways.py).
"""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.switch import Drop
from tests.unit.sdn.test_review21i_rogue_router_advertisement import router_advertisement
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def test_a_members_unicast_ra_with_the_routers_mac_reaches_no_interface() -> None:
    net, ids, macs, _ = trusted_ring(6)
    u, a, r, far = ids[0], ids[1], ids[3], ids[4]  # A: U's neighbour, not on R's way to U; far: 2 hops past U
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({r})
    reached = []
    for target in (u, far):
        forged = frb.parse_mac(macs[target]) + router_advertisement(macs[r])[6:]  # unicast, "from" R's MAC
        heard = len(net.nodes[target].received[1])
        net.from_neighbour(u, a, forged)
        if forged in net.nodes[target].received[1][heard:]:
            reached.append(target)
    refused = net.nodes[u].switch.drops[Drop.NOT_ANNOUNCER]
    guarded = sum(net.nodes[n].switch.drops[Drop.ROUTER_GUARD] for n in ids)
    print(f"A's unicast RA in R's name reached {len(reached)} of 2 interfaces; NOT_ANNOUNCER at U {refused}, "
          f"ROUTER_GUARD {guarded}")
    assert not reached
