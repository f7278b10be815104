"""STUN from the network, checked before aioice parses it.

Anyone who knows a tunnel's UDP port can send it STUN-shaped datagrams.
aioice 0.13's ``stun.parse_message`` validates only the message length: an
attribute whose value is shorter than its type needs (a 2-byte PRIORITY, say)
makes it raise ``struct.error`` instead of ``ValueError``, and aioice's own
receive callbacks catch only ``ValueError`` (lab-recipes 9). That exception
then escapes whatever loop fed the datagram in.

``stun_reject_reason`` is the pure check: framing (RFC 8489 section 5: the
top two bits zero, the magic cookie, a length that matches and is a multiple
of 4), every attribute inside the message, and the fixed-size attributes
aioice unpacks having their size. Whatever still fails aioice's parser is
reported as ``UNPARSABLE``. ``parse_stun`` turns every failure into
``MalformedStun``, a ``ValueError``: the one exception aioice's receive paths
expect.

``screen`` is what a tunnel socket takes from the network at all (issue 21,
M4): aioice answers any Binding request, a stranger's too, with an unsigned
400 (no USERNAME) or 401 (a USERNAME it does not know): 2.4 times the bytes,
to any source address, and a sign that the port is a tunnel's. A request
passes only if its USERNAME starts with the connection's own ufrag (RFC 8445
section 7.3: ``local:remote``) and its MESSAGE-INTEGRITY is made with the
connection's password, which only the peer has (signaling); a response only
if it answers a transaction of ours. Everything else is dropped without an
answer, the cheapest checks first: the header and the USERNAME are read in
place, and the HMAC runs only for a request naming our ufrag.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Callable, Container

from aioice import stun

from evio.tunnel.stun_framing import HEADER_LEN, StunReject, check_framing


class MalformedStun(ValueError):
    """A datagram that is not an acceptable STUN message; ``reason`` says why."""

    def __init__(self, reason: StunReject) -> None:
        super().__init__(reason.value)
        self.reason = reason


_aioice_parse: Callable[[bytes], stun.Message] = stun.parse_message


def parse_stun(data: bytes) -> stun.Message:
    """aioice's parser behind our checks: a message, or ``MalformedStun`` (a ValueError)."""
    reason = check_framing(data)
    if reason is not None:
        raise MalformedStun(reason)
    try:
        return _aioice_parse(bytes(data))
    except Exception:  # noqa: BLE001 - whatever the parser trips on, the datagram is bad
        raise MalformedStun(StunReject.UNPARSABLE) from None


class StunDrop(enum.Enum):
    """Why a STUN message for a tunnel socket is dropped unanswered (``screen``)."""

    MALFORMED = "stun-malformed"
    """Not a well-framed STUN message (``check_framing``) or not parsable."""
    UNKNOWN_USER = "stun-unknown-user"
    """A request without USERNAME, or naming another ufrag than the connection's."""
    UNAUTHENTICATED = "stun-unauthenticated"
    """A request naming our ufrag without the MESSAGE-INTEGRITY our password makes."""
    UNSOLICITED = "stun-unsolicited"
    """A response to no transaction of ours, or an indication (aioice takes none on an ICE socket)."""
    RATE_LIMITED = "stun-rate-limited"
    """More from one source than a peer's checks ever need (``evio.ratelimit``)."""


_USERNAME = 0x0006
_MESSAGE_INTEGRITY = 0x0008


def _class_of(data: bytes | bytearray | memoryview) -> int:
    """RFC 8489 section 5: the type's class bits C1 (0x100) and C0 (0x010); 0 request, 1 indication, 2-3 responses."""
    return ((data[0] << 1) & 2) | ((data[1] >> 4) & 1)


def is_request(data: bytes | bytearray | memoryview) -> bool:
    """A STUN request (``data`` has at least a header)."""
    return _class_of(data) == 0


def _attribute(data: bytes | bytearray | memoryview, wanted: int) -> bytes | None:
    """The value of the first ``wanted`` attribute; ``data`` passed ``check_framing``."""
    pos, n = HEADER_LEN, len(data)
    while pos + 4 <= n:
        attr_type, attr_len = struct.unpack_from("!HH", data, pos)
        if attr_type == wanted:
            return bytes(data[pos + 4 : pos + 4 + attr_len])
        pos += 4 + attr_len + (-attr_len % 4)
    return None


def screen(data: bytes, ufrag: str, password: str, pending: Container[bytes]) -> StunDrop | None:
    """None when a tunnel socket may hand ``data`` (first byte 0-3) to aioice, otherwise why not.

    ``ufrag`` and ``password`` are the connection's own (``local_username``, ``local_password``),
    ``pending`` the transaction ids of its requests in flight (``StunProtocol.transactions``)."""
    if check_framing(data) is not None:
        return StunDrop.MALFORMED
    kind = _class_of(data)
    if kind >= 2:
        return None if bytes(data[8:HEADER_LEN]) in pending else StunDrop.UNSOLICITED
    if kind == 1:
        return StunDrop.UNSOLICITED
    username = _attribute(data, _USERNAME)
    if username is None or not username.startswith(ufrag.encode() + b":"):
        return StunDrop.UNKNOWN_USER
    if not _integrity_ok(data, password.encode()):
        return StunDrop.UNAUTHENTICATED
    return None


def _integrity_ok(data: bytes | bytearray | memoryview, key: bytes) -> bool:
    """RFC 8489 section 14.5: the HMAC-SHA1 of the message up to MESSAGE-INTEGRITY, its length field
    counting up to the end of that attribute; ``data`` passed ``check_framing`` (the value is 20 bytes).
    Computed in place: aioice's parser, which would build the whole message first, costs twice as much."""
    pos, n = HEADER_LEN, len(data)
    while pos + 4 <= n:
        attr_type, attr_len = struct.unpack_from("!HH", data, pos)
        if attr_type == _MESSAGE_INTEGRITY:
            signed = bytearray(data[:pos])
            struct.pack_into("!H", signed, 2, pos + 24 - HEADER_LEN)
            expected = hmac.new(key, signed, hashlib.sha1).digest()
            return hmac.compare_digest(expected, bytes(data[pos + 4 : pos + 24]))
        pos += 4 + attr_len + (-attr_len % 4)
    return False


def stun_reject_reason(data: bytes | bytearray | memoryview) -> StunReject | None:
    """None if ``data`` parses as a STUN message, otherwise why not."""
    try:
        parse_stun(bytes(data))
    except MalformedStun as exc:
        return exc.reason
    return None
