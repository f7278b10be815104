"""The wire form, signature and next hop of signaling routed along the ring (evio.overlay.ring_signal, 0064)."""

from __future__ import annotations

import datetime
import time
import zlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given
from hypothesis import strategies as st

from evio.overlay import ring_signal as rs
from evio.overlay.ring_signal import DropReason, RingMessage, RingSignalError
from evio.tunnel.datapath.record import MAX_SIGNAL_PAYLOAD
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 3650)
ANCHOR = TrustAnchor(OV, (CA,))
A, B = 0x1 << 120, 0x9 << 120
KEY_A, CERT_A = issue_node_certificate(CA_KEY, CA, [OV], A, NOW, 30)
KEY_B, CERT_B = issue_node_certificate(CA_KEY, CA, [OV], B, NOW, 30)
OTHER_KEY, OTHER_CA = make_overlay_ca("another CA", NOW, 3650)
OTHER_NODE_KEY, CERT_OTHER = issue_node_certificate(OTHER_KEY, OTHER_CA, [OV], A, NOW, 30)


def offer(ts: float | None = None, body: dict[str, object] | None = None) -> RingMessage:
    return RingMessage("request", OV, A, B, "t1", time.time() if ts is None else ts, "tunnel.offer",
                       body if body is not None else {"v": 1, "candidates": ["candidate:1 1 udp 1 10.0.0.1 4000 typ host"] * 6})


def seal(message: RingMessage, cert: x509.Certificate = CERT_A, key: ec.EllipticCurvePrivateKey = KEY_A) -> bytes:
    return rs.seal(message, cert, key, KEY_B.public_key())


def open_sealed(sealed: bytes, src: int = A, dst: int = B) -> RingMessage:
    return rs.open_sealed(sealed, src, ANCHOR, time.time(), key=KEY_B, header_dst=dst)


def test_the_mirror_constant_matches_the_record_bound() -> None:
    assert rs.MAX_PAYLOAD == MAX_SIGNAL_PAYLOAD


# -- the next hop ---------------------------------------------------------------------------------


def test_next_hop_is_the_target_itself_when_linked() -> None:
    assert rs.next_hop(A, B, {B, B + 1}) == B


def test_next_hop_is_the_peer_closest_to_the_target_either_way_round() -> None:
    own, target = 0, 100
    assert rs.next_hop(own, target, {10, 60, 90, 115}) == 90
    assert rs.next_hop(own, target, {10, 60, 105}) == 105  # past it, but 5 away
    assert rs.next_hop(own, (1 << 128) - 100, {(1 << 128) - 10, 50}) == (1 << 128) - 10  # the short way is back


def test_no_hop_when_no_peer_is_closer_than_we_are() -> None:
    own, target = 90, 100
    assert rs.next_hop(own, target, {10, 60, 150}) is None
    assert rs.next_hop(own, target, set()) is None


@given(st.lists(st.integers(0, (1 << 128) - 1), min_size=3, max_size=40, unique=True), st.data())
def test_greedy_routing_over_a_ring_with_successors_always_arrives(nodes: list[int], data: st.DataObject) -> None:
    """Every node linked both ways to its successor (and a few others): the greedy route from anyone reaches anyone,
    each hop strictly closer, so in at most len(nodes) hops."""
    ring = sorted(nodes)
    links: dict[int, set[int]] = {n: set() for n in ring}
    for i, n in enumerate(ring):
        succ = ring[(i + 1) % len(ring)]
        links[n].add(succ)
        links[succ].add(n)
        extra = data.draw(st.sampled_from(ring))
        if extra != n:
            links[n].add(extra)
            links[extra].add(n)
    src, dst = data.draw(st.sampled_from(ring)), data.draw(st.sampled_from(ring))
    here, hops = src, 0
    while here != dst:
        nxt = rs.next_hop(here, dst, links[here])
        assert nxt is not None
        assert rs.distance(nxt, dst) < rs.distance(here, dst)
        here, hops = nxt, hops + 1
    assert hops <= len(ring)


# -- chunks ---------------------------------------------------------------------------------------


def test_a_sealed_offer_fits_in_chunks_of_a_record_and_comes_back_whole() -> None:
    sealed = seal(offer())
    pieces = rs.chunks(sealed, 7, A, B)
    assert all(len(p) <= MAX_SIGNAL_PAYLOAD for p in pieces)
    parsed = [rs.parse_chunk(p) for p in pieces]
    assert {(c.src, c.dst, c.message_id, c.hops) for c in parsed} == {(A, B, 7, rs.MAX_HOPS)}
    assembly = rs.Reassembly()
    results = [assembly.add(c, 0.0) for c in reversed(parsed)]
    assert results[-1] == sealed and all(r is None for r in results[:-1])
    assert len(assembly) == 0


