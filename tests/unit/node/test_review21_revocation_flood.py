"""review21: the revocation flood against a hostile member (or a local host on a leaf port) on the same medium."""

from __future__ import annotations

from evio.node import revocation_flood as rf
from tests.unit.node.test_revocation_flood import fleet, frames_of, signed

ATTACKER = bytes([2, 0, 0, 0, 0, 0xAA])


def test_a_member_interleaving_forged_first_chunks_does_not_keep_a_multi_chunk_list_from_assembling() -> None:
    """review21 N2, fixed: one assembly per sender, so the forger's serials replace each other, not the list."""
    _, nodes, clock = fleet(2)
    victim = nodes[1]
    rl = signed(7, revoked=60)
    real = frames_of(rl)
    assert len(real) > 1
    sender = nodes[0].mac
    serial = 1000
    for frame in real:
        victim.receive(frame, sender)
        for _ in range(rf.MAX_PENDING):  # at 1,000 frames/s (the per-port packet-in rate) this is 4 ms
            serial += 1
            victim.receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, serial, 0, rf.MAX_CHUNKS) + b"x", ATTACKER)
    print("victim counts:", dict(victim.counts))
    assert victim.signaling.list == rl


async def test_one_have_from_anyone_costs_one_answer_not_one_per_node() -> None:
    """Fixed since the review (it was 16 answers, one per node): each holder waits a random moment and keeps
    quiet once another node's answer came by."""
    medium, nodes, clock = fleet(16)
    rl = signed(9, revoked=60)
    for n in nodes:
        n.signaling.list = rl
    have = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.HAVE, 0, 0, 0)
    before = len(medium.frames)
    for n in nodes:
        n.receive(have, ATTACKER)  # one flooded HAVE reaches every node
    await clock.advance(rf.ANSWER_JITTER)
    sent = medium.frames[before:]
    out_bytes = sum(len(f) for _, f in sent)
    print(f"1 HAVE of {len(have)} B -> {len(sent)} flooded frames, {out_bytes} B, each crossing every link")
    assert len(sent) == len(frames_of(rl))
    # Within the interval a second HAVE is held:
    for n in nodes:
        n.receive(have, ATTACKER)
    assert len(medium.frames) == before + len(sent)
