"""review21e E3: review21 N2 gave each sender MAC one assembly, so a member naming serial after serial from one
MAC evicts only itself. But a sender MAC is what the frame says: from invented sender MACs, a member's one-chunk
forgeries each start an assembly of their own, and the fifth (`MAX_PENDING`) gives up the oldest: the real list's,
whose chunks arrive over a few milliseconds. Four forged frames between two chunks (4 ms at 1,000 frames/s, the
per-port packet-in rate; the attacker's flood budget passes 400/s with a burst of 800) keep a list of more than
one chunk (some 20 revoked members) from ever assembling there: every repeat and every answer is evicted alike."""

from __future__ import annotations

import pytest

from evio.node import revocation_flood as rf
from tests.unit.node.test_review21_revocation_flood import frames_of
from tests.unit.node.test_revocation_flood import fleet, signed


@pytest.mark.xfail(strict=True, reason="review21e E3: forged chunks from invented sender MACs evict a real list")
def test_forged_first_chunks_from_invented_sender_macs_do_not_keep_a_multi_chunk_list_from_assembling() -> None:
    _, nodes, _ = fleet(2)
    victim = nodes[1]
    rl = signed(7, revoked=60)
    real = frames_of(rl)
    assert len(real) > 1
    serial, forged_mac = 1000, 0
    for frame in real:
        victim.receive(frame, nodes[0].mac)
        for _ in range(rf.MAX_PENDING):
            serial += 1
            forged_mac += 1
            sender = bytes([2, 0xEE, 0, 0]) + forged_mac.to_bytes(2, "big")
            victim.receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, serial, 0, rf.MAX_CHUNKS) + b"x", sender)
    print("victim counts:", dict(victim.counts))
    assert victim.signaling.list == rl
