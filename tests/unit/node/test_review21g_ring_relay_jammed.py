"""Review21g G1: one member jams offers along the ring to any node through a relay it shares a link with.

Attack: a chunk's rate is checked per *neighbour* (`CHUNK_RATE` 20/s, burst 40, `RingSignaling._on_record`), and a
relay passes on what it accepted with no budget of its own per origin. Hostile member X, linked to relay R, sends R
chunks of junk (random bytes, no certificate needed) addressed to R's neighbour T as fast as R takes them: R accepts X's 20/s and
hands all of it on to T, where it fills R's bucket. Every honest chunk R relays to T (the offers and link requests
of every member whose route to T runs through R, and answers coming back that way) is dropped there as
RATE_LIMITED, and the requester falls back to the server after `RING_TIMEOUT` (6 s) per request.

Measured (in-memory ring of tests/unit/node/test_ring_signaling.py, real RingSignaling, 1 s timeout): 8 of 10
link requests from the origin to T fell back to the server (`no_answer`), T dropping 10 honest chunks as
RATE_LIMITED among 248 junk ones. (With 5 chunks every 10 ms offered, 4 of 5 fell back, run after run.) X pays about 4 KB/s and can jam one link per neighbour it has.

Fixed: the relay side of the proposal (RELAY_RATE, a quarter of the next hop's budget per incoming neighbour, counted as relay_rate_limited); the origin's share at the receiver not done: a header's src is not authenticated before reassembly. Proposed at the review: budget forwarded chunks per (incoming neighbour, outgoing neighbour) at the relay, below what the
next hop accepts from it (e.g. CHUNK_RATE / 4 per incoming neighbour), and at the receiver keep a share of each
neighbour's bucket for chunks that neighbour originates or that come from different incoming links (fair queuing
by the header's src, say 4/s each, with the neighbour's aggregate as today), so one origin cannot take a link's
whole budget; and count it (`relay_rate_limited`).
"""

from __future__ import annotations

import random

from evio.overlay import ring_signal as rs
from evio.testing.virtual_clock import VirtualClock
from tests.unit.node.test_ring_signaling import Fleet, flood_while_requesting


async def test_junk_from_one_member_through_a_relay_does_not_push_others_offers_to_the_server() -> None:
    clock = VirtualClock()
    fleet = Fleet(6, clock)
    origin, relay, target, attacker = fleet.ids[0], fleet.ids[1], fleet.ids[2], fleet.ids[4]
    fleet.links[attacker].add(relay)  # a chord: the attacker is one of the relay's neighbours
    fleet.links[relay].add(attacker)
    rng = random.Random(1)
    # 500/s offered: whenever the relay's bucket for it has a token, a chunk is there; drained in the first second
    # (burst 40 at 20/s net)
    await flood_while_requesting(clock, fleet, attacker, relay, origin, target,
                                 lambda i: rs.chunks(rng.randbytes(200), i, rng.getrandbits(128), target)[0], drain=1.0)
    assert fleet.nodes[relay].relayed > 20  # the junk did go through
    assert fleet.nodes[origin].sent == {"ring": 5}, fleet.nodes[origin].fallbacks