def test_a_message_over_the_chunk_bound_is_refused_before_sending() -> None:
    with pytest.raises(ValueError):
        rs.chunks(bytes(rs.PIECE * rs.MAX_CHUNKS + 1), 1, A, B)


def test_forwarding_takes_one_hop_off_and_changes_nothing_else() -> None:
    (piece,) = rs.chunks(b"x" * 50, 3, A, B, hops=5)
    chunk = rs.parse_chunk(piece)
    again = rs.parse_chunk(rs.forwarded(piece, chunk))
    assert again.hops == 4 and again.data == chunk.data and again.dst == B


def test_a_signed_chunk_checks_against_its_origins_key_at_every_hop_and_nothing_else() -> None:
    """review21h H1: a relay counts a chunk against its origin's budget only if the origin signed it."""
    pieces = rs.chunks(b"z" * (rs.PIECE + 9), 4, A, B, hops=5, key=KEY_A)
    assert len(pieces) == 2 and all(len(p) <= MAX_SIGNAL_PAYLOAD for p in pieces)
    for piece in pieces:
        chunk = rs.parse_chunk(piece)
        assert rs.chunk_signed_by(piece, chunk, KEY_A.public_key())
        relayed = rs.forwarded(piece, chunk)  # a hop fewer: still the origin's
        assert rs.chunk_signed_by(relayed, rs.parse_chunk(relayed), KEY_A.public_key())
        assert not rs.chunk_signed_by(piece, chunk, KEY_B.public_key())  # another member's key
        for at in (4, 6, 20, 34, len(piece) - rs.SIGNATURE - 1, len(piece) - 1):  # kind, message id, dst, src, data, signature
            altered = bytearray(piece)
            altered[at] ^= 1
            parsed = rs.parse_chunk(bytes(altered))
            assert not rs.chunk_signed_by(bytes(altered), parsed, KEY_A.public_key()), at
    (unsigned,) = rs.chunks(b"z", 4, A, B)
    assert rs.parse_chunk(unsigned).signature == b""
    assert not rs.chunk_signed_by(unsigned, rs.parse_chunk(unsigned), KEY_A.public_key())
    assert rs.parse_chunk(pieces[0]).data + rs.parse_chunk(pieces[1]).data == b"z" * (rs.PIECE + 9)


def test_a_chunk_flagged_signed_too_short_for_its_signature_is_refused() -> None:
    short = rs.HEADER.pack(rs.VERSION, rs.DATA | rs.SIGNED, 3, 0, 1, 1, bytes(16), bytes(16)) + bytes(rs.SIGNATURE - 1)
    with pytest.raises(RingSignalError) as refused:
        rs.parse_chunk(short)
    assert refused.value.reason is DropReason.MALFORMED


@pytest.mark.parametrize("payload", [
    b"", b"\x01" * 10,  # too short
    bytes([2]) + bytes(rs.HEADER.size),  # another version
    rs.HEADER.pack(1, 0, 3, 5, 2, 1, bytes(16), bytes(16)) + b"x",  # chunk 5 of 2
    rs.HEADER.pack(1, 0, 3, 0, rs.MAX_CHUNKS + 1, 1, bytes(16), bytes(16)) + b"x",  # too many chunks
    rs.HEADER.pack(1, 7, 3, 0, 1, 1, bytes(16), bytes(16)) + b"x",  # an unknown kind
    bytes(MAX_SIGNAL_PAYLOAD + 1),
])  # fmt: skip
def test_malformed_chunks_are_refused(payload: bytes) -> None:
    with pytest.raises(RingSignalError) as refused:
        rs.parse_chunk(payload)
    assert refused.value.reason is DropReason.MALFORMED


def test_a_chunk_claiming_more_hops_than_the_limit_is_refused() -> None:
    (piece,) = rs.chunks(b"x", 1, A, B, hops=rs.MAX_HOPS + 1)
    with pytest.raises(RingSignalError) as refused:
        rs.parse_chunk(piece)
    assert refused.value.reason is DropReason.HOP_LIMIT


def test_reassembly_is_bounded_in_slots_and_forgets_after_its_timeout() -> None:
    assembly = rs.Reassembly(slots=2, timeout=5.0)
    first = [rs.parse_chunk(rs.chunks(b"y" * (rs.PIECE + 1), i, A, B)[0]) for i in range(3)]
    assert assembly.add(first[0], 0.0) is None
    assert assembly.add(first[1], 0.0) is None
    assert assembly.add(first[2], 1.0) is None  # full: the oldest gives way (review21f F2)
    assert len(assembly) == 2 and assembly.evicted == 1
    assert assembly.add(first[2], 6.0) is None  # the other two timed out
    assert len(assembly) == 1


# -- sealing --------------------------------------------------------------------------------------


def test_a_sealed_message_opens_to_the_same_message_with_its_senders_key() -> None:
    message = offer()
    opened = open_sealed(seal(message))
    assert opened == message
    assert opened.sender_key is not None and opened.sender_key.public_numbers() == KEY_A.public_key().public_numbers()


