"""Review21h H1: the G1 relay budget is keyed by the *last* hop, so junk two hops away still jams a relay link.

Attack: review21g G1 was fixed with a per (incoming neighbour, outgoing neighbour) budget at the relay
(`RELAY_RATE` 5/s, burst 10, `RingSignaling._on_record`): one neighbour's chunks take at most a quarter of what the
next hop accepts from us. But a relay two hops from the attacker sees the attacker's junk as coming from the first
relay, mixed with every honest chunk that relay passes on. Hostile member X, linked to relay R1 (a chord), sends
junk addressed to T; R1 routes it to R2 within X's quarter (5/s), and at R2 that is the whole (R1, T) budget. Every
honest chunk on the route O -> R1 -> R2 -> T (here: the origin O's link requests) is then dropped at R2 as
RATE_LIMITED (`relay_rate_limited`) and O falls back to the server after `RING_TIMEOUT` per request. The direct
case of tests/unit/node/test_review21g_ring_relay_jammed.py passes; this is the same attack one hop further.

Measured (in-memory ring of 8 of tests/unit/node/test_ring_signaling.py, real RingSignaling, 0.5 s timeout):
5 of 5 link requests from O fell back to the server (`no_answer`); R1 relayed 40 chunks, R2 35, R2 logging
`rate_limited ... relayed to T` for R1. Severity medium (as G1: offers pushed to the server, not misrouted).

Proposed fix: key the relay's share by the chunk's origin (`src` in the header) as well as by the incoming link,
i.e. fair queuing per (incoming neighbour, src) inside the (incoming, outgoing) budget, with a bounded table of
origins; an unauthenticated src lets a forger spread over many src values, so also keep a small per-origin
reservation for origins whose messages verified end to end before (a "known good" set), which junk cannot enter.

Fixed (decision 0064, amended review21h H1): the origin signs each chunk; a relay that knows the origin's
certificate key counts it against that origin's own budget to the next hop (`ORIGIN_RATE`), so the junk, unsigned,
spends only the share of the link it came by, at every hop. Before: 5 of 5 fell back; after: 0 of 5, R1 relaying
the junk still (tests/unit/node/test_ring_relay_origin_budget.py: signed junk, a forged src, a replayed chunk).
"""

from __future__ import annotations

import random

from evio.overlay import ring_signal as rs
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_ring_signaling import Fleet, flood_while_requesting


async def test_junk_two_hops_from_a_relay_does_not_push_others_offers_to_the_server() -> None:
    clock = VirtualClock()
    fleet = Fleet(8, clock)
    origin, r1, r2, target, attacker = fleet.ids[0], fleet.ids[1], fleet.ids[2], fleet.ids[3], fleet.ids[6]
    fleet.links[attacker].add(r1)  # a chord: the attacker is one of R1's neighbours, not R2's
    fleet.links[r1].add(attacker)
    rng = random.Random(1)
    # R2's (R1, T) share drained by the junk R1 lets through, in the first 2.5 s
    await flood_while_requesting(clock, fleet, attacker, r1, origin, target,
                                 lambda i: rs.chunks(rng.randbytes(200), i, rng.getrandbits(128), target)[0], drain=2.5)
    assert fleet.nodes[r1].relayed > 10  # the junk did go through R1
    assert fleet.nodes[origin].sent == {"ring": 5}, (
        fleet.nodes[origin].fallbacks,
        {"r1": fleet.nodes[r1].counts(), "r2": fleet.nodes[r2].counts()},
    )
