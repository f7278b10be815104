"""Review21n N1: a link-local address heard from a MAC that then changes member makes every switch's tick raise
`KeyError` for as long as the pair is not heard again; the switch's periodic work stops there.

Attack (trust mode, `ipv6_routers` names a router R; review21l L2's "heard" record, `RouterAddresses.hear`): a MAC
M speaks for link-local fe80::5 (a flooded neighbour solicitation, its source option M) while member A1's signed
claims hold M; then M's owner becomes A2 (`HostClaims.owners`: A1 stops naming M and A2 names it alone for
`ALONE_HOLD`, "a host that moved is its new node's": an honest host moving between two members' sites, or two
members' accounts one attacker holds, or one member naming another's host MAC until its owner stops), and M speaks
for fe80::5 again. Every switch the floods reached records the
pair (fe80::5, M) in both members' shares (`_heard_by`) but once in `_heard` (address -> MAC -> when). When the
pair lapses (`HEARD_FOR`, 300 s after the last frame) `RouterAddresses.expire` forgets it from A1's share and
deletes `_heard[fe80::5]` (`_forget_heard`); it then reads `_heard[fe80::5][M]` for A2's share: `KeyError`. The same
happens at once when A1's share overflows `MAX_HEARD_PER_MEMBER` (a member inventing 64 link-local addresses pushes
the pair out of its own share) and later for A2's. The state does not heal: every tick raises at the same pair
until someone speaks for (fe80::5, M) again, which the attacker never does.

Code path: `BoundedFloodSwitch.guard_allows` -> `RouterAddresses.hear(said, mac_owners[M], now)` (keyed by the MAC's
owner at hearing time) ... `BoundedFloodSwitch.expire` -> `RouterAddresses.expire` -> `self._heard[address][mac]`.

Impact: medium. `ofapp.tick` contains the exception (`_contained`: logged, counted), but the tick stops at
`overlay.expire` for this overlay and every overlay after it: `BoundedFloodSwitch.expire` loses the flow deletes of
MACs that aged out (`learning.expire` already ran), never settles moves, and never runs `_proactive_sync` or
`guard_sync` (a member certified from then on gets no table-0 guard flows until a tunnel port comes or goes or an
RA binds a router address: review21m M1's unicast NA rides a flow ahead again for its address); transit refresh, flow-stats polls, drop, policy, broadcast and traffic reports stop
too. Overlay-wide (every node the floods reached), for as long as the attacker likes, from one MAC changing owner.
Against the preamble's rule "input from outside ... never raised into a loop".

Suggested fix: key the heard record by (address, MAC) alone, with the member recorded beside it (a pair moving to
another member moves out of the old share), or make `_forget_heard` and `expire` tolerate a pair another share
already forgot (`self._heard.get(address, {}).get(mac)`, skip when absent), and test a MAC changing owner between
two hearings, both through expiry and through `MAX_HEARD_PER_MEMBER`.
"""

from __future__ import annotations

from evio.sdn.router_addresses import HEARD_FOR
from tests.unit.sdn.test_review21k_router_link_local_taken import neighbor_solicit
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

MOVED_MAC = "02:00:00:00:05:55"  # a host's MAC, first A1's, then A2's
ADDRESS = "fe80::5"


def test_a_heard_pair_whose_mac_changes_member_does_not_break_the_tick() -> None:
    net, ids, _, _ = trusted_ring(6)
    u, r, a1, a2 = ids[0], ids[2], ids[4], ids[5]
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({r})
    net.advance(0.0)
    switch = net.nodes[u].switch
    owners = dict(switch.mac_owners)

    net.tell_owners({**owners, MOVED_MAC: a1})
    net.inject(a1, 1, neighbor_solicit(MOVED_MAC, ADDRESS, MOVED_MAC))  # flooded: heard under A1 at every node
    net.advance(1.0)
    net.tell_owners({**owners, MOVED_MAC: a2})  # the MAC's claim is now A2's
    net.inject(a2, 1, neighbor_solicit(MOVED_MAC, ADDRESS, MOVED_MAC))  # heard under A2 too
    net.advance(1.0)
    shares = [m for m, share in switch.router_addresses._heard_by.items() if any(str(a) == ADDRESS for a, _ in share)]
    assert shares == [a2]  # fixed: the pair moved to its MAC's new holder's share (it was in both: the precondition)

    later = net.now + HEARD_FOR + 1.0
    switch.expire(later)  # the pair lapses: raises KeyError here
    switch.expire(later + 0.5)  # and every tick after
    assert not switch.router_addresses._heard_by
