"""Review21t finding 1 (decision 0081, "the squat"): a named router's node binds another member's link-local
address, one the member is using, by signing an RA from it.

Attack (trust mode, `ipv6_routers` names R, R's node hostile, victim member V anywhere): V's interface (or a host on
one of V's leaf ports) uses a link-local address not made from its MAC: RFC 7217 stable privacy (Linux with
`addr_gen_mode` 2/3, NetworkManager's default for the connections it manages) or a random interface id (Windows'
default). It speaks from it: its solicitations reach every node, which records them (`RouterAddresses.hear`). R's
node sends, from its own leaf port, an RA whose IPv6 source is V's address (Ethernet source and option R's MAC).
Decision 0081: R's node signs a statement for every RA its leaf ports send, and every node takes it; the RA is then
`vouched`, and `admit_advert(vouched=True)` skips what other MACs said of the address (`speakers`): V's address is
bound to R at every node. Check 2 of 0068 (`spoofs`) then drops V's own solicitations and advertisements from its
address as `ROUTER_ADDRESS_SPOOFED` overlay-wide, while R's MAC now speaks for it (and the kernels put V's address at
R's MAC on the RA itself, RFC 4861 6.3.4).

This is 0068's L2 (medium: "a chosen member's IPv6 denied"), fixed there by the `speakers` refusal, brought back by
0081 for an address its owner is *using*, no longer only for a quiet one. 0081 says the router's node is trusted to
sign what its leaf ports send: about its own MACs, not about addresses other members' MACs are heard speaking for.
The RA's source link-layer option also puts V's address at R's MAC in
every kernel that takes the RA (RFC 4861 6.3.4), and V cannot correct it (its advertisements are dropped): R
receives what other nodes send to V's link-local address. Bounded by `MAX_PER_ROUTER` (4) bindings at a time, each held up to the RA's router lifetime (`MAX_HOLD`).

Variant: a second named router R2 (hostile) binds R's own link-local address (fe80::66: neither named in
`ipv6_router_addresses` nor made from R's MAC) after R's kernel spoke from it, and R's RAs are then refused at every
node (a denial of IPv6 routing through R overlay-wide, 0068's review21p squat by another way).

Measured (unit, fake network with the real switch and its flows, 6-node ring; the same sequence without and with
`sign_router_adverts`): V's next solicitation from its address reached 4 of 4 other nodes without statements (0068:
refused, V's MAC was heard) and 0 of 4 with them (bound to R at 4 of 4, `ROUTER_ADDRESS_SPOOFED` +2); R's RA after
R2's reached 4 of 4 without statements and 0 of 4 with them. So trust mode is weaker here than no trust.

Rated medium: a bounded denial of link-local IPv6 against a chosen member (every node, up to 4 victims at a time,
one signed RA each), with the attacker a member the config names a router.

Suggested fix: `vouched` should override only the squat of the router's *own* (a squat is a MAC speaking for an
address that no member's MAC was heard from before the router's first vouched RA, or from which the router's MACs
were heard first); simplest: keep the `speakers` refusal for a vouched RA when the address was heard from another
member's MAC *before* the router's node was ever heard from it, or bind a vouched source only when it is the RA
source the router's node has used before any other MAC spoke for it (first-come by signed time), or require
`ipv6_router_addresses` for non-EUI-64 router addresses in trust mode too.
"""

from __future__ import annotations

from evio.sdn.switch import Drop
from tests.unit.sdn.test_review21_relay_forges_router_advert import _fleet
from tests.unit.sdn.test_review21k_router_link_local_taken import RA_SOURCE, advert, neighbor_solicit

STABLE_PRIVACY = "fe80::3c1a:9e2b:77d4:51f0"  # V's link-local address: RFC 7217, not made from V's MAC


def test_a_named_routers_vouched_advert_does_not_take_a_members_in_use_link_local_address() -> None:
    net, ids, macs, u, a, r = _fleet()
    v = ids[1]  # the victim, not R's neighbour's relay, not u
    others = [n for n in ids if n not in (v, r)]
    speak = neighbor_solicit(macs[v], STABLE_PRIVACY, macs[v])
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    net.inject(v, 1, speak)
    before = [n for n in others if speak in net.nodes[n].received[1][heard[n]:]]
    assert before == others  # V's address works: its solicitation reaches everyone
    net.advance(5.0)

    # R's node: an RA from V's address, R's own MAC; its node signs it as it signs every RA from its leaf ports.
    ra = advert(macs[r], macs[r], src=STABLE_PRIVACY, lifetime=9000)
    net.inject(r, 1, ra)
    net.advance(1.0)
    bound_at = [n for n in others if STABLE_PRIVACY in map(str, net.nodes[n].switch.router_addresses.bound)]

    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    spoofed = sum(net.nodes[n].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] for n in ids)
    net.inject(v, 1, speak)
    after = [n for n in others if speak in net.nodes[n].received[1][heard[n]:]]
    spoofed = sum(net.nodes[n].switch.drops[Drop.ROUTER_ADDRESS_SPOOFED] for n in ids) - spoofed
    print(f"V's in-use address bound to R at {len(bound_at)} of {len(others)} other nodes; V's next solicitation "
          f"reached {len(after)} of {len(others)} (was {len(before)}); ROUTER_ADDRESS_SPOOFED +{spoofed}")
    assert bound_at == []
    assert after == others


def test_a_named_router_cannot_take_another_named_routers_address_with_a_vouched_advert() -> None:
    net, ids, macs, u, a, r = _fleet()
    r2 = ids[1]  # a second named router, hostile: R's address is fe80::66 (neither named nor made from its MAC)
    for nid in ids:
        net.nodes[nid].switch.ipv6_routers = frozenset({r, r2})
    net.advance(0.0)
    others = [n for n in ids if n not in (r, r2)]
    net.inject(r, 1, neighbor_solicit(macs[r], RA_SOURCE, macs[r]))  # R's kernel speaks from it first (heard)
    net.advance(1.0)
    net.inject(r2, 1, advert(macs[r2], macs[r2], lifetime=9000))  # from RA_SOURCE, R's address, at R2's MAC
    net.advance(1.0)
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    ra = advert(macs[r], macs[r])
    net.inject(r, 1, ra)
    reached = [n for n in others if ra in net.nodes[n].received[1][heard[n]:]]
    print(f"R's RA from its own fe80::66 reached {len(reached)} of {len(others)} after R2's vouched RA from it")
    assert reached == others
