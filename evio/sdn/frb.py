"""The Flood Route and Bound (FRB) frame: a pure codec (paper section 3.2.2; docs/design.md, "FRB frame").

Wire format, compatible with the original EdgeVPN BoundedFlood controller
(`FloodRouteBound`, pack string ``!16s16sBBB``)::

    dst(6) src(6) ethertype(2) = 0xC0C0
    root_nid(16) bound_nid(16) hop_count(1) frb_type(1) pl_count(1)    35 bytes, ids big-endian
    payload

Types keep the original's numbers, so frames interoperate both ways:

======================  ====  =========================================================
type                    value payload
======================  ====  =========================================================
BROADCAST               0     the original Ethernet frame; pl_count 0
LEAF_ANNOUNCE           1     pl_count leaf MAC addresses, 6 bytes each
BROADCAST_FORWARD       2     as BROADCAST; the original sends it when a switch re-roots
                              a broadcast that came in on a peer port (FRB_FWD), and its
                              receivers drop it; we parse it so the controller can too
LINK_CHECK              3     none; pl_count 0
LINK_ACK                4     none; pl_count 0
BROADCAST_REVERSE       5     evio's own: the Ethernet header (14 bytes) of a broadcast,
                              flooded counter-clockwise for learning only, never
                              delivered (since bd3f655, before 0.1.0; a node older
                              than that drops it as malformed and loses no delivery)
======================  ====  =========================================================

What the original sends, and so what `parse` accepts (anything else is
malformed and rejected with an `FrbReason`):

- broadcasts: the root sends hop_count 1, each forwarder adds 1, so
  hop_count >= 1. A bound equal to the root is normal: the root's last
  neighbour gets it, its arc wrapping back to the root. Whether a bound makes
  sense for the receiving node is the controller's question, not the codec's.
  The inner frame must hold at least an Ethernet header (14 bytes), may not
  itself be an FRB (nothing wraps one), and must have a unicast source MAC:
  that is the MAC every switch on the way learns.
- a reverse copy (evio only) obeys the broadcast rules and carries exactly
  the 14-byte Ethernet header of a frame sent to a group address (the only
  frames evio floods both ways round).
- leaf announcements, link checks and link acks travel one hop between
  adjacent switches: hop_count 0 and bound == root (the sender's own id).
  pl_count 0 is a valid leaf announcement ("no leaf devices here"); each
  announced MAC must be unicast, non-zero and announced once.
- the outer source MAC must be unicast (for a broadcast it is the inner
  frame's source, as in the original).
- frames shorter than Ethernet's 60-byte minimum may arrive padded to exactly
  60 bytes (a link check is only 49 bytes); the padding is ignored whatever
  its content, since some NICs pad with junk. Any other byte beyond the
  payload is rejected (TRAILING_BYTES).
  `pack` never pads.

`parse` raises only `FrbParseError`; `pack` and the constructors raise only
`FrbPackError`, and never produce a frame that `parse` would reject.

Compatibility between releases (docs/operations.md, "Upgrades"): the 35-byte
header and the meaning of the six types above are fixed; there is no version
field. A frb_type this release does not know is a newer node's, not a broken
frame: `parse` refuses it with UNKNOWN_TYPE, and the switch drops it counted as
UNKNOWN_FRB_TYPE, apart from malformed frames, and never forwards it (it cannot
know the type's bounds). So a new type is added with a new value (6 and up),
and a node sends it only to a peer that said it knows it (a feature in that
peer's presence announcement, evio.signal.protocol): an older node, or the
previous release (evio 0.1.0, which counts an unknown type as malformed), never
gets it. BROADCAST_REVERSE came before 0.1.0: every release understands it.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from evio.ids import MAX_NODE_ID

ETH_TYPE_FRB = 0xC0C0
ETH_HEADER_LEN = 14
FRB_HEADER_LEN = 35
FRB_MIN_FRAME_LEN = ETH_HEADER_LEN + FRB_HEADER_LEN  # 49
ETH_MIN_FRAME_LEN = 60  # without FCS: shorter frames may arrive padded to this
MAC_LEN = 6
MAX_PL_COUNT = 0xFF
MAX_HOP_COUNT = 0xFF
BROADCAST_MAC = b"\xff" * MAC_LEN

# Ethernet header and FRB header in one go; ids as two 64-bit halves each.
_FRAME_HEAD = struct.Struct("!6s6sHQQQQBBB")
_ETHERTYPE_AT = 12
_ETHERTYPE = struct.Struct("!H")
assert _FRAME_HEAD.size == FRB_MIN_FRAME_LEN


class FrbType(enum.IntEnum):
    BROADCAST = 0
    LEAF_ANNOUNCE = 1
    BROADCAST_FORWARD = 2
    LINK_CHECK = 3
    LINK_ACK = 4
    BROADCAST_REVERSE = 5

    @property
    def carries_frame(self) -> bool:
        return self in _FRAME_CARRYING


_FRAME_CARRYING = frozenset({FrbType.BROADCAST, FrbType.BROADCAST_FORWARD, FrbType.BROADCAST_REVERSE})
# Looked up by value in parse: a dict is faster than FrbType(value) and never raises.
_TYPES: dict[int, FrbType] = {t.value: t for t in FrbType}


class FrbReason(enum.Enum):
    """Why a frame is not a well-formed FRB."""

    TOO_SHORT = "shorter than the 49-byte Ethernet and FRB headers"
    WRONG_ETHERTYPE = "ethertype is not 0xC0C0"
    UNKNOWN_TYPE = "frb_type is not a known FRB type (a newer node's: ignored, not malformed)"
    BAD_SOURCE_MAC = "outer source MAC is multicast"
    BAD_HOP_COUNT = "hop_count is 0 on a broadcast or not 0 on a one-hop control frame"
    BAD_BOUND = "bound_nid differs from root_nid on a one-hop control frame"
    PAYLOAD_COUNT_MISMATCH = "pl_count is not 0 on a type that carries no counted payload"
    EMPTY_PAYLOAD = "broadcast without an inner frame"
    TRUNCATED_PAYLOAD = "payload shorter than the header says"
    TRAILING_BYTES = "bytes beyond the payload that are not minimum-frame padding"
    NESTED_FRB = "broadcast whose inner frame is itself an FRB"
    BAD_INNER_SOURCE_MAC = "inner frame's source MAC is multicast"
    BAD_LEAF_MAC = "announced leaf MAC is multicast or all zeros"
    DUPLICATE_LEAF_MAC = "a leaf MAC is announced twice"
    OUT_OF_RANGE = "a field does not fit its wire width"
    BAD_REVERSE = "reverse copy that is not exactly the Ethernet header of a group-addressed frame"


class FrbError(Exception):
    """Base of the FRB codec's errors."""

    def __init__(self, reason: FrbReason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.name}: {reason.value}" + (f" ({detail})" if detail else ""))


