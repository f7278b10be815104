"""review21e E3 for the member list's flood (decision 0063): its assemblies were keyed by sender MAC as the
revocation list's were, so one-chunk forgeries from invented MACs evicted a real list's assembly between two of its
chunks, and a new member stayed unlisted on the nodes that missed the server host's message. The manifest rules
live in the shared `document_flood.SignedDocumentFlood`: a list goes out as a manifest signed with the sender's
member certificate, then (a list of more than `PART_HASHES` chunks) the parts of its chunk hashes, then its chunks;
a chunk or part joins only an assembly whose manifest lists it, one assembly per signer."""

from __future__ import annotations

import random
import time
from pathlib import Path

from evio.node import document_flood as df
from evio.node import member_list_flood as mf
from evio.signal import member_list, revocation_manifest
from tests.unit.node.test_member_list_flood import CA_KEY, OV, D, fleet, frames_of, listed, serials

FORGER = 7  # the forger's index: a member, with a certificate of its own


def invented(n: int) -> bytes:
    return bytes([2, 0xEE]) + n.to_bytes(4, "big")


def many(serial: int, count: int) -> member_list.MemberList:
    rng = random.Random(serial)
    members = {rng.getrandbits(128): f"n{i}@{D}" for i in range(count)}
    return member_list.sign_members(CA_KEY, OV, serial, int(time.time()), members)


def test_forged_chunks_and_manifests_from_invented_macs_do_not_evict_a_member_list_assembly(tmp_path: Path) -> None:
    _, nodes, _ = fleet(tmp_path, 2, listed(1))
    victim = nodes[1]
    ml = many(7, 200)
    real = frames_of(ml)
    assert len(real) > 3  # a manifest and several chunks
    forged = 0
    for frame in real:
        victim.receive(frame, nodes[0].mac)
        for _ in range(df.MAX_PENDING):
            forged += 1  # an unlisted chunk of a serial of its own, and a member's signed manifest, each a new MAC
            victim.receive(mf.HEADER.pack(mf.MAGIC, df.VERSION, df.LIST, 1000 + forged, 0, 2) + b"{", invented(forged))
            victim.receive(frames_of(b"x" * 3000, 1000 + forged, FORGER)[0], invented(forged))
    assert serials(nodes) == [1, 7]
    assert victim.counts["adopted"] == 1 and victim.counts["dropped_unlisted"] == df.MAX_PENDING * len(real)
    # The forger's one assembly, replaced by each of its manifests checked (more than MAX_PENDING), the rest past the
    # check budget at this instant (review21o O3) and never checked
    assert victim.counts["dropped_replaced"] > df.MAX_PENDING
    assert victim.counts["dropped_replaced"] + victim.counts["dropped_verify_rate"] == df.MAX_PENDING * len(real) - 1


def test_a_list_of_more_chunks_than_a_manifest_lists_goes_in_parts_and_forged_parts_join_nothing(
    tmp_path: Path,
) -> None:
    medium, nodes, _ = fleet(tmp_path, 2, listed(1))
    victim = nodes[1]
    ml = many(9, 1200)
    real = frames_of(ml)
    chunks = sum(1 for f in real if mf.HEADER.unpack_from(f)[2] == df.LIST)
    parts = [f for f in real if mf.HEADER.unpack_from(f)[2] == df.PARTS]
    assert chunks > revocation_manifest.PART_HASHES and len(parts) == revocation_manifest.listed(chunks) > 1
    assert all(len(f) <= len(real[-2]) for f in real[:-1])  # within a chunk's frame
    for i, frame in enumerate(real):
        part = parts[i % len(parts)]  # a part of the real serial, of the right length, its hashes invented
        forged = part[: mf.HEADER.size] + bytes(len(part) - mf.HEADER.size)
        victim.receive(forged, invented(i))
        victim.receive(frame, nodes[0].mac)
    assert serials(nodes) == [1, 9] and victim.counts["adopted"] == 1
    assert victim.counts["dropped_unlisted"] == len(real)
    # And as the flood sends it: the server host's list, from node 0 to node 1 over the medium.
    bigger = many(10, 1200)
    assert nodes[0].client.receive_member_list(member_list.to_text(bigger), D)
    assert serials(nodes) == [10, 10]
    sent = [mf.HEADER.unpack_from(f)[2] for s, f in medium.frames if s == 0]
    assert sent[0] == df.MANIFEST and sent.count(df.PARTS) == len(parts) and sent.count(df.LIST) == chunks
