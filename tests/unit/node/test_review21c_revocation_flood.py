"""review21c: the revocation flood (repeats, periodic HAVE paced by the HAVE senders heard) against a member.

Setting: trust mode, the XMPP server down (or stripping the list), a node L that missed every copy of a list
revoking member A (A, or an accomplice, is the transit node L's part of the flood went through: it drops the
copies it should pass on). L then depends on HAVE and answers, and A is still linked to L, so its frames reach
every node through L. The medium is test_revocation_flood's (a frame reaches every other node), which the
hostile member bypasses by calling `receive` on the nodes it picks: a unicast Ethernet frame to a node's
bridge MAC reaches that node's AF_PACKET socket as a broadcast does (read_broadcasts keeps all but our own).
"""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, frames_of, signed

HOSTILE = bytes([2, 0, 0, 0, 0, 0xEE])


def list_frames(rl: identity.RevocationList) -> list[bytes]:
    return frames_of(rl, 0xEE)  # signed by the hostile member's own certificate: it is a member


async def test_the_genuine_list_sent_by_unicast_to_every_holder_but_the_asker_holds_no_answer_back() -> None:
    """Fixed: only a broadcast of the list holds an answer back. (The 21b fix held it back for a whole list equal
    to ours, however it came.) The list is signed and public (it
    travels in presence): A replays it, whole and genuine, to each holder and not to L, right after each HAVE of
    L's. Every holder sees 'another node broadcast it' and holds its answer back; L never gets it."""
    medium, nodes, clock = fleet(8)
    late = nodes[7]
    late.connected = False
    rl = signed(5, revoked=3)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)  # the first copy and its repeats: all missed by L
    late.connected = True
    assert late.signaling.list is None
    start = clock.now()
    while clock.now() - start < 30 and late.signaling.list is None:
        late.link_up()  # a link of L's came up, or it heard a holder's HAVE (newer serial): its HAVE goes out
        for node in nodes[:7]:  # A, on seeing that HAVE: the genuine list to every holder, none to L
            for frame in list_frames(rl):
                node.receive(frame, HOSTILE, broadcast=False)  # to the node's bridge MAC
        await clock.advance(rf.HAVE_INTERVAL)
    took = clock.now() - start
    print(f"L's list {took:.1f} s (virtual) after it came back: {late.signaling.list}; answers held back:",
          sum(n.counts["answer_heard_elsewhere"] for n in nodes))
    assert late.signaling.list is not None and took <= 5.0


async def test_forged_have_senders_do_not_stretch_the_periodic_have_a_missed_node_relies_on() -> None:
    """test_a_node_that_missed_every_copy_with_no_link_coming_up_asks_after_a_periodic_have, in an overlay of 8,
    after A sent HAVE from MAX_HEARD invented MACs (4096 frames in 300 s: 14/s, far below a port's flood budget)."""
    medium, nodes, clock = fleet(8)
    late = nodes[7]
    late.connected = False
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(6)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    late.connected = True
    # Each node is sent HAVEs of the serial it holds (unicast, as above): nothing for it to answer or ask.
    for sender in range(rf.MAX_HEARD):
        for node in nodes:
            have = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, node._serial(), 0, 0)
            node.receive(have, (0x020000000000 + sender).to_bytes(6, "big"))
    for node in nodes:
        node.arm_periodic_have()
    start = clock.now()
    while clock.now() - start < 2 * rf.HAVE_PERIOD * 1.5 and late.signaling.list is None:
        await clock.advance(1.0)
    took = clock.now() - start
    print(f"periodic HAVE period now {min(rf.HAVE_PERIOD_MAX, max(rf.HAVE_PERIOD, nodes[1]._heard_senders())):.0f} s; L got the list after "
          f"{took:.0f} s (virtual)" if late.signaling.list else f"L has no list after {took:.0f} s (virtual)")
    # Without the forged senders: within 1.5 * HAVE_PERIOD (every node's HAVE is due by then).
    assert late.signaling.list is not None


async def test_a_forged_have_of_a_serial_nobody_holds_costs_about_one_have_not_one_per_node() -> None:
    """A HAVE naming a serial newer than ours makes a node say HAVE itself (so a holder sends the list). Nothing
    checks that anyone holds it: one frame every HAVE_INTERVAL from A, and each of the N nodes floods a HAVE as
    often, for as long as A goes on. Each flood reaches every node: N^2 frames for A's one."""
    n = 16
    medium, nodes, clock = fleet(n)
    nodes[0].signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    before = len(medium.frames)
    forged = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 2**63, 0, 0)
    seconds = 60
    for _ in range(int(seconds / rf.HAVE_INTERVAL)):
        for node in nodes:
            node.receive(forged, HOSTILE)
        await clock.advance(rf.HAVE_INTERVAL)
    sent = len(medium.frames) - before
    print(f"A sent {int(seconds / rf.HAVE_INTERVAL)} HAVEs in {seconds} s; the {n} nodes broadcast {sent} "
          f"({sent * (n - 1)} frames delivered)")
    # Without A: about one periodic HAVE per node per HAVE_PERIOD (none armed here). Allow a handful of asks.
    assert sent <= 2 * n