class FrbParseError(FrbError):
    """Bytes from the network that are not a well-formed FRB frame."""


class FrbPackError(FrbError, ValueError):
    """An FrbFrame that cannot be put on the wire."""


@dataclass(frozen=True, slots=True)
class FrbHeader:
    root_nid: int
    bound_nid: int
    hop_count: int
    frb_type: FrbType
    pl_count: int = 0


@dataclass(frozen=True, slots=True)
class FrbFrame:
    """An FRB in its Ethernet frame. MACs are 6 raw bytes; `payload` excludes padding."""

    dst: bytes
    src: bytes
    header: FrbHeader
    payload: bytes = b""

    @property
    def leaf_macs(self) -> tuple[str, ...]:
        """The announced MACs as "aa:bb:cc:dd:ee:ff" (empty unless a leaf announcement)."""
        if self.header.frb_type is not FrbType.LEAF_ANNOUNCE:
            return ()
        p = self.payload
        return tuple(format_mac(p[i : i + MAC_LEN]) for i in range(0, len(p), MAC_LEN))

    @property
    def inner_src(self) -> str | None:
        """Source MAC of the carried frame, the one a switch learns (None unless a broadcast)."""
        if not self.header.frb_type.carries_frame:
            return None
        return format_mac(self.payload[6:12])


# ---------------------------------------------------------------------------- MAC text


def format_mac(raw: bytes) -> str:
    """6 raw bytes as lowercase "aa:bb:cc:dd:ee:ff" (the form os-ken uses)."""
    if len(raw) != MAC_LEN:
        raise ValueError(f"a MAC is 6 bytes, got {len(raw)}")
    return raw.hex(":")


def parse_mac(text: str) -> bytes:
    """ "aa:bb:cc:dd:ee:ff" (either case) as 6 raw bytes."""
    parts = text.split(":")
    if len(parts) != MAC_LEN or not all(len(p) == 2 for p in parts):
        raise ValueError(f"not a MAC address: {text!r}")
    try:
        return bytes.fromhex("".join(parts))
    except ValueError:
        raise ValueError(f"not a MAC address: {text!r}") from None


