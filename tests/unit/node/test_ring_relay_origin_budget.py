"""Relayed chunks counted against their signing origin's budget (review21h H1, decision 0064 amended).

The attacks of tests/unit/node/test_review21h_ring_relay_two_hops.py that a hostile member would try next once
unsigned junk is held to the share of the link it came by: junk it signs itself (its own src, its own budget),
junk under another member's src (a signature that does not check is dropped at the first relay), and a signed
chunk of another member's replayed by a relay (dropped as a copy). Each leaves the origin's link requests on the
ring."""

from __future__ import annotations

import random
from collections.abc import Callable

from evio.node.ring_signaling import ORIGIN_BURST
from evio.overlay import ring_signal as rs
from evio.overlay.negotiation import ACTION_LINK
from evio.overlay.ring_signal import DropReason
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate
from tests.unit.node.test_ring_signaling import CA, CA_KEY, NOW, OV, Fleet, flood_while_requesting


async def _two_hops_flood(make: Callable[[random.Random, int, int, int], bytes], made: list[Fleet] | None = None) -> Fleet:
    """The H1 ring: O -> R1 -> R2 -> T, the attacker on a chord to R1, sending `make`'s chunks to T."""
    clock = VirtualClock()
    fleet = Fleet(8, clock)
    if made is not None:
        made.append(fleet)
    origin, r1, target, attacker = fleet.ids[0], fleet.ids[1], fleet.ids[3], fleet.ids[6]
    fleet.links[attacker].add(r1)
    fleet.links[r1].add(attacker)
    rng = random.Random(2)
    await flood_while_requesting(clock, fleet, attacker, r1, origin, target,
                                 lambda i: make(rng, i, attacker, target), drain=2.5)
    assert fleet.nodes[origin].sent == {"ring": 5}, (fleet.nodes[origin].fallbacks, fleet.nodes[r1].counts(),
                                                    fleet.nodes[fleet.ids[2]].counts())  # fmt: skip
    return fleet


async def test_junk_the_attacker_signs_itself_spends_only_its_own_origin_budget() -> None:
    attackers: list[Fleet] = []

    def signed(rng: random.Random, i: int, attacker: int, target: int) -> bytes:
        own = attackers[0].nodes[attacker]._key  # its own certificate's key: the relays know it
        return rs.chunks(rng.randbytes(200), i, attacker, target, key=own)[0]

    fleet = await _two_hops_flood(signed, attackers)
    r1, r2 = fleet.nodes[fleet.ids[1]], fleet.nodes[fleet.ids[2]]
    assert r1.relay_rate_limited > 0  # the attacker's own budget to R2 spent...
    assert r2.relayed_signed > 10  # ...and what it let through counted as the attacker's at R2 too


async def test_junk_under_another_members_src_is_dropped_at_the_first_relay() -> None:
    def forged(rng: random.Random, i: int, attacker: int, target: int) -> bytes:
        key, _ = FORGER  # a member's real certificate, signing under the origin's src
        return rs.chunks(rng.randbytes(200), i, VICTIM_SRC, target, key=key)[0]

    fleet = await _two_hops_flood(forged)
    r1, r2 = fleet.nodes[fleet.ids[1]], fleet.nodes[fleet.ids[2]]
    assert r1.drops[DropReason.BAD_SIGNATURE] > 10  # signed, but not with the key the CA issued for that src
    assert r2.relayed_signed >= 10  # the origin's requests and the target's answers, signed, went on


async def test_a_signed_chunk_replayed_by_a_relay_is_not_relayed_again() -> None:
    fleet = Fleet(8)
    origin, r1, r2 = fleet.ids[0], fleet.ids[1], fleet.ids[2]
    captured: list[bytes] = []

    def capture(src: int, dst: int, payload: bytes) -> bytes:
        if src == r1:
            captured.append(payload)
        return payload

    fleet.tamper = capture
    await fleet.nodes[origin].request(OV, fleet.ids[3], ACTION_LINK, {"n": 1})
    request = captured[0]
    relayed = fleet.nodes[r2].relayed
    for _ in range(ORIGIN_BURST * 3):  # a relay spending the origin's budget at the next hop with its chunk
        fleet.nodes[r2]._on_record(r1, request)
    assert fleet.nodes[r2].relayed == relayed
    assert fleet.nodes[r2].drops[DropReason.REPLAYED] == ORIGIN_BURST * 3
    await fleet.nodes[origin].request(OV, fleet.ids[3], ACTION_LINK, {"n": 2})
    assert fleet.nodes[origin].sent == {"ring": 2}


VICTIM_SRC = 1 << 120  # the origin of the H1 ring, whose offers the attacker would spend
FORGER = issue_node_certificate(CA_KEY, CA, [OV], (6 + 1) << 120, NOW, 30)
