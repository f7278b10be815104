"""review21e E3: review21 N2 gave each sender MAC one assembly, so a member naming serial after serial from one
MAC evicts only itself. But a sender MAC is what the frame says: from invented sender MACs, a member's one-chunk
forgeries each start an assembly of their own, and the fifth (`MAX_PENDING`) gives up the oldest: the real list's,
whose chunks arrive over a few milliseconds. Four forged frames between two chunks (4 ms at 1,000 frames/s, the
per-port packet-in rate; the attacker's flood budget passes 400/s with a burst of 800) keep a list of more than
one chunk (some 20 revoked members) from ever assembling there: every repeat and every answer is evicted alike.

Fixed: a list goes out as a manifest signed with the sender's member certificate (each chunk's hash), then its
chunks; a chunk joins only an assembly whose manifest lists it, and there is one assembly per signer."""

from __future__ import annotations

from evio.node import revocation_flood as rf
from evio.signal import revocation_manifest
from tests.unit.node.test_revocation_flood import OV, certificate, fleet, frames_of, node_id, signed

MEMBER = 0xEE  # the forger's index: a member, with a certificate of its own


def invented(n: int) -> bytes:
    return bytes([2, 0xEE, 0, 0]) + n.to_bytes(2, "big")


def test_forged_first_chunks_from_invented_sender_macs_do_not_keep_a_multi_chunk_list_from_assembling() -> None:
    _, nodes, _ = fleet(2)
    victim = nodes[1]
    rl = signed(7, revoked=60)
    real = frames_of(rl)
    assert len(real) > 2  # a manifest and more than one chunk
    serial, forged_mac = 1000, 0
    for frame in real:
        victim.receive(frame, nodes[0].mac)
        for _ in range(rf.MAX_PENDING):
            serial += 1
            forged_mac += 1
            victim.receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, serial, 0, rf.MAX_CHUNKS) + b"x",
                           invented(forged_mac))  # fmt: skip
    print("victim counts:", dict(victim.counts))
    assert victim.signaling.list == rl
    assert victim.counts["dropped_unlisted"] == rf.MAX_PENDING * len(real)


def test_a_member_signing_manifests_from_invented_macs_holds_one_assembly_and_evicts_no_real_list() -> None:
    """The forger signs its own manifests (it is a member), serial after serial, each from a new MAC, many
    between two chunks of the real list, and forges chunks of the real serial listed by none: one assembly of its
    own, replaced each time; the real list assembles."""
    _, nodes, _ = fleet(2)
    victim = nodes[1]
    rl = signed(7, revoked=60)
    real = frames_of(rl)
    forged_mac = 0
    for i, frame in enumerate(real):
        victim.receive(frame, nodes[0].mac)
        for _ in range(4 * rf.MAX_PENDING):
            forged_mac += 1
            victim.receive(frames_of(signed(1000 + forged_mac, revoked=60), MEMBER)[0], invented(forged_mac))
        if i:
            victim.receive(rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.LIST, 7, i - 1, len(real) - 1) + b"junk",
                           invented(forged_mac))  # fmt: skip
    assert victim.signaling.list == rl
    assert len(victim._pending) <= 1
    # Each of its manifests checked replaces its one assembly (more than MAX_PENDING of them); the rest, past the
    # check budget at this instant (review21o O3), are never checked
    assert victim.counts["dropped_replaced"] > rf.MAX_PENDING
    assert victim.counts["dropped_replaced"] + victim.counts["dropped_verify_rate"] == 4 * rf.MAX_PENDING * len(real) - 1


def test_manifests_not_signed_by_a_member_for_the_id_they_name_are_dropped_after_one_check() -> None:
    """Under an invented node id (the forger's own certificate, or a signature by another key): refused, counted,
    no assembly; the certificate refused for that id costs no further check (host_claims.Certificates)."""
    _, nodes, _ = fleet(1)
    victim = nodes[0]
    text_chunks = [b"x"]
    header = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.MANIFEST, 5, 0, 1)
    own = certificate(MEMBER)
    for n in range(3):  # the forger's genuine certificate, under ids it was not issued for
        frame = revocation_manifest.pack(own.key, own.cert, OV, header, node_id(100 + n), text_chunks)
        victim.receive(frame, invented(n))
    other = certificate(3)  # a member's certificate, signed with the forger's key
    frame = revocation_manifest.pack(own.key, other.cert, OV, header, node_id(3), text_chunks)
    victim.receive(frame, invented(9))
    assert victim.counts["dropped_unsigned"] == 4 and not victim._pending


def test_a_manifest_of_the_largest_list_fits_a_frame() -> None:
    cert = certificate(1)
    chunks = [b"x" * rf.CHUNK] * rf.MAX_CHUNKS
    header = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.MANIFEST, 5, 0, rf.MAX_CHUNKS)
    frame = revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(1), chunks)
    print("manifest of", rf.MAX_CHUNKS, "chunks:", len(frame), "bytes")
    assert len(frame) <= rf.HEADER.size + rf.CHUNK


def test_a_members_manifest_listing_most_of_a_real_lists_chunks_does_not_take_them_from_it() -> None:
    """The list is public once sent: a member signs a manifest of its chunks but the last, junk there, before the
    next repeat reaches a node that missed the first copy. Each chunk goes into every assembly listing it."""
    _, nodes, _ = fleet(2)
    victim = nodes[1]
    rl = signed(7, revoked=60)
    real = frames_of(rl)
    chunks = [f[rf.HEADER.size :] for f in real[1:]]
    cert = certificate(MEMBER)
    header = rf.HEADER.pack(rf.MAGIC, rf.VERSION, rf.MANIFEST, 7, 0, len(chunks))
    victim.receive(revocation_manifest.pack(cert.key, cert.cert, OV, header, node_id(MEMBER), chunks[:-1] + [b"junk"]),
                   invented(1))  # fmt: skip
    for frame in real:
        victim.receive(frame, nodes[0].mac)
    assert victim.signaling.list == rl
    assert len(victim._pending) == 1  # the member's, waiting for a chunk nobody sends