def _is_group(mac_first_octet: int) -> bool:
    return bool(mac_first_octet & 0x01)  # I/G bit: multicast or broadcast


# ---------------------------------------------------------------------------- parse


_TYPE_AT = FRB_MIN_FRAME_LEN - 2  # the frb_type byte: before pl_count, the header's last


def peek_type(data: bytes | bytearray | memoryview) -> FrbType | None:
    """The FRB type a frame says it is, unchecked (for counting; `parse` checks), or None."""
    return _TYPES.get(data[_TYPE_AT]) if len(data) >= FRB_MIN_FRAME_LEN else None


def parse(data: bytes | bytearray | memoryview) -> FrbFrame:
    """Decode one Ethernet frame carrying an FRB; raise FrbParseError with the reason if malformed."""
    size = len(data)
    if size < FRB_MIN_FRAME_LEN:
        raise FrbParseError(FrbReason.TOO_SHORT, f"{size} bytes")
    dst, src, ethertype, r_hi, r_lo, b_hi, b_lo, hop_count, type_value, pl_count = _FRAME_HEAD.unpack_from(data)
    if ethertype != ETH_TYPE_FRB:
        raise FrbParseError(FrbReason.WRONG_ETHERTYPE, f"0x{ethertype:04x}")
    frb_type = _TYPES.get(type_value)
    if frb_type is None:
        raise FrbParseError(FrbReason.UNKNOWN_TYPE, str(type_value))
    root_nid = (r_hi << 64) | r_lo
    bound_nid = (b_hi << 64) | b_lo
    reason, payload_len = _check(src, root_nid, bound_nid, hop_count, frb_type, pl_count, data, size)
    if reason is not None:
        raise FrbParseError(reason)
    end = FRB_MIN_FRAME_LEN + payload_len
    return FrbFrame(
        dst,
        src,
        FrbHeader(root_nid, bound_nid, hop_count, frb_type, pl_count),
        bytes(data[FRB_MIN_FRAME_LEN:end]),
    )


def _check(
    src: bytes,
    root_nid: int,
    bound_nid: int,
    hop_count: int,
    frb_type: FrbType,
    pl_count: int,
    data: bytes | bytearray | memoryview,
    size: int,
) -> tuple[FrbReason | None, int]:
    """Semantic checks shared by parse and pack: (reason or None, payload length).

    `data` is the whole frame, `size` its length; the payload starts at byte 49.
    """
    if _is_group(src[0]):
        return FrbReason.BAD_SOURCE_MAC, 0
    available = size - FRB_MIN_FRAME_LEN
    if frb_type.carries_frame:
        if hop_count == 0:
            return FrbReason.BAD_HOP_COUNT, 0
        if pl_count != 0:
            return FrbReason.PAYLOAD_COUNT_MISMATCH, 0
        if available == 0:
            return FrbReason.EMPTY_PAYLOAD, 0
        if available < ETH_HEADER_LEN:
            return FrbReason.TRUNCATED_PAYLOAD, 0
        inner = FRB_MIN_FRAME_LEN
        if _is_group(data[inner + 6]):
            return FrbReason.BAD_INNER_SOURCE_MAC, 0
        if _ETHERTYPE.unpack_from(data, inner + _ETHERTYPE_AT)[0] == ETH_TYPE_FRB:
            return FrbReason.NESTED_FRB, 0
        if frb_type is FrbType.BROADCAST_REVERSE and (available != ETH_HEADER_LEN or not _is_group(data[inner])):
            return FrbReason.BAD_REVERSE, 0
        return None, available  # the inner frame is opaque past its header
    # One-hop control frames: leaf announcement, link check, link ack.
    if hop_count != 0:
        return FrbReason.BAD_HOP_COUNT, 0
    if bound_nid != root_nid:
        return FrbReason.BAD_BOUND, 0
    if frb_type is FrbType.LEAF_ANNOUNCE:
        payload_len = pl_count * MAC_LEN
    elif pl_count != 0:
        return FrbReason.PAYLOAD_COUNT_MISMATCH, 0
    else:
        payload_len = 0
    if available < payload_len:
        return FrbReason.TRUNCATED_PAYLOAD, 0
    if available > payload_len and size != ETH_MIN_FRAME_LEN:
        return FrbReason.TRAILING_BYTES, 0
    if payload_len:
        reason = _check_leaf_macs(data, payload_len)
        if reason is not None:
            return reason, 0
    return None, payload_len


