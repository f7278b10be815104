"""STUN framing (RFC 8489 section 5), checked without parsing: shared by path setup and the data path.

A datagram in the STUN range (first byte 0-3) reaches aioice only if it is
framed as STUN: the top two bits zero, the magic cookie, a length that
matches and is a multiple of 4, every attribute inside the message, and the
fixed-size attributes aioice unpacks having their size. The data path drops
what fails here before handing a datagram back to aioice (``DropReason.MALFORMED_STUN``);
``path.stun_guard`` runs the same check before aioice's parser and adds the
checks that need the connection (``screen``). Pure, and free of aioice, so that
both rooms can use it without importing each other.
"""

from __future__ import annotations

import enum
import struct

_HEADER = struct.Struct("!HHI")
HEADER_LEN = 20
MAGIC_COOKIE = 0x2112A442

# aioice unpacks these with struct, or slices a fixed layout: their value size is fixed.
_FIXED_SIZE = {
    0x0003: 4,  # CHANGE-REQUEST
    0x000C: 4,  # CHANNEL-NUMBER (number + RFFU)
    0x000D: 4,  # LIFETIME
    0x0019: 4,  # REQUESTED-TRANSPORT
    0x0024: 4,  # PRIORITY
    0x0025: 0,  # USE-CANDIDATE
    0x0008: 20,  # MESSAGE-INTEGRITY (HMAC-SHA1)
    0x8028: 4,  # FINGERPRINT
    0x8029: 8,  # ICE-CONTROLLED
    0x802A: 8,  # ICE-CONTROLLING
}
# Addresses: reserved, family, port, then 4 (IPv4) or 16 (IPv6) bytes.
_ADDRESS = {0x0001, 0x0004, 0x0005, 0x0012, 0x0016, 0x0020, 0x802B, 0x802C}
_ADDRESS_SIZES = {1: 8, 2: 20}


class StunReject(enum.Enum):
    """Why a datagram in the STUN range (first byte 0-3) is not a STUN message we take."""

    SHORT = "stun-short"
    """Fewer bytes than a STUN header."""
    BAD_HEADER = "stun-bad-header"
    """Top bits set or no magic cookie."""
    BAD_LENGTH = "stun-bad-length"
    """The length field does not match the datagram, or is not a multiple of 4."""
    BAD_ATTRIBUTE = "stun-bad-attribute"
    """An attribute runs past the end, or a fixed-size attribute has the wrong size."""
    UNPARSABLE = "stun-unparsable"
    """Well framed, but aioice cannot make a message of it (unknown method, bad text, fingerprint)."""


def check_framing(data: bytes | bytearray | memoryview) -> StunReject | None:
    """The framing and attribute-size checks alone; None when the datagram may be parsed."""
    n = len(data)
    if n < HEADER_LEN:
        return StunReject.SHORT
    message_type, length, cookie = _HEADER.unpack_from(data, 0)
    if message_type & 0xC000 or cookie != MAGIC_COOKIE:
        return StunReject.BAD_HEADER
    if length != n - HEADER_LEN or length % 4:
        return StunReject.BAD_LENGTH
    pos = HEADER_LEN
    while pos < n:
        if pos + 4 > n:
            return StunReject.BAD_ATTRIBUTE
        attr_type, attr_len = struct.unpack_from("!HH", data, pos)
        if pos + 4 + attr_len > n:
            return StunReject.BAD_ATTRIBUTE
        size = _FIXED_SIZE.get(attr_type)
        if size is not None and attr_len != size:
            return StunReject.BAD_ATTRIBUTE
        if attr_type in _ADDRESS:
            family = data[pos + 5] if attr_len >= 2 else 0
            if _ADDRESS_SIZES.get(family) != attr_len:
                return StunReject.BAD_ATTRIBUTE
        if attr_type == 0x0009 and attr_len < 4:  # ERROR-CODE: reserved, class, number, reason
            return StunReject.BAD_ATTRIBUTE
        pos += 4 + attr_len + (-attr_len % 4)
    return None
