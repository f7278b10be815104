"""Signaling routed along the ring (decision 0064): the wire form, its signature, and the next hop. Pure.

A node with links sends a link request or a tunnel offer to a node it is not linked to over its tunnels
instead of through the XMPP server: each hop hands it to its linked peer closest to the target, as
Symphony routes (ring distance either way round, strictly closer at every hop, so it cannot loop), and the
answer comes back the same way. The tunnel carries it as an OVERLAY_SIGNAL control record
(evio.tunnel.datapath.record), to peers whose HELLO said they read it.

    origin: RingMessage --seal (sign, compress)--> sealed --chunks--> [chunk] --> tunnel to next_hop
    relay:  chunk --parse_header--> hops left? peer closer to dst? --> same chunk, one hop fewer
    target: chunks --Reassembly--> sealed --open_sealed (CA, signature, freshness)--> Replay --> handler

A chunk (at most MAX_SIGNAL_PAYLOAD bytes)::

    version(1) | kind(1) | hops left(1) | index(1) | count(1) | message id(4) | dst(16) | src(16) | data
                 [ | signature(64): if kind has SIGNED ]

The origin signs each chunk it sends (ECDSA P-256 with its certificate's key, r||s, over the chunk with its
hops byte zeroed): a relay that knows the origin's certificate key (`chunk_signed_by`) counts the chunk against
that origin's own relay budget, which a member sending junk under invented or others' srcs cannot reach
(review21h H1). A chunk without a signature, or from an origin whose key the relay does not know, is relayed
within the budget of the neighbour it came from, as before.

kind DATA carries one piece of a sealed message; kind UNREACHABLE (no data) tells the origin that the
message of that id found no next hop, so it falls back to the server at once instead of on its timeout.
A relay reads only the header: the sealed message is encrypted to the target's certificate key and
signed, so a relay can drop it (or say UNREACHABLE, which only sends it through the server) but neither
read it (an offer's ICE ufrag and password: review21f F8) nor alter it. Sealed (version 2)::

    ephemeral P-256 point (65, uncompressed) | AES-256-GCM( zlib( len(doc)(2) | doc | len(cert)(2) | cert (DER)
                                                                   | ECDSA-SHA256 signature ) )

ECIES: the AES key is HKDF-SHA256 of ECDH(ephemeral, target's certificate key) over the context and the
ephemeral point; the header's src and dst are the associated data (a relay that re-addresses a chunk
makes it unreadable). A key is used once (a new ephemeral key per message), so the nonce is fixed.

doc is JSON: {"kind": "request"|"response"|"error", "overlay", "src", "dst", "txid", "ts", and "action"
and "body" (request), "body" (response), "reason" and "text" (error)}; the signature covers the context
and doc. The target checks that the overlay CA issued the certificate for doc's src (the header's src
must match), that ts is within FRESH seconds of its clock, and (Replay) that the same (src, kind, txid)
was not seen within that window.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from evio.signal.identity import TrustAnchor, load_certificate
from evio.signal.protocol import ACTION_RE, TXID_RE

__all__ = [
    "DATA", "FRESH", "HEADER", "MAX_CHUNKS", "MAX_HOPS", "SIGNATURE", "SIGNED", "UNREACHABLE", "Chunk", "DropReason",
    "Reassembly", "Replay", "RingMessage", "RingSignalError", "chunk_signed_by", "chunks", "forwarded", "next_hop",
    "open_sealed", "parse_chunk", "seal", "unreachable",
]

VERSION = 2  # 2: sealed to the target's key (review21f F8); 1 (signed only) was never released
DATA = 0
UNREACHABLE = 1
SIGNED = 0x80  # kind flag: a SIGNATURE follows the data (review21h H1)
HEADER = struct.Struct("!BBBBBI16s16s")
SIGNATURE = 64  # r || s of ECDSA P-256
MAX_PAYLOAD = 1200  # = evio.tunnel.datapath.record.MAX_SIGNAL_PAYLOAD (the overlay does not import the data path)
PIECE = MAX_PAYLOAD - HEADER.size - SIGNATURE
MAX_CHUNKS = 4  # an offer with a certificate takes 1-2
MAX_HOPS = 16  # greedy routing over Symphony takes O(log^2 n / k) hops: 16 is plenty past 1,000 nodes
MAX_DOC_BYTES = 16 * 1024  # the signaling protocol's own payload bound (evio.signal.protocol)
MAX_SEALED_PLAIN = MAX_DOC_BYTES + 4096
FRESH = 60.0  # seconds a signed message is taken for after its timestamp (either way: clocks differ)
REASSEMBLY_SLOTS = 32
REASSEMBLY_TIMEOUT = 5.0
REPLAY_SLOTS = 4096
_CONTEXT = b"evio-ring-signal/1\x00"
_CHUNK_CONTEXT = b"evio-ring-signal-chunk/1\x00"
_SEAL_CONTEXT = b"evio-ring-signal-seal/2\x00"
_POINT = 65  # an uncompressed P-256 point
_TAG = 16
_NONCE = bytes(12)  # each AES key seals one message (a new ephemeral key each time)
RING = 1 << 128
KINDS = ("request", "response", "error")


class DropReason(enum.Enum):
    """Why a chunk or message was dropped (counted; `evio status`)."""

    MALFORMED = "malformed"
    HOP_LIMIT = "hop_limit"
    NO_ROUTE = "no_route"
    RATE_LIMITED = "rate_limited"
    REASSEMBLY_FULL = "reassembly_full"
    UNTRUSTED = "untrusted"
    UNREADABLE = "unreadable"  # not sealed to our key, or altered on the way
    BAD_SIGNATURE = "bad_signature"
    STALE = "stale"
    REPLAYED = "replayed"
    REVOKED = "revoked"
    UNEXPECTED = "unexpected"  # an answer nobody waits for (late, or not ours)


class RingSignalError(ValueError):
    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class RingMessage:
    """A signaling request, response or error, as evio.signal.protocol has them, with a timestamp."""

    kind: str
    overlay: str
    src: int
    dst: int
    txid: str
    ts: float  # Unix seconds when sent
    action: str = ""
    body: dict[str, Any] | None = None
    reason: str = ""
    text: str = ""
    # The sender's certificate key, once opened (not sent: its certificate is): an answer is sealed to it.
    sender_key: ec.EllipticCurvePublicKey | None = field(default=None, compare=False, repr=False)

    def doc(self) -> bytes:
        doc: dict[str, Any] = {"kind": self.kind, "overlay": self.overlay, "src": f"{self.src:032x}",
                               "dst": f"{self.dst:032x}", "txid": self.txid, "ts": self.ts}  # fmt: skip
        if self.kind == "request":
            doc["action"], doc["body"] = self.action, self.body
        elif self.kind == "response":
            doc["body"] = self.body
        else:
            doc["reason"], doc["text"] = self.reason, self.text
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Chunk:
    kind: int
    hops: int
    index: int
    count: int
    message_id: int
    dst: int
    src: int
    data: bytes
    signature: bytes = b""  # SIGNATURE bytes if the origin signed it


# ---------------------------------------------------------------------------- routing


def distance(a: int, b: int) -> int:
    """Ring distance between a and b, the shorter way round: links are both ways, so a node's predecessor
    leads somewhere too (a node whose successor link is not up yet still routes)."""
    return min((b - a) % RING, (a - b) % RING)


def next_hop(own: int, target: int, peers: frozenset[int] | set[int]) -> int | None:
    """The linked peer to hand a message for ``target`` to: the target itself if linked, else the one
    closest to it on the ring, and only if strictly closer than we are (None: no route from here). Every
    hop is strictly closer, so a message cannot loop; over a closed ring of successor links it arrives."""
    if target in peers:
        return target
    best, best_distance = None, distance(own, target)
    for peer in peers:
        d = distance(peer, target)
        if d < best_distance:
            best, best_distance = peer, d
    return best


# ---------------------------------------------------------------------------- chunks


def parse_chunk(payload: bytes) -> Chunk:
    if not HEADER.size <= len(payload) <= MAX_PAYLOAD:
        raise RingSignalError(DropReason.MALFORMED, f"{len(payload)} bytes")
    version, kind, hops, index, count, message_id, dst, src = HEADER.unpack_from(payload)
    signature = b""
    if kind & SIGNED:
        kind &= ~SIGNED
        if len(payload) < HEADER.size + SIGNATURE:
            raise RingSignalError(DropReason.MALFORMED, f"signed, {len(payload)} bytes")
        signature, payload = payload[-SIGNATURE:], payload[:-SIGNATURE]
    if version != VERSION or kind not in (DATA, UNREACHABLE):
        raise RingSignalError(DropReason.MALFORMED, f"version {version} kind {kind}")
    if kind == DATA and not (1 <= count <= MAX_CHUNKS and index < count and len(payload) > HEADER.size):
        raise RingSignalError(DropReason.MALFORMED, f"chunk {index} of {count}")
    if hops > MAX_HOPS:
        raise RingSignalError(DropReason.HOP_LIMIT, f"{hops} hops left")
    return Chunk(kind, hops, index, count, message_id, int.from_bytes(dst), int.from_bytes(src), payload[HEADER.size :],
                 signature)  # fmt: skip


def _pack(chunk: Chunk, key: ec.EllipticCurvePrivateKey | None = None) -> bytes:
    kind = chunk.kind | (SIGNED if key is not None else 0)
    packed = HEADER.pack(VERSION, kind, chunk.hops, chunk.index, chunk.count, chunk.message_id,
                         chunk.dst.to_bytes(16), chunk.src.to_bytes(16)) + chunk.data  # fmt: skip
    if key is None:
        return packed
    r, s = decode_dss_signature(key.sign(_signed_part(packed), ec.ECDSA(hashes.SHA256())))
    return packed + r.to_bytes(32) + s.to_bytes(32)


def _signed_part(packed: bytes) -> bytes:
    """What a chunk's signature covers: all but its hops byte (each relay lowers it) and the signature."""
    return _CHUNK_CONTEXT + packed[:2] + b"\x00" + packed[3:]