def test_a_relay_cannot_read_a_sealed_message() -> None:
    """review21f F8: the offer's ICE password is not in the sealed bytes, compressed or not."""
    sealed = seal(offer(body={"ice": {"pwd": "the-ice-password-1234"}}))
    assert b"the-ice-password-1234" not in sealed
    with pytest.raises(zlib.error):
        zlib.decompress(sealed[65:])


@pytest.mark.parametrize("where", ["ephemeral key", "ciphertext", "tag"])
def test_a_relay_cannot_alter_a_sealed_message(where: str) -> None:
    sealed = bytearray(seal(offer()))
    sealed[{"ephemeral key": 40, "ciphertext": 100, "tag": -1}[where]] ^= 1
    with pytest.raises(RingSignalError) as refused:
        open_sealed(bytes(sealed))
    assert refused.value.reason in (DropReason.UNREADABLE, DropReason.MALFORMED)  # off the curve is MALFORMED


def test_a_message_readdressed_in_its_header_or_sealed_to_another_key_is_unreadable() -> None:
    with pytest.raises(RingSignalError) as refused:
        open_sealed(seal(offer()), dst=A)  # the header's dst rewritten
    assert refused.value.reason is DropReason.UNREADABLE
    with pytest.raises(RingSignalError) as refused:
        open_sealed(rs.seal(offer(), CERT_A, KEY_A, KEY_A.public_key()))
    assert refused.value.reason is DropReason.UNREADABLE


def test_a_member_sealing_an_altered_message_to_the_target_is_caught_by_the_signature() -> None:
    """Anyone may seal to the target's (public) key: the signature still says who wrote it."""
    sealed = seal(offer())
    plain = bytearray(zlib.decompress(rs._unseal(sealed, A, B, KEY_B)))
    at = plain.index(b"10.0.0.1")
    plain[at : at + 8] = b"10.6.6.6"  # the member's own address instead of the sender's
    with pytest.raises(RingSignalError) as refused:
        open_sealed(_reseal(zlib.compress(bytes(plain))))
    assert refused.value.reason is DropReason.BAD_SIGNATURE


def _reseal(plain: bytes, src: int = A, dst: int = B) -> bytes:
    ephemeral = ec.generate_private_key(ec.SECP256R1())
    point = ephemeral.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    aead = AESGCM(rs._seal_key(ephemeral.exchange(ec.ECDH(), KEY_B.public_key()), point))
    return point + aead.encrypt(rs._NONCE, plain, rs._associated(src, dst))


def test_a_certificate_of_another_ca_is_untrusted() -> None:
    with pytest.raises(RingSignalError) as refused:
        open_sealed(seal(offer(), CERT_OTHER, OTHER_NODE_KEY))
    assert refused.value.reason is DropReason.UNTRUSTED


def test_a_member_cannot_sign_for_another_node_id() -> None:
    message = RingMessage("request", OV, B, A, "t2", time.time(), "overlay.link", {})  # A's certificate, B's id
    with pytest.raises(RingSignalError) as refused:
        rs.open_sealed(rs.seal(message, CERT_A, KEY_A, KEY_B.public_key()), B, ANCHOR, time.time(), key=KEY_B,
                       header_dst=A)  # fmt: skip
    assert refused.value.reason is DropReason.UNTRUSTED


def test_the_header_must_name_the_signed_sender() -> None:
    sealed = _reseal(zlib.decompress(rs._unseal(seal(offer()), A, B, KEY_B)), src=B)  # sealed with B as the header's src
    with pytest.raises(RingSignalError) as refused:
        open_sealed(sealed, src=B)
    assert refused.value.reason is DropReason.MALFORMED


def test_an_old_message_is_stale() -> None:
    sealed = seal(offer(ts=time.time() - rs.FRESH - 5))
    with pytest.raises(RingSignalError) as refused:
        open_sealed(sealed)
    assert refused.value.reason is DropReason.STALE


def test_a_decompression_bomb_is_refused() -> None:
    with pytest.raises(RingSignalError) as refused:
        open_sealed(_reseal(zlib.compress(bytes(10 * rs.MAX_SEALED_PLAIN))))
    assert refused.value.reason is DropReason.MALFORMED


def test_a_replay_within_the_window_is_refused_and_the_window_is_bounded() -> None:
    replay = rs.Replay(slots=3)
    message = offer()
    assert replay.fresh(message, 0.0)
    assert not replay.fresh(message, 1.0)
    for i in range(3):
        assert replay.fresh(RingMessage("request", OV, A, B, f"x{i}", 0.0, "overlay.link", {}), 2.0)
    assert replay.fresh(message, 3.0)  # pushed out of the bounded table (a relay sees few; the stale check stays)
