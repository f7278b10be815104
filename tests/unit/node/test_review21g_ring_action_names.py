"""Review21g G3: one member grows a node's memory, and its `evio status`, without bound with requests along the
ring naming actions that do not exist.

Attack: `RingSignaling._serve` answers a request whose action is not a routed one with UNKNOWN_ACTION, and counts
it first: `self.served[request.action] += 1`, a Counter keyed by whatever string the (signed, but member-chosen)
request names. Hostile member X sends a node requests along the ring (directly or through relays, each hop at the
per-neighbour chunk rate, 20/s), each with a fresh txid and an action of 15,000 characters (zlib makes it one
730-byte chunk). Every one adds a 15 KB key that is never removed, and `counts()` puts the whole Counter into the
overlay's status (`overlay_status`, "ring": {"served": ...}).

Measured (in-memory ring of tests/unit/node/test_ring_signaling.py, real RingSignaling and sealing): 40 requests
spaced 10 ms apart (within one neighbour's burst) left 40 keys in `served`, a ring status of 600,431 bytes of JSON
and 742 KB more memory. At 20 requests/s from one neighbour that is about 300 KB/s (1 GB an hour per link the
attacker's requests arrive on), and `evio status` exceeds the control socket's 16 MB reply bound within a minute.

Fixed: refuse a request whose action is not in ROUTED in `_take`, before a task is made or anything is
keyed by it (counted as DropReason.UNEXPECTED, answered with UNKNOWN_ACTION or not at all), and key `served` only by
the routed actions; more generally, never key a counter by a peer-chosen string.
"""

from __future__ import annotations

import asyncio
import json
import time

from evio.node.ring_signaling import ROUTED
from evio.overlay import ring_signal as rs
from evio.tunnel.path.overlay_ca import issue_node_certificate
from tests.unit.node.test_ring_signaling import CA, CA_KEY, NOW, OV, Fleet


async def test_requests_naming_invented_actions_do_not_grow_the_nodes_counters() -> None:
    fleet = Fleet(4)
    attacker, target = fleet.ids[0], fleet.ids[1]
    key, cert = issue_node_certificate(CA_KEY, CA, [OV], attacker, NOW, 30)  # a member's genuine certificate
    for i in range(40):  # within one neighbour's burst, spaced as a steady 20/s would be served
        request = rs.RingMessage("request", OV, attacker, target, f"t{i}", time.time(), "x" * 15000 + str(i), {})
        (piece,) = rs.chunks(rs.seal(request, cert, key, fleet.keys[target]), 5000 + i, attacker, target)
        fleet.tunnel(attacker, target).send_overlay_signal(piece)
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    node = fleet.nodes[target]
    assert len(node.served) <= len(ROUTED) + 1, f"{len(node.served)} actions counted"
    assert len(json.dumps(node.counts())) < 10_000
