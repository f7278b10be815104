"""Review21i I9: a member keeps a removal's revocation list from the members the server did not reach, for as long
as the answer quiet lasts and more, by showing every other node the list once (main 66cccdf, decision 0065, 4).

Attack (a hostile member, attacker a; the target is a member the XMPP server does not reach, the very case the
overlay flood is for): since 66cccdf a revocation list the server host sent every member online is flooded by
one node only: each waits up to `SERVER_COPY_JITTER` (5 s) and sends it unless a broadcast of the same list came by
meanwhile (`_send_server_copy`: `_heard_list_at >= adopted`). A hostile member gets the list from the server
like everyone and at once broadcasts the genuine list from its own switch with FRB bounds that reach every node but
X (its switch writes the bounds; honest switches keep within them). Every other node then keeps its copy. X never
gets a flood; it learns the serial only from a periodic HAVE, and the holders it asks hold their answer back for
`ANSWER_QUIET` (30 s) after the attacker's broadcast: the revoked member keeps its tunnels with X well past the
5 s target (issue 21: revocation within 5 s in every removal case).

Measured (12-node fleet of tests/unit/node/test_revocation_flood.py, real RevocationFlood, periodic HAVEs armed,
virtual clock): with the attacker's one broadcast to the 10 others, no honest node sent the server copy; X held the
list after 16.9, 19.0 and 21.1 s in three runs (its ask waits for a periodic HAVE: 15-45 s), against at most
`SERVER_COPY_JITTER` (5 s) without the attacker (that file's own test; 4.3 s here when the attacker's node also ran
the honest code). Without any attacker, one lost datagram of the single copy (no `REPEATS` for it any more) does
the same.

Fixed: a node keeps its copy only once copies signed by `SERVER_COPY_WITNESSES` (2) other members came by, so
the attacker's one copy holds nothing back; the first honest copy reaches X within `SERVER_COPY_JITTER`.

Suggested fix: a heard copy suppresses ours only if it came from a node whose flood must have reached every node
we reach (there is no such proof on a Bounded Flood), or keep one repeat of the server copy from a few nodes
chosen by place (as `_chosen` picks firm answerers), or let a node that adopted a server copy and then hears a
HAVE of an older serial answer it at once, not after `ANSWER_QUIET`.
"""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import SERVER_HOST, fleet, frames_of, lists_sent, signed


async def test_a_member_cannot_keep_the_server_copy_from_a_node_the_server_missed() -> None:
    medium, nodes, clock = fleet(12)
    honest, attacker, missed = nodes[:10], nodes[10], nodes[11]
    for node in nodes:
        node.arm_periodic_have()  # as `start` does in the daemon: a HAVE every ~30 s (rule 3)
    rl = signed(4, revoked=3)
    for node in [*honest, attacker]:
        assert node.signaling.receive_revocation_list(identity.list_to_text(rl), SERVER_HOST)
    attacker._send = lambda frame, to=rf.BROADCAST: True  # type: ignore[method-assign] # it floods nothing itself
    for frame in frames_of(rl, 10):  # the attacker's own broadcast, bounded to reach every node but `missed`
        for node in honest:
            node.receive(frame, attacker.mac, True)
    took = None
    for tick in range(1, 6001):  # ten minutes, 0.1 s a tick
        await clock.advance(0.1)
        if missed.signaling.list == rl:
            took = tick / 10
            break
    sent = [s for s, _ in lists_sent(medium)]
    print(f"server copies flooded by honest nodes: {sum(n.counts['sent_server_copy'] for n in honest)}; the node the "
          f"server missed held the list after {took} s (lists sent by: {sent})")
    assert took is not None and took <= rf.SERVER_COPY_JITTER + 1
