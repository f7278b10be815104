"""Review21i I6: an asker climbs to the top ask level in a tenth of a second, and draws the whole list from every
holder again (review21h H8's fix counts asks, not back-offs).

Attack (a member, or any host on any node's bridge; attacker a): H8's fix honours an ask level only one above the
last honoured for the same asker MAC within `LEVEL_MEMORY` (`SignedDocumentFlood._honoured_level`). It climbs one
level per HAVE, however close together: a real asker climbs one per back-off (2 s, doubling to 30 s), an attacker
sends ten HAVEs of level 8 from one MAC 10 ms apart, is honoured at 0, 1, ..., 8, and at `FIRM_LEVEL_MAX` every
holder is chosen and unicasts it the whole signed list (as `FIRM_RATE`, 0.5/s per node, allows). A new MAC for
each round: H8's amplifier again, for 10 frames of 16 bytes instead of 2.

Measured (8-node fleet of tests/unit/node/test_revocation_flood.py, real RevocationFlood, virtual clock, a list of
256 revocations, 14 chunks): 10 askers of 10 quick HAVEs each drew 80 firm answers (every node, every asker) against
48 for the same frames at level 0: H8's figure before its fix (80). The member list's flood is the same code
(`SignedDocumentFlood`), with lists of up to 1 MB per answer.

Suggested fix: a level is earned by an ask that comes at least the asker's back-off for that level after the last
honoured one (`2 ** level` s, capped at `FIRM_INTERVAL`), as the fix's docstring proposed; or cap the firm answers
by bytes per minute for all askers together.
"""

from __future__ import annotations

import pytest

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, signed


async def _firm_answers(level: int, haves: int) -> int:
    medium, nodes, clock = fleet(8)
    rl = signed(3, revoked=256)
    assert nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
    await clock.advance(200.0)  # everyone holds it and has heard everyone's HAVE
    before = sum(n.counts["sent_firm"] for n in nodes)
    for ask in range(10):
        have = rf.HEADER.pack(b"EVRL", rf.VERSION, rf.HAVE, 0, level, 0)
        mac = bytes([2, 0, 0, 0, 0x21, ask])  # a new asker each round
        for _ in range(haves):  # HAVEs 10 ms apart: within FIRM_WINDOW, each one honoured a level higher
            for node in nodes:
                node.receive(have, mac)
            await clock.advance(0.01)
        await clock.advance(2.0)
    return sum(n.counts["sent_firm"] for n in nodes) - before


@pytest.mark.xfail(strict=True, reason="review21i I6: ten quick HAVEs from one MAC climb to the top ask level; every holder answers")
async def test_quick_repeated_asks_do_not_climb_to_every_holders_firm_answer() -> None:
    low, high = await _firm_answers(0, 10), await _firm_answers(8, 10)
    print(f"10 askers of 10 quick HAVEs: {high} firm answers at claimed level 8, {low} at level 0")
    assert high <= low, f"claimed level 8, climbed: {high} firm answers of the whole list for 10 askers, level 0: {low}"
