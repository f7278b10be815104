"""Frame records: the datagrams that carry Ethernet frames between tunnel ends.

One record carries one Ethernet frame (or one control message) sealed with an
AEAD. It shares the ICE socket with STUN, DTLS and TURN channel data, so its
first byte must tell it apart from them (RFC 7983 section 7, updated by
RFC 9443):

    0-3 STUN | 16-19 ZRTP | 20-63 DTLS | 64-79 TURN channel | 80-127 free
    (QUIC short header in RFC 9443, never used here) | 128-191 RTP/RTCP

Layout (network byte order)::

    kind(1) | epoch(1) | counter(8) | AEAD(ciphertext || tag(16))

The 10-byte header is the AEAD's associated data, so kind, epoch and counter
cannot be altered. The nonce is the epoch's 12-byte IV with the counter XORed
into its low 8 bytes (as TLS 1.3 does, RFC 8446 section 5.3); a counter is
never reused under one key because every epoch has its own key.

This module is pure: it packs and parses, and offers allocating ``seal`` /
``open_`` used by tests and the slow path. The fast path in
``fd_datapath`` performs the same steps in preallocated buffers.

Compatibility between releases (docs/operations.md, "Upgrades"): the header,
the two kinds and the opcodes below are fixed, and a control payload is never
lengthened. A new control message is a new opcode, sent only to a peer that
announced the feature for it (evio.signal.protocol); one that arrives anyway
is dropped counted as ``unknown-control`` (UnknownControlError), apart from
malformed control records (``bad-control``, which is what the previous
release, 0.1.0, counts it as), and the tunnel carries on. A new record kind
would take a first byte in 80-127 (RFC 9443's free range); an older node hands
such a datagram to its ICE agent, which ignores it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Protocol

from evio.tunnel.errors import RecordError, UnknownControlError

KIND_FRAME = 0x70
"""Record carrying one Ethernet frame."""
KIND_CONTROL = 0x71
"""Record carrying one control message (hello, keepalive, close)."""

HEADER = struct.Struct("!BBQ")
HEADER_LEN = HEADER.size  # 10
TAG_LEN = 16
OVERHEAD = HEADER_LEN + TAG_LEN
NONCE_LEN = 12
COUNTER_MAX = (1 << 64) - 1

# Ethernet header without FCS; a TAP hands over frames of at least this size.
ETHERNET_HEADER_LEN = 14

CONTROL = struct.Struct("!BB")
ECHO = struct.Struct("!BBQ")  # opcode, flags, token


class PacketClass(enum.Enum):
    """What a datagram on the shared ICE socket is, by its first byte."""

    STUN = "stun"
    DTLS = "dtls"
    TURN_CHANNEL = "turn-channel"
    RECORD = "record"
    OTHER = "other"


def classify(first_byte: int) -> PacketClass:
    """RFC 7983 demultiplexing by the first byte."""
    if first_byte <= 3:
        return PacketClass.STUN
    if 20 <= first_byte <= 63:
        return PacketClass.DTLS
    if 64 <= first_byte <= 79:
        return PacketClass.TURN_CHANNEL
    if first_byte in (KIND_FRAME, KIND_CONTROL):
        return PacketClass.RECORD
    return PacketClass.OTHER


class ControlOpcode(enum.IntEnum):
    HELLO = 1
    """Sent until the peer is heard; answered with HELLO + PEER_SEEN."""
    KEEPALIVE = 2
    """Sent when nothing else was sent for a keepalive interval."""
    CLOSE = 3
    """The sender is tearing the tunnel down."""
    ECHO_REQUEST = 4
    """Carries a token; the peer answers at once with ECHO_REPLY and the same token (round-trip time)."""
    ECHO_REPLY = 5
    """The answer to ECHO_REQUEST, token echoed."""
    PMTU_PROBE = 6
    """Path MTU probe (evio.tunnel.pmtu): a token, then zero padding to the size probed; answered with PMTU_ACK."""
    PMTU_ACK = 7
    """The answer to PMTU_PROBE, token echoed (not padded)."""
    OVERLAY_SIGNAL = 8
    """Signaling routed along the ring (decision 0064): opcode, flags, then at most ``MAX_SIGNAL_PAYLOAD`` bytes
    the tunnel does not read (evio.overlay.ring_signal). Sent only to a peer whose HELLO had HELLO_RELAYS_SIGNAL."""


ECHO_OPCODES = frozenset({ControlOpcode.ECHO_REQUEST, ControlOpcode.ECHO_REPLY, ControlOpcode.PMTU_ACK})
"""Opcodes whose payload is exactly ``ECHO``: opcode, flags, token."""


HELLO_PEER_SEEN = 0x01
"""HELLO flag: the sender has already received an authenticated record from us."""
HELLO_RELAYS_SIGNAL = 0x02
"""HELLO flag: the sender reads OVERLAY_SIGNAL (decision 0064). The previous release ignores the bit and never sets it."""
MAX_SIGNAL_PAYLOAD = 1200
"""Bytes of an OVERLAY_SIGNAL after opcode and flags: a record that fits a 1280-byte path unfragmented."""


@dataclass(frozen=True)
class RecordHeader:
    kind: int
    epoch: int
    counter: int


@dataclass(frozen=True)
class ControlMessage:
    opcode: ControlOpcode
    flags: int
    token: int = 0
    """Echo opcodes only: opaque to the receiver, which sends it back."""
    payload: bytes = b""
    """OVERLAY_SIGNAL only: what follows opcode and flags."""


def pack_header(kind: int, epoch: int, counter: int) -> bytes:
    return HEADER.pack(kind, epoch & 0xFF, counter)


def parse_header(data: bytes | bytearray | memoryview) -> RecordHeader:
    """Parse the header of a whole record; the record must hold at least a tag."""
    if len(data) < OVERHEAD:
        raise RecordError("truncated")
    kind, epoch, counter = HEADER.unpack_from(data, 0)
    if kind not in (KIND_FRAME, KIND_CONTROL):
        raise RecordError("unknown kind")
    return RecordHeader(kind, epoch, counter)


def pack_control(opcode: ControlOpcode, flags: int = 0, token: int = 0, payload: bytes = b"") -> bytes:
    if opcode in ECHO_OPCODES:
        return ECHO.pack(int(opcode), flags, token)
    if opcode is ControlOpcode.OVERLAY_SIGNAL:
        if not 0 < len(payload) <= MAX_SIGNAL_PAYLOAD:
            raise ValueError(f"signal payload of {len(payload)} bytes")
        return CONTROL.pack(int(opcode), flags) + payload
    return CONTROL.pack(int(opcode), flags)


def pack_probe(token: int, payload_len: int) -> bytes:
    """A PMTU_PROBE payload of ``payload_len`` bytes: the token, then zeros (sealed like any record)."""
    if payload_len < ECHO.size:
        raise ValueError(f"probe payload {payload_len} shorter than {ECHO.size}")
    return ECHO.pack(int(ControlOpcode.PMTU_PROBE), 0, token) + bytes(payload_len - ECHO.size)


def parse_control(payload: bytes | bytearray | memoryview) -> ControlMessage:
    if len(payload) < CONTROL.size:
        raise RecordError("control payload length")
    try:
        opcode = ControlOpcode(payload[0])
    except ValueError:
        raise UnknownControlError("unknown control opcode") from None
    if opcode is ControlOpcode.PMTU_PROBE:
        if len(payload) < ECHO.size:  # the padding's length is the probe's point, not checked
            raise RecordError("control payload length")
        _, flags, token = ECHO.unpack_from(payload, 0)
        return ControlMessage(opcode, flags, token)
    if opcode in ECHO_OPCODES:
        if len(payload) != ECHO.size:
            raise RecordError("control payload length")
        _, flags, token = ECHO.unpack_from(payload, 0)
        return ControlMessage(opcode, flags, token)
    if opcode is ControlOpcode.OVERLAY_SIGNAL:
        if not CONTROL.size < len(payload) <= CONTROL.size + MAX_SIGNAL_PAYLOAD:
            raise RecordError("control payload length")
        return ControlMessage(opcode, payload[1], 0, bytes(payload[CONTROL.size :]))
    if len(payload) != CONTROL.size:
        raise RecordError("control payload length")
    return ControlMessage(opcode, payload[1])


def nonce(iv: bytes, counter: int) -> bytes:
    """Per-record nonce: the IV with the counter XORed into its last 8 bytes."""
    low = int.from_bytes(iv[4:], "big") ^ counter
    return iv[:4] + low.to_bytes(8, "big")


class Aead(Protocol):
    """What cryptography's AESGCM and ChaCha20Poly1305 offer."""

    def encrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...

    def decrypt(self, nonce: bytes, data: bytes, associated_data: bytes | None) -> bytes: ...


def seal(aead: Aead, iv: bytes, kind: int, epoch: int, counter: int, plaintext: bytes) -> bytes:
    """Build one record (allocating; the fast path does the same in place)."""
    if not 0 <= counter <= COUNTER_MAX:
        raise RecordError("counter out of range")
    header = pack_header(kind, epoch, counter)
    return header + aead.encrypt(nonce(iv, counter), plaintext, header)


def open_(aead: Aead, iv: bytes, record: bytes) -> tuple[RecordHeader, bytes]:
    """Check and decrypt one record; raises RecordError on any failure."""
    from cryptography.exceptions import InvalidTag

    header = parse_header(record)
    aad = bytes(record[:HEADER_LEN])
    try:
        plaintext = aead.decrypt(nonce(iv, header.counter), bytes(record[HEADER_LEN:]), aad)
    except InvalidTag:
        raise RecordError("forged") from None
    return header, plaintext
