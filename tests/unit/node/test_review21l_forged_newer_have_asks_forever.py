"""Review21l L4: one member makes every node flood an ask every 30 s, for as long as it likes, with two HAVEs per
two minutes naming a serial nobody holds: the ask "made after all" (review21j J5's residual) counts senders by the
member holding their Ethernet source MAC, and any member can send from another member's MAC.

Attack (a hostile member A): A broadcasts a HAVE of serial 2**63 from its own interface MAC and the same HAVE from
member V's interface MAC (a broadcast from a MAC A does not hold is refused learning, `NOT_ANNOUNCER`, but is
still flooded to every node's interface: checked on the fake network with the real switch), again every 100 s.
`SignedDocumentFlood.receive` keys each sender by `use_members` (`_ring_key`: the member whose host claims hold
the MAC), so the two frames are "two distinct members" (`NEWER_SENDERS`). Every node asks (rule 4); its ask is
given up when it hears another's (`ask_heard_elsewhere`), but `_recheck`, 2 s later, finds `_newer_confirmed()`
and asks after all, firm (no other ask cancels it), and re-arms itself after each ask for as long as the HAVEs are
younger than `NEWER_MEMORY` (120 s): every node asks at its back-off's ceiling (`HAVE_PERIOD`, 30 s) forever.

Impact: medium: n floods of n frames every 30 s for two frames per 100 s from A (a 1,000-node overlay: about
33,000 frames a second), the amplification review21c R3 closed ("a forged HAVE of a serial nobody holds costs
about one ask", `test_a_forged_have_of_a_serial_nobody_holds_costs_about_one_have_not_one_per_node`), reopened
by one member; and the honest nodes' asks crowd out nothing else only because the list does not exist.

Suggested fix: do not count a HAVE's Ethernet source as its sender's identity: count a newer serial as confirmed
only by a signed manifest of it (a member's signature, `revocation_manifest`), or by HAVEs whose source the
switch placed under its owner's root (the FRB's root, as `_may_speak_for` judges); and cap the asks made after
all per serial (a few, not one per back-off for ever).
"""

from __future__ import annotations

import pytest

from evio.node import revocation_flood as rf
from evio.signal import identity
from tests.unit.node.test_revocation_flood import fleet, signed


@pytest.mark.xfail(strict=True, reason="review21l L4: HAVEs from a member's own MAC and a spoofed one: every node asks")
async def test_a_member_saying_have_of_a_serial_nobody_holds_under_two_macs_costs_about_one_ask() -> None:
    n = 16
    medium, nodes, clock = fleet(n)
    honest, attacker, victim = nodes[: n - 1], nodes[n - 1], nodes[0]
    owners = {node.mac: node._node_id for node in nodes}  # the members' interface MACs, as their host claims hold them
    for node in nodes:
        node.use_members(owners.get)
    attacker._send = lambda frame, to=rf.BROADCAST: True  # type: ignore[method-assign] # A's own code sends nothing
    honest[0].signaling.receive_revocation_list(identity.list_to_text(signed(5)), "file")
    await clock.advance(max(rf.REPEATS) + 0.01)
    before = len(medium.frames)
    forged = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 2**63, 0, 0)
    seconds, every = 600, 100.0
    for _ in range(int(seconds / every)):
        for node in honest:
            node.receive(forged, attacker.mac)
            node.receive(forged, victim.mac)  # A's broadcast from V's MAC: flooded, though not learned
        await clock.advance(every)
    sent = len(medium.frames) - before
    made = sum(node.counts["ask_made_after_all"] for node in honest)
    print(f"A sent {2 * int(seconds / every)} HAVEs in {seconds} s; the {n - 1} honest nodes broadcast {sent} "
          f"({sent * (n - 1)} frames delivered), {made} asks made after all")
    assert sent <= 2 * n  # R3's bound: about one ask, not one per node and back-off