def _check_leaf_macs(data: bytes | bytearray | memoryview, payload_len: int) -> FrbReason | None:
    seen: set[bytes] = set()
    for at in range(FRB_MIN_FRAME_LEN, FRB_MIN_FRAME_LEN + payload_len, MAC_LEN):
        mac = bytes(data[at : at + MAC_LEN])
        if _is_group(mac[0]) or mac == b"\x00" * MAC_LEN:
            return FrbReason.BAD_LEAF_MAC
        if mac in seen:
            return FrbReason.DUPLICATE_LEAF_MAC
        seen.add(mac)
    return None


# ---------------------------------------------------------------------------- pack


def pack(frame: FrbFrame) -> bytes:
    """Encode `frame`; raise FrbPackError if it does not fit the wire or parse would reject it."""
    h = frame.header
    if len(frame.dst) != MAC_LEN or len(frame.src) != MAC_LEN:
        raise FrbPackError(FrbReason.OUT_OF_RANGE, "MACs are 6 bytes")
    for name, nid in (("root_nid", h.root_nid), ("bound_nid", h.bound_nid)):
        if not 0 <= nid <= MAX_NODE_ID:
            raise FrbPackError(FrbReason.OUT_OF_RANGE, f"{name}={nid}")
    if not 0 <= h.hop_count <= MAX_HOP_COUNT:
        raise FrbPackError(FrbReason.OUT_OF_RANGE, f"hop_count={h.hop_count}")
    if not 0 <= h.pl_count <= MAX_PL_COUNT:
        raise FrbPackError(FrbReason.OUT_OF_RANGE, f"pl_count={h.pl_count}")
    frb_type = _TYPES.get(h.frb_type)
    if frb_type is None:
        raise FrbPackError(FrbReason.UNKNOWN_TYPE, str(h.frb_type))
    wire = (
        _FRAME_HEAD.pack(
            frame.dst,
            frame.src,
            ETH_TYPE_FRB,
            h.root_nid >> 64,
            h.root_nid & 0xFFFF_FFFF_FFFF_FFFF,
            h.bound_nid >> 64,
            h.bound_nid & 0xFFFF_FFFF_FFFF_FFFF,
            h.hop_count,
            frb_type,
            h.pl_count,
        )
        + frame.payload
    )
    reason, payload_len = _check(
        frame.src, h.root_nid, h.bound_nid, h.hop_count, frb_type, h.pl_count, wire, len(wire)
    )
    if reason is None and payload_len != len(frame.payload):
        # Parse would read these bytes as padding; pack never pads, so they are an error here.
        reason = FrbReason.TRAILING_BYTES
    if reason is not None:
        raise FrbPackError(reason)
    return wire


# ---------------------------------------------------------------------------- constructors


def broadcast(
    inner_frame: bytes,
    root_nid: int,
    bound_nid: int,
    hop_count: int,
    frb_type: FrbType = FrbType.BROADCAST,
) -> FrbFrame:
    """An FRB carrying `inner_frame`; as in the original, dst is broadcast and src the inner source."""
    if len(inner_frame) < ETH_HEADER_LEN:
        reason = FrbReason.EMPTY_PAYLOAD if not inner_frame else FrbReason.TRUNCATED_PAYLOAD
        raise FrbPackError(reason)
    return FrbFrame(
        BROADCAST_MAC,
        bytes(inner_frame[6:12]),
        FrbHeader(root_nid, bound_nid, hop_count, frb_type, 0),
        bytes(inner_frame),
    )


def leaf_announce(dst: bytes, src: bytes, node_nid: int, leaf_macs: Iterable[str]) -> FrbFrame:
    """Tell the adjacent switch at `dst` which leaf MACs `node_nid` hosts."""
    try:
        raw = [parse_mac(m) for m in leaf_macs]
    except ValueError as err:
        raise FrbPackError(FrbReason.BAD_LEAF_MAC, str(err)) from None
    if len(raw) > MAX_PL_COUNT:
        raise FrbPackError(FrbReason.OUT_OF_RANGE, f"{len(raw)} leaf MACs, at most {MAX_PL_COUNT}")
    return FrbFrame(dst, src, FrbHeader(node_nid, node_nid, 0, FrbType.LEAF_ANNOUNCE, len(raw)), b"".join(raw))


def link_check(dst: bytes, src: bytes, node_nid: int) -> FrbFrame:
    return FrbFrame(dst, src, FrbHeader(node_nid, node_nid, 0, FrbType.LINK_CHECK, 0))


def link_ack(dst: bytes, src: bytes, node_nid: int) -> FrbFrame:
    return FrbFrame(dst, src, FrbHeader(node_nid, node_nid, 0, FrbType.LINK_ACK, 0))
