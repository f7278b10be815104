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

Fixed: a holder's clock for an asker starts at its first ask (any HAVE of an older serial), and the next level is
honoured only once the asker held its level for a real asker's back-off, less what a real one may be early by
(`document_flood._earned_after`: 1.5 s up to level 2, then 5, 13, 27 s; the top about 100 s after the first ask).
After: the same 10 askers drew 48 firm answers at claimed level 8, as at level 0 (before 80 against 48). A real
asker whose answers are all lost is still honoured at each level it says, in that HAVE or its follow-up (the
second test: levels 1-9 honoured 1.5, 3.7, 7.3, 15.8, 32.6, 63.2, 94.2, 124.2, 159.6 s after its first ask).
"""

from __future__ import annotations

from typing import Any

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


async def test_quick_repeated_asks_do_not_climb_to_every_holders_firm_answer() -> None:
    low, high = await _firm_answers(0, 10), await _firm_answers(8, 10)
    print(f"10 askers of 10 quick HAVEs: {high} firm answers at claimed level 8, {low} at level 0")
    assert high <= low, f"claimed level 8, climbed: {high} firm answers of the whole list for 10 askers, level 0: {low}"


async def test_a_real_asker_whose_answers_are_all_lost_is_honoured_at_each_level_it_says() -> None:
    """The fix must not slow a real climb: L, holding nothing, hears the holders' periodic HAVEs and asks at its
    own back-off (rule 4), but every list sent to it is lost. Each holder takes every level L says, in its HAVE
    or at the latest in its follow-up, up to the top."""
    medium, nodes, clock = fleet(12)
    late = nodes[-1]
    send = medium.send

    def losing_lists(sender: Any, frame: bytes, to: bytes = rf.BROADCAST) -> None:
        kind = rf.HEADER.unpack_from(frame)[2]
        late.connected = kind == rf.HAVE  # L hears the HAVEs, never a list
        send(sender, frame, to)
        late.connected = True

    medium.send = losing_lists  # type: ignore[method-assign]
    seen: list[tuple[float, int, int]] = []  # (when, level L said, level a holder took), as holder 0 saw them
    holder = nodes[0]
    honoured = holder._honoured_level

    def noting(asker: bytes, claimed: int, now: float) -> int:
        level = honoured(asker, claimed, now)
        if asker == late.mac:
            seen.append((now, claimed, level))
        return level

    holder._honoured_level = noting  # type: ignore[method-assign]
    for node in nodes:
        node.arm_periodic_have()
    assert nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(3)), "file")
    await clock.advance(200.0)
    assert late.signaling.list is None
    said = sorted({claimed for _, claimed, _ in seen})
    assert said[-1] >= rf.FIRM_LEVEL_MAX, said  # it climbed to the top while the test ran
    for level in said:
        asks = [(at, took) for at, claimed, took in seen if claimed == level]
        first = asks[0][0]
        # taken in the HAVE that first said it, or in its follow-up, said FOLLOW_UP later
        assert any(took == level and at <= first + rf.FOLLOW_UP + 0.01 for at, took in asks), (level, asks)
    reached = {level: next(at for at, claimed, took in seen if took == level) for level in said}
    print("L honoured at level k after (s): " + ", ".join(f"{k}: {at - seen[0][0]:.1f}" for k, at in reached.items()))
