"""Issue 21 (last review rounds, low): the document floods' HAVEs and chunks reached Python with no budget per sender.

Attack: member A sends frames of ethertype 0x88B5 to node u, by broadcast (the switch delivers them under A's root,
within its flood budget) or to u's bridge MAC (flows ahead by destination, decision 0072: no controller, no budget on
the way), each a HAVE or a chunk: no signature to check, so the manifests' check budget (decision 0043, amended for
review21o O3) never sees them. Each still costs what Python takes to read it and act on it (a HAVE of an older serial
is an ask, weighed for an answer; a chunk is hashed and looked up in the assemblies under way), 45-55 us a frame at
load 5.8 (0043's figures), and every one was handled: a member at full rate held u's loop as long as its frames came.

Fixed (decision 0043, amended): every frame of the flood's kind is charged, before it is read further, to whoever
delivered it as far as the frame tells (the member whose host claims hold its source MAC, one key for the MACs nobody
holds: `_ring_key`, the manifests' rule), within `document_flood.FRAME_RATE` per way in, shared fairly among the
senders (`SENDER_FRAME_RATE`, by `FloodShares`); past it the frame is dropped and counted (`dropped_frame_rate`). A
sender new to u may send two of the largest documents at once, so an honest list and its repeat pass whole.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

from evio.node import document_flood as df
from evio.node import member_list_flood as mf
from evio.node import revocation_flood as rf
from evio.signal import member_list, revocation_manifest
from tests.unit.node import test_member_list_flood as ml_test
from tests.unit.node.test_revocation_flood import fleet, frames_of, signed

RATE = 20_000  # A's frames a second: about 200 Mbit/s of chunks, well within a tunnel
SECONDS = 5


def _attack_frames() -> list[tuple[bytes, bool]]:
    """A's mix: asks (HAVE of an older serial) and unlisted chunks, broadcast and to u's MAC."""
    ask = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.HAVE, 1, 0, 0)
    chunk = rf.HEADER.pack(rf.MAGIC, df.VERSION, df.LIST, 9, 0, 1) + os.urandom(df.CHUNK)
    return [(ask, False), (ask, True), (chunk, False), (chunk, True)]


def test_a_member_flooding_haves_and_chunks_is_held_to_its_share_and_the_others_are_read() -> None:
    async def run() -> None:
        _, nodes, clock = fleet(4)
        u, victim, attacker, other = nodes[0], nodes[1], nodes[2], nodes[3]
        owners = {node.mac: node._node_id for node in nodes}
        for node in nodes:
            node.use_members(owners.get)  # the daemon's case: senders known by their host claims
        for frame in frames_of(signed(3), index=1):
            u.receive(frame, victim.mac, True)
        assert u.signaling.list is not None and u.signaling.list.serial == 3
        genuine = frames_of(signed(4, revoked=120), index=1)  # several chunks
        assert len(genuine) > 2
        mix = _attack_frames()
        per_tick = RATE // 100
        handled_before = u.counts["received_have"] + u.counts["received_frame"]
        other_haves = 0
        for tick in range(SECONDS * 100):
            for i in range(per_tick):
                frame, broadcast = mix[i % len(mix)]
                u.receive(frame, attacker.mac, broadcast)
            if tick % 100 == 50:  # another member's ask, once a second: read, whatever A sends
                before = u.counts["received_have"]
                u.receive(rf.HEADER.pack(rf.MAGIC, df.VERSION, df.HAVE, 3, 0, 0), other.mac, True)
                other_haves += u.counts["received_have"] - before
            if tick == 250:  # V answers u by unicast with a newer list, half-way through
                for frame in genuine:
                    u.receive(frame, victim.mac, False)
            await clock.advance(0.01)
        handled = u.counts["received_have"] + u.counts["received_frame"] - handled_before - len(genuine) - other_haves
        allowed = 2 * (df.SENDER_FRAME_RATE.burst + df.SENDER_FRAME_RATE.per_second * SECONDS)  # both ways in
        print(f"A sent {RATE * SECONDS}, {handled} read past the budget (at most {allowed:.0f}), "
              f"{u.counts['dropped_frame_rate']} dropped; V's list at u: {u.signaling.list.serial}")
        assert handled <= allowed, f"{handled} of A's frames were read: no budget per sender held them"
        assert u.counts["dropped_frame_rate"] >= RATE * SECONDS - allowed
        assert other_haves == SECONDS, "another member's HAVE was dropped with A's"
        assert u.signaling.list.serial == 4, "V's genuine answer did not pass while A flooded"

    asyncio.run(run())


def test_a_new_sender_may_send_the_largest_document_twice_at_once(tmp_path: Path) -> None:
    """A member list as large as the flood carries (`MAX_BYTES`), its manifest, parts and chunks sent by a member new
    to u and then repeated at once (as a repeat or another holder's answer would, sooner than they do): both copies
    are read whole, and the list adopted."""
    largest = df.max_frames(mf.MAX_BYTES)
    assert 2 * largest <= df.SENDER_FRAME_RATE.burst <= df.FRAME_RATE.burst
    rng = random.Random(7)
    members = {rng.getrandbits(128): f"member{i:05d}@{ml_test.D}" for i in range(12_500)}
    big = member_list.sign_members(ml_test.CA_KEY, ml_test.OV, 2, int(time.time()), members)
    frames = ml_test.frames_of(big, index=1)
    assert len(frames) > revocation_manifest.PART_HASHES * 10, "not a large document"
    _, nodes, _ = ml_test.fleet(tmp_path, 2, ml_test.listed(1))
    u = nodes[0]
    owners = {node.mac: node._node_id for node in nodes}
    u.use_members(owners.get)
    for frame in frames + frames:
        u.receive(frame, nodes[1].mac, True)
    assert u.counts["dropped_frame_rate"] == 0
    assert ml_test.serials([u]) == [2]
