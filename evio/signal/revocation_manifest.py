"""The manifest a node signs before it broadcasts a signed document in chunks: the revocation list (review21e
E3; decision 0043) and the member list (decision 0063), `evio.node.document_flood`.

Pure: bytes and `now` in, verdicts out. The CA's signature covers the whole list, so no chunk can be checked
before all are in, and a frame's sender MAC proves nothing: assemblies keyed by sender MAC were evicted by
one-chunk forgeries from invented MACs. So the sending node first broadcasts a manifest, the SHA-256 (first 16
bytes) of each chunk it is about to send, signed with the key of its overlay-CA certificate. A receiver keeps
an assembly per signer (one each: a member's next manifest replaces its last), and takes a chunk only if its
hash is listed in a manifest of that serial: a forged chunk joins nothing, a forged manifest costs one signature
check, and a member can hold no more than its own one assembly whatever MACs it invents.

Manifest (after the flood's header of kind MANIFEST, whose index is 0 and count the chunk count)::

    node id (16) | certificate length (2) | certificate (DER) | chunk hashes (16 each) | signature (rest, ECDSA)

A document of more than `PART_HASHES` chunks (only a member list can be) lists too many hashes for one frame:
its manifest lists instead the hash of each part of its chunk hashes, `PART_HASHES` to a part, and the parts
follow the manifest as frames of their own (kind PARTS, index the part's), each taken only if the manifest lists
its hash; then the chunks. `listed(count)` says which the manifest of `count` chunks lists.

The signature covers `_CONTEXT`, the overlay's name and everything before it, header included. No timestamp: a
replayed manifest names a list a member once sent, whose chunks are checked against it and the whole list against
the CA's signature; it can only take the place of that member's own assembly.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal.host_claims import MAX_CERT_BYTES, MAX_FRAME_BYTES, MAX_SIG_BYTES, Certificates, ClaimError
from evio.signal.identity import TrustAnchor

HASH_BYTES = 16  # of SHA-256: a chunk matching a listed hash is a second preimage, 2^128 work
PART_HASHES = 64  # chunk hashes in a manifest, or in one part of them: 1,024 bytes, within a chunk's frame
_CONTEXT = b"evio-revocation-manifest/1\x00"
_LEN = struct.Struct("!H")


class ManifestError(ValueError):
    """A manifest that is malformed or does not verify; the message says why (a few words: it is a counter)."""


@dataclass(frozen=True)
class Manifest:
    node_id: int
    der: bytes
    hashes: tuple[bytes, ...]
    signature: bytes
    signed: bytes  # what the signature covers, less the context


def chunk_hash(chunk: bytes) -> bytes:
    return hashlib.sha256(chunk).digest()[:HASH_BYTES]


def listed(count: int) -> int:
    """How many hashes the manifest of `count` chunks lists: the chunks', or their parts' if more than a part."""
    return count if count <= PART_HASHES else -(-count // PART_HASHES)


def parts(chunks: list[bytes]) -> list[bytes]:
    """The parts of the hashes of `chunks` (none if the manifest lists them itself), each the bytes of a frame."""
    if len(chunks) <= PART_HASHES:
        return []
    hashed = [chunk_hash(c) for c in chunks]
    return [b"".join(hashed[i : i + PART_HASHES]) for i in range(0, len(hashed), PART_HASHES)]


def listing(chunks: list[bytes]) -> tuple[bytes, ...]:
    """What the manifest of `chunks` lists (`Manifest.hashes`): their hashes, or (`listed`) their parts'."""
    return tuple(chunk_hash(c) for c in parts(chunks) or chunks)


def split(part: bytes) -> tuple[bytes, ...]:
    return tuple(part[i : i + HASH_BYTES] for i in range(0, len(part), HASH_BYTES))


def pack(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, overlay: str, header: bytes, node_id: int,
         chunks: list[bytes]) -> bytes:  # fmt: skip
    """The manifest of `chunks` after the flood's `header`, signed with `key` (of `cert`, naming `node_id`)."""
    der = cert.public_bytes(serialization.Encoding.DER)
    body = header + node_id.to_bytes(16, "big") + _LEN.pack(len(der)) + der + b"".join(listing(chunks))
    frame = body + key.sign(_CONTEXT + overlay.encode() + b"\x00" + body, ec.ECDSA(hashes.SHA256()))
    if len(der) > MAX_CERT_BYTES or len(frame) > MAX_FRAME_BYTES:
        raise ValueError(f"a manifest of {len(frame)} bytes does not fit a frame")
    return frame


def parse(data: bytes, at: int, count: int) -> Manifest:
    """The fields of the manifest of `count` chunks in `data` from offset `at` (past the flood's header); its
    `hashes` are the chunks' or (`listed`) their parts'."""
    if len(data) > MAX_FRAME_BYTES or len(data) < at + 16 + _LEN.size:
        raise ManifestError("bad length")
    node_id = int.from_bytes(data[at : at + 16], "big")
    (cert_len,) = _LEN.unpack_from(data, at + 16)
    at += 16 + _LEN.size
    end = at + cert_len + HASH_BYTES * listed(count)
    if cert_len > MAX_CERT_BYTES or len(data) <= end or len(data) - end > MAX_SIG_BYTES:
        raise ManifestError("bad length")
    der = data[at : at + cert_len]
    return Manifest(node_id, der, split(data[at + cert_len : end]), data[end:], data[:end])


def check(anchor: TrustAnchor, overlay: str, manifest: Manifest, now: float, certificates: Certificates) -> None:
    """Nothing if `manifest` is signed with the key of a certificate the overlay CA issued for its node id, at
    `now` (Unix seconds); ManifestError otherwise. A certificate checked once costs one signature check after."""
    try:
        public = certificates.checked_key(anchor, manifest.der, manifest.node_id, now)
    except ClaimError as exc:
        raise ManifestError(str(exc)) from None
    try:
        public.verify(manifest.signature, _CONTEXT + overlay.encode() + b"\x00" + manifest.signed,
                      ec.ECDSA(hashes.SHA256()))  # fmt: skip
    except InvalidSignature:
        raise ManifestError("bad signature") from None