def chunk_signed_by(payload: bytes, chunk: Chunk, key: ec.EllipticCurvePublicKey) -> bool:
    """Whether ``chunk`` (parsed from ``payload``) carries a signature of ``key``'s (its origin's, the relay
    believes: the key of the certificate the overlay CA issued for ``chunk.src``)."""
    if len(chunk.signature) != SIGNATURE:
        return False
    signature = encode_dss_signature(int.from_bytes(chunk.signature[:32]), int.from_bytes(chunk.signature[32:]))
    try:
        key.verify(signature, _signed_part(payload[:-SIGNATURE]), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def chunks(sealed: bytes, message_id: int, src: int, dst: int, hops: int = MAX_HOPS,
           key: ec.EllipticCurvePrivateKey | None = None) -> list[bytes]:  # fmt: skip
    """``sealed`` in pieces that each fit one record, each signed with ``key`` (``src``'s certificate key) if
    given; ValueError if it needs more than MAX_CHUNKS."""
    count = -(-len(sealed) // PIECE)
    if not 1 <= count <= MAX_CHUNKS:
        raise ValueError(f"a sealed message of {len(sealed)} bytes")
    return [_pack(Chunk(DATA, hops, i, count, message_id, dst, src, sealed[i * PIECE : (i + 1) * PIECE]), key)
            for i in range(count)]  # fmt: skip


def forwarded(payload: bytes, chunk: Chunk) -> bytes:
    """The same chunk with one hop fewer left (the caller checked there is one)."""
    return payload[:2] + bytes([chunk.hops - 1]) + payload[3:]


def unreachable(chunk: Chunk, own_hops: int = MAX_HOPS) -> bytes:
    """The notice for the origin of ``chunk`` that it found no route here."""
    return _pack(Chunk(UNREACHABLE, own_hops, 0, 1, chunk.message_id, chunk.src, chunk.dst, b""))


class Reassembly:
    """The chunks of messages for this node, bounded in slots, age and size; one slot per (src, message id).

    When every slot is taken the oldest gives way (counted in ``evicted``): the header's src is not
    authenticated until a message is whole, so refusing newcomers let anyone's first chunks from invented
    senders hold every slot for REASSEMBLY_TIMEOUT (review21f F2). An honest message's chunks are sent back to
    back, so it is whole long before REASSEMBLY_SLOTS newer messages start behind it."""

    def __init__(self, slots: int = REASSEMBLY_SLOTS, timeout: float = REASSEMBLY_TIMEOUT) -> None:
        self._slots = slots
        self._timeout = timeout
        self.evicted = 0
        self._parts: OrderedDict[tuple[int, int], tuple[float, dict[int, bytes], int]] = OrderedDict()

    def add(self, chunk: Chunk, now: float) -> bytes | None:
        """The whole sealed message once its last chunk came; RingSignalError when its chunk count changed."""
        if chunk.count == 1:
            return chunk.data
        for key, (started, _, _) in list(self._parts.items()):
            if now - started > self._timeout:
                del self._parts[key]
        key = (chunk.src, chunk.message_id)
        entry = self._parts.get(key)
        if entry is None:
            while len(self._parts) >= self._slots:
                self._parts.popitem(last=False)
                self.evicted += 1
            entry = self._parts[key] = (now, {}, chunk.count)
        started, pieces, count = entry
        if count != chunk.count:
            raise RingSignalError(DropReason.MALFORMED, "chunk count changed")
        pieces[chunk.index] = chunk.data
        if len(pieces) < count:
            return None
        del self._parts[key]
        return b"".join(pieces[i] for i in range(count))

    def __len__(self) -> int:
        return len(self._parts)


# ---------------------------------------------------------------------------- sealing


def seal(message: RingMessage, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey,
         to: ec.EllipticCurvePublicKey) -> bytes:
    """``message`` signed with ``key`` (``cert``'s) and encrypted to ``to``, the target's certificate key."""
    doc = message.doc()
    der = cert.public_bytes(serialization.Encoding.DER)
    signature = key.sign(_CONTEXT + doc, ec.ECDSA(hashes.SHA256()))
    plain = zlib.compress(struct.pack("!H", len(doc)) + doc + struct.pack("!H", len(der)) + der + signature, 9)
    ephemeral = ec.generate_private_key(ec.SECP256R1())
    point = ephemeral.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    aead = AESGCM(_seal_key(ephemeral.exchange(ec.ECDH(), to), point))
    return point + aead.encrypt(_NONCE, plain, _associated(message.src, message.dst))


def _seal_key(shared: bytes, point: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, None, _SEAL_CONTEXT + point).derive(shared)


def _associated(src: int, dst: int) -> bytes:
    return _SEAL_CONTEXT + src.to_bytes(16) + dst.to_bytes(16)


def _unseal(sealed: bytes, header_src: int, header_dst: int, key: ec.EllipticCurvePrivateKey) -> bytes:
    if len(sealed) <= _POINT + _TAG:
        raise RingSignalError(DropReason.MALFORMED, f"{len(sealed)} bytes sealed")
    point = sealed[:_POINT]
    try:
        ephemeral = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        shared = key.exchange(ec.ECDH(), ephemeral)
    except ValueError as exc:
        raise RingSignalError(DropReason.MALFORMED, f"ephemeral key: {exc}") from None
    try:
        return AESGCM(_seal_key(shared, point)).decrypt(_NONCE, sealed[_POINT:], _associated(header_src, header_dst))
    except InvalidTag:
        raise RingSignalError(DropReason.UNREADABLE, "not sealed to our key, or altered") from None


def open_sealed(sealed: bytes, header_src: int, anchor: TrustAnchor, now: float, *,
                key: ec.EllipticCurvePrivateKey, header_dst: int) -> RingMessage:  # fmt: skip
    """The message in ``sealed``, if it was sealed to ``key`` (ours) for the header's src and dst, the overlay
    CA's certificate for its sender signed it and it is fresh; its ``sender_key`` is that certificate's key.

    RingSignalError otherwise (MALFORMED, UNREADABLE, UNTRUSTED, BAD_SIGNATURE, STALE). ``now``: Unix seconds."""
    inflate = zlib.decompressobj()
    try:
        plain = inflate.decompress(_unseal(sealed, header_src, header_dst, key), MAX_SEALED_PLAIN)
    except zlib.error as exc:
        raise RingSignalError(DropReason.MALFORMED, f"not zlib: {exc}") from None
    if inflate.unconsumed_tail or not inflate.eof:
        raise RingSignalError(DropReason.MALFORMED, "larger than allowed, or cut short")
    try:
        (doc_len,) = struct.unpack_from("!H", plain, 0)
        doc = plain[2 : 2 + doc_len]
        (der_len,) = struct.unpack_from("!H", plain, 2 + doc_len)
        der = plain[4 + doc_len : 4 + doc_len + der_len]
        signature = plain[4 + doc_len + der_len :]
    except struct.error:
        raise RingSignalError(DropReason.MALFORMED, "cut short") from None
    if len(doc) != doc_len or len(der) != der_len or not signature:
        raise RingSignalError(DropReason.MALFORMED, "cut short")
    message = _message(doc)
    if message.src != header_src:
        raise RingSignalError(DropReason.MALFORMED, "sender differs from the header's")
    try:
        cert = load_certificate(der)
    except ValueError as exc:
        raise RingSignalError(DropReason.UNTRUSTED, f"certificate unreadable: {exc}") from None
    refusal = anchor.refusal(cert, message.src, datetime.datetime.fromtimestamp(now, datetime.UTC))
    if refusal is not None:
        raise RingSignalError(DropReason.UNTRUSTED, refusal)
    public = cert.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise RingSignalError(DropReason.UNTRUSTED, "certificate key is not ECDSA")
    try:
        public.verify(signature, _CONTEXT + doc, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise RingSignalError(DropReason.BAD_SIGNATURE, f"from {message.src:032x}") from None
    if abs(now - message.ts) > FRESH:
        raise RingSignalError(DropReason.STALE, f"{now - message.ts:.0f} s old")
    return dataclasses.replace(message, sender_key=public)


def _message(doc: bytes) -> RingMessage:
    try:
        value = json.loads(doc)
        kind = value["kind"]
        fields = {"kind", "overlay", "src", "dst", "txid", "ts"} | {
            "request": {"action", "body"}, "response": {"body"}, "error": {"reason", "text"}}[kind]  # fmt: skip
        if set(value) != fields or not all(isinstance(value[f], str) for f in ("overlay", "src", "dst", "txid")):
            raise ValueError("fields")
        if not isinstance(value["ts"], int | float) or isinstance(value["ts"], bool):
            raise ValueError("ts")
        # the server path's bounds: a member-chosen name is short, whatever it keys (review21g G3)
        if not TXID_RE.fullmatch(value["txid"]):
            raise ValueError("txid")
        if kind == "request" and not (isinstance(value["action"], str) and ACTION_RE.fullmatch(value["action"])):
            raise ValueError("action")
        body = value.get("body")
        if kind != "error" and not isinstance(body, dict):
            raise ValueError("body")
        return RingMessage(kind, value["overlay"], _node(value["src"]), _node(value["dst"]), value["txid"],
                           float(value["ts"]), str(value.get("action", "")), body, str(value.get("reason", "")),
                           str(value.get("text", "")))  # fmt: skip
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise RingSignalError(DropReason.MALFORMED, f"document: {exc}") from None


def _node(text: str) -> int:
    if len(text) != 32:
        raise ValueError("node id")
    return int(text, 16)


class Replay:
    """The (src, kind, txid) of messages taken in the last FRESH seconds (more would be stale anyway).

    Full, it forgets the oldest entry of the sender holding the most: a member's own signed messages, however
    many, push out only its own, never another's fresh offer, which a relay could then send again (review21g G8).
    """

    def __init__(self, slots: int = REPLAY_SLOTS, window: float = FRESH) -> None:
        self._slots = slots
        self._window = window
        self._seen: OrderedDict[tuple[int, str, str], float] = OrderedDict()
        self._by_sender: dict[int, OrderedDict[tuple[int, str, str], None]] = {}

    def fresh(self, message: RingMessage, now: float) -> bool:
        """True the first time; False for a replay. ``now``: the clock ``open_sealed`` was given."""
        while self._seen and now - next(iter(self._seen.values())) > 2 * self._window:
            self._forget(next(iter(self._seen)))
        key = (message.src, message.kind, message.txid)
        if key in self._seen:
            return False
        if len(self._seen) >= self._slots:
            biggest = max(self._by_sender.values(), key=len)
            self._forget(next(iter(biggest)))
        self._seen[key] = now
        self._by_sender.setdefault(message.src, OrderedDict())[key] = None
        return True

    def _forget(self, key: tuple[int, str, str]) -> None:
        del self._seen[key]
        own = self._by_sender[key[0]]
        del own[key]
        if not own:
            del self._by_sender[key[0]]
