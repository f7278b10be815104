"""Review21g G5: one 16-byte HAVE every 2 s makes the overlay broadcast its whole signed list every 2 s: an
amplifier any member, or any host on any node's bridge, can drive.

Attack: a HAVE whose serial is older than ours is an ask (`SignedDocumentFlood.receive` -> `_answer`): the node
broadcasts its whole list (manifest, parts, chunks) after a jitter, held back only by its own `ANSWER_INTERVAL`
(2 s) or a broadcast of the list by another node within the jitter. An asker that asks again within FIRM_WINDOW
gets unicast answers (rule 5, FIRM_RATE); one that is new each time gets a broadcast. A sender that says HAVE(serial
0) every 2 s, each time from an invented source MAC (a member's host, or any host on a node's leaf port, can), gets a
full broadcast of the list every time, and every broadcast crosses every link of the overlay under the answering
node's root, using that root's flood budget (100 frames/s at each peer).

Measured (8-node fleet of tests/unit/node/test_revocation_flood.py, real RevocationFlood, virtual clock): with a
revocation list of 256 entries (16 KB, 14 chunks) held by all, 30 HAVEs of serial 0 in 60 s (480 bytes), each
from a new MAC, drew 30 broadcasts of the list: 450 frames, 510,207 bytes (1,063 times as much, before Bounded Flood
copies it to every node). From one MAC, 16 unicast answers and 1 broadcast came back (a reflection to that MAC). The member
list's flood (same class, decision 0063) carries up to 1 MB (874 frames) per answer. Inferred, not run: past about
400 frames an answer cannot pass a root's flood budget (100/s, burst 200) at the other nodes within the 2 s, so no
node hears another's whole answer and every node answers each ask. Decision 0043 bounds answers to one per node per
2 s; what it does not bound is the asks, so that bound is the rate an attacker keeps the overlay at.

Fixed (ANSWER_QUIET): a node answers by broadcast only when no broadcast of the list came by for 30 s;
in the quiet a re-asker gets rule 5's firm unicast. Proposed at the review: answer an old serial with a broadcast only when it is news (once per adoption, or when the asks
for it come from more than a few askers seen *on different ports*), otherwise by unicast to the asker (rule 5's
firm answer, already budgeted by FIRM_RATE); and cap the bytes a node sends in answers (a token bucket of, say,
two lists a minute), so the answer rate does not follow the ask rate.
"""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, lists_sent, signed


async def test_a_repeated_ask_does_not_make_the_overlay_broadcast_its_list_every_time() -> None:
    medium, nodes, clock = fleet(8)
    rl = signed(3, revoked=256)
    assert nodes[0].signaling.receive_revocation_list(identity.list_to_text(rl), "/etc/evio/trust/revoked.json")
    await clock.advance(10.0)
    assert all(n.signaling.list == rl for n in nodes)
    before = len(lists_sent(medium))
    have = rf.HEADER.pack(b"EVRL", rf.VERSION, rf.HAVE, 0, 0, 0)
    for ask in range(30):  # one ask every 2 s for a minute, each from a new MAC, heard by every node (a broadcast)
        for node in nodes:
            node.receive(have, bytes([2, 0, 0, 0, 0x10, ask]))
        await clock.advance(2.0)
    broadcasts = len(lists_sent(medium)) - before
    assert broadcasts <= 4, f"{broadcasts} broadcasts of the list for 30 asks"
