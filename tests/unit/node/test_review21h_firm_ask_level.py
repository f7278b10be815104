"""Review21h H8: a first-time asker that claims a high ask level makes every holder send it the whole list.

Attack: after the G5 fix (ANSWER_QUIET) a repeated ask is answered by rule 5's firm unicast, meant to come from
the `FIRM_FEW` (2) holders whose places follow the asker's, `FIRM_WIDEN` (4) times more per ask level, every holder
at `FIRM_LEVEL_MAX` (8). The level is the HAVE's index field, written by the asker: nothing ties it to how long or
how often that asker has asked (a real one climbs a level per back-off). An attacker (a member, or any host on any
node's bridge) sends HAVE(serial 0, level 8) twice within `FIRM_WINDOW` from a new source MAC each time, and every
node of the overlay unicasts it the whole signed list, as fast as `FIRM_RATE` (0.5/s per node) allows: the G5
amplifier, by unicast, from every node at once.

Measured (8-node fleet of tests/unit/node/test_revocation_flood.py, real RevocationFlood, virtual clock, a list
of 256 revocations, 14 chunks): 10 asks of two HAVEs each (20 frames of 16 bytes) drew 80 firm answers at level 8
(every node, every ask: 1,215 frames) against 44 at level 0 (675 frames). In an overlay of n nodes that is n
lists every 2 s for 32 bytes every 2 s; the member list's flood carries up to 1 MB per answer.

Fixed: a level is honoured only one above the last honoured for the same asker within 60 s, else 0 (`_honoured_level`). Proposed at the review: honour an ask level only as far as this node saw the same asker climb to it (level k needs k asks
from it spaced by its back-off, remembered in `_asked`), or cap the level of an asker first heard within
`FIRM_WINDOW` at 0; and count the bytes sent in firm answers against a budget of lists per minute, not answers.
"""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, signed


async def _firm_answers(level: int, asks: int = 10) -> int:
    medium, nodes, clock = fleet(8)
    rl = signed(3, revoked=256)
    assert nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
    await clock.advance(200.0)  # everyone holds it and has heard everyone's HAVE
    before = sum(n.counts["sent_firm"] for n in nodes)
    for ask in range(asks):
        have = rf.HEADER.pack(b"EVRL", rf.VERSION, rf.HAVE, 0, level, 0)
        mac = bytes([2, 0, 0, 0, 0x20, ask])  # a new asker each time
        for _ in range(2):  # asked again within FIRM_WINDOW: a firm answer is due
            for node in nodes:
                node.receive(have, mac)
            await clock.advance(1.0)
        await clock.advance(1.0)
    return sum(n.counts["sent_firm"] for n in nodes) - before


async def test_a_new_askers_claimed_level_draws_no_more_answers_than_a_first_ask() -> None:
    low, high = await _firm_answers(0), await _firm_answers(8)
    assert high <= low, f"level 8: {high} firm answers of the whole list for 10 asks, level 0: {low}"
