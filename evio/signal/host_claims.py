"""Signed announcements of the MACs a node hosts, and who holds each MAC (issue 21, review21b; decision 0055).

Pure: bytes and `now` in, verdicts out. No frame proves who sent it, so a member could place any MAC
under its own root with one forged flood; a host that only *receives* (a one-way stream) sends nothing its
place could vouch with. So each node says which MACs it hosts (its bridge's and its leaf ports' own, and
the hosts learned on its leaf ports), signed with the key of its overlay-CA certificate, and the others
place such a MAC only under that node's root (evio.sdn.switch, `_may_speak_for`).

Announcement (after the Ethernet header; ethertype `evio.node.host_claims.ETHERTYPE`)::

    magic "EVHC" | version (1) | node id (16) | issued, ms since the epoch (8) | overlay length (1) | overlay
    | certificate length (2) | certificate (DER) | MAC count (1) | MACs (6 each) | signature (rest, ECDSA P-256)

The signature covers `_CONTEXT` and everything before it. An announcement is the node's whole list:
a later one replaces it (and withdraws what it no longer names). One frame, at most `MAX_MACS` MACs
(a node hosting more announces the first `MAX_MACS` and counts the rest; those keep today's rules).

`HostClaims` keeps each member's latest list (by `issued`, so an old announcement replayed changes
nothing) for `LIFETIME` after it was issued, and names a MAC's owner only when exactly one member
claims it: a member announcing another's MAC makes it *disputed*, which brings back the rules of an
unannounced MAC (it cannot take the MAC so, only take away this protection, and is seen doing it).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal.identity import TrustAnchor

MAGIC = b"EVHC"
VERSION = 1
MAX_MACS = 64  # per member: its bridge's own MACs and its hosts; ~400 bytes, one frame with the certificate
MAX_CERT_BYTES = 2048
MAX_SIG_BYTES = 80  # an ECDSA P-256 signature in DER is at most 72
MAX_FRAME_BYTES = 1350  # within a tunnel TAP's frame less the FRB that carries it (evio.sdn.switch)
# Seconds an announcement holds after it was issued; nodes announce again every third of it: 0.1 broadcast per
# node a minute in an idle overlay (issue 23 allows 1 for all of an idle node's multicast). A member that left
# keeps its claims that long; revoked, it loses them as the list is adopted.
LIFETIME = 1800.0
CLOCK_SKEW = 300.0  # an announcement issued this far in the future is still taken (nodes' clocks differ)
MAX_OVERLAY = 32
_CONTEXT = b"evio-host-claims/1\x00"
_HEAD = struct.Struct("!4sB16sQB")


class ClaimError(ValueError):
    """An announcement that is malformed or does not verify; the message says why (a few words: it is a counter)."""


@dataclass(frozen=True)
class Announcement:
    overlay: str
    node_id: int
    issued_ms: int
    macs: tuple[str, ...]


def pack(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate, overlay: str, node_id: int, issued_ms: int,
         macs: Iterable[str]) -> bytes:  # fmt: skip
    """A signed announcement of `macs` (at most `MAX_MACS`; the caller cuts and counts)."""
    name = overlay.encode()
    der = cert.public_bytes(serialization.Encoding.DER)
    raw = [bytes.fromhex(mac.replace(":", "")) for mac in macs]
    if len(raw) > MAX_MACS or len(name) > MAX_OVERLAY or len(der) > MAX_CERT_BYTES:
        raise ValueError("announcement too large")
    body = (_HEAD.pack(MAGIC, VERSION, node_id.to_bytes(16, "big"), issued_ms, len(name)) + name
            + struct.pack("!H", len(der)) + der + bytes([len(raw)]) + b"".join(raw))  # fmt: skip
    return body + key.sign(_CONTEXT + body, ec.ECDSA(hashes.SHA256()))


def verify(anchor: TrustAnchor, data: bytes, now: float) -> Announcement:
    """The announcement in `data`, if its certificate is the overlay CA's for its node id and signed it."""
    if len(data) > MAX_FRAME_BYTES:
        raise ClaimError("too long")
    if len(data) < _HEAD.size:
        raise ClaimError("short")
    magic, version, node, issued_ms, name_len = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ClaimError("not an announcement")
    at = _HEAD.size
    overlay = data[at : at + name_len]
    at += name_len
    if len(overlay) != name_len or overlay.decode(errors="replace") != anchor.overlay:
        raise ClaimError("another overlay")
    if len(data) < at + 2:
        raise ClaimError("short")
    (cert_len,) = struct.unpack_from("!H", data, at)
    at += 2
    if cert_len > MAX_CERT_BYTES or len(data) < at + cert_len + 1:
        raise ClaimError("bad certificate length")
    der = data[at : at + cert_len]
    at += cert_len
    count = data[at]
    at += 1
    if count > MAX_MACS or len(data) < at + 6 * count:
        raise ClaimError("bad MAC count")
    raw = data[at : at + 6 * count]
    at += 6 * count
    signature = data[at:]
    if not signature or len(signature) > MAX_SIG_BYTES:
        raise ClaimError("bad signature length")
    if issued_ms / 1000 < now - LIFETIME or issued_ms / 1000 > now + CLOCK_SKEW:
        raise ClaimError("stale")
    node_id = int.from_bytes(node, "big")
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        raise ClaimError("certificate unreadable") from None
    if anchor.refusal(cert, node_id, datetime.datetime.fromtimestamp(now, datetime.UTC)) is not None:
        raise ClaimError("certificate refused")
    public = cert.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey):
        raise ClaimError("certificate key is not ECDSA")
    try:
        public.verify(signature, _CONTEXT + data[: len(data) - len(signature)], ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise ClaimError("bad signature") from None
    macs = tuple(raw[i : i + 6].hex(":") for i in range(0, len(raw), 6))
    if any(int(mac[:2], 16) & 1 or mac == "00:00:00:00:00:00" for mac in macs):
        raise ClaimError("group or zero MAC")
    return Announcement(anchor.overlay, node_id, issued_ms, macs)


class HostClaims:
    """Each member's latest announced MACs, and the MACs exactly one member holds."""

    def __init__(self) -> None:
        self._lists: dict[int, Announcement] = {}
        self.disputed: frozenset[str] = frozenset()
        self._owners: dict[str, int] = {}

    def take(self, ann: Announcement) -> bool:
        """A verified announcement; True when it changed who holds what (an older or equal one never does)."""
        held = self._lists.get(ann.node_id)
        if held is not None and held.issued_ms >= ann.issued_ms:
            return False
        self._lists[ann.node_id] = ann
        return held is None or held.macs != ann.macs

    def forget(self, node_ids: Iterable[int]) -> bool:
        """Members that left or were revoked: their claims go. True when any did."""
        return bool([self._lists.pop(n) for n in list(node_ids) if n in self._lists])

    def expire(self, now: float) -> bool:
        return self.forget([n for n, ann in self._lists.items() if ann.issued_ms / 1000 < now - LIFETIME])

    def owners(self) -> Mapping[str, int]:
        """MAC -> its one claimant (disputed MACs left out, and listed in `disputed`)."""
        owners: dict[str, int] = {}
        disputed: set[str] = set()
        for node, ann in sorted(self._lists.items()):
            for mac in ann.macs:
                if mac in owners and owners[mac] != node:
                    disputed.add(mac)
                owners.setdefault(mac, node)
        for mac in disputed:
            del owners[mac]
        self.disputed = frozenset(disputed)
        return owners

    def __len__(self) -> int:
        return len(self._lists)
