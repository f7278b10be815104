"""review21b: the answer suppression of the revocation flood (1a55f4e) trusts any LIST frame of our serial.

A frame with the right serial in its header, index 0 of 1 and any bytes after it, makes every holder drop its
pending answer: nothing checks that it is, or assembles into, the list. A member that learned the serial (it is
in presence, and on the wire with every broadcast) keeps a node that missed the list from ever getting it over
the overlay: one forged frame per HAVE, or one every ANSWER_JITTER blanket-wise. The revoked member itself can do
it through the very node that still holds the old list and keeps its tunnel: its broadcast floods on from there.
"""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, signed

HOSTILE = bytes([2, 0, 0, 0, 0, 0xEE])


# Fixed since: only a whole broadcast of the list we hold, equal to ours, holds our answer back.
async def test_one_forged_list_header_of_the_right_serial_keeps_a_node_that_missed_the_list_without_it() -> None:
    medium, nodes, clock = fleet(8)
    late = nodes[7]
    late.connected = False  # cut off while the list went round
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(5, revoked=3)), "file")
    assert all(n.signaling.list is not None for n in nodes[:7]) and late.signaling.list is None
    late.connected = True
    late.link_up()  # its HAVE(0) reaches every holder; each arms its jittered answer
    forged = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 5, 0, 2) + b"junk"  # 1 of 2: the late node waits for the rest
    for n in nodes:  # the hostile member's broadcast, flooded right after the HAVE
        n.receive(forged, HOSTILE)
    await clock.advance(rf.ANSWER_JITTER + 0.1)
    print("counts of the holders:", [dict(n.counts) for n in nodes[:2]], "late:", dict(late.counts))
    # A later link-up: same again (the member repeats its one frame per HAVE).
    await clock.advance(rf.HAVE_INTERVAL)
    late.link_up()
    for n in nodes:
        n.receive(forged, HOSTILE)
    await clock.advance(rf.ANSWER_JITTER + 0.1)
    print("after a second HAVE, late node's list:", late.signaling.list)
    assert late.signaling.list is not None and late.signaling.list.serial == 5
