"""Software TCP segmentation and checksum completion for frames the controller sends: pure.

Why. On the userspace datapath OVS runs with userspace TSO and checksum
offload on. A host stack behind a leaf port then hands the bridge TCP
super-frames of up to 64 KiB and frames whose TCP checksum is only partial
(the pseudo-header sum; the "hardware" was to finish it). When such a frame
rides a flow, OVS passes that metadata on and the kernel segments it and
finishes the checksum at the tunnel TAP. A frame sent by the controller in a
PacketOut carries no such metadata: a super-frame larger than the TAP's MTU
cannot be sent at all, and a partial checksum reaches the far host as a bad
one. Both are lost until the path is learned again, which is exactly when
churn sends frames through the controller (an unknown destination is
flooded). So the controller does here what the NIC would have done.

- `segment_tcp(frame, max_frame_len)` splits a TCP-over-IPv4/IPv6 frame
  into frames of at most `max_frame_len` bytes, as TSO would (RFC 9293's
  segments; the rules of Linux's tcp_gso_segment): the headers (options
  included) are copied, the sequence number advances by the payload before,
  FIN and PSH stay on the last segment only and CWR on the first only; the
  IPv4 total length, identification (+1 per segment) and header checksum,
  or the IPv6 payload length, and the TCP checksum are computed afresh (the
  input's may be partial). Anything it cannot segment raises `SegmentError`
  with a `SegmentReason`: not IP, not TCP, IPv4 fragments, IPv6 extension
  headers, SYN or URG set, headers that do not parse or leave no room.
- `complete_partial_checksum(frame)` finishes a TCP checksum left partial by
  offload (the field holds the pseudo-header sum) and returns the frame with
  the real checksum; any other frame comes back unchanged, so a checksum that
  is simply wrong stays wrong for the receiver to drop, as on a wire.

Sizes are whole Ethernet frames without FCS (14-byte header, untagged).
"""

from __future__ import annotations

import enum
import struct

ETH_HEADER_LEN = 14
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
IPV4_MIN_HEADER_LEN = 20
IPV6_HEADER_LEN = 40
TCP_MIN_HEADER_LEN = 20
PROTO_TCP = 6

# TCP flag bits (byte 13 of the header).
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = (1 << i for i in range(8))

_IPV4_MF = 0x2000
_IPV4_OFFSET = 0x1FFF
_TCP_CHECKSUM_AT = 16


class SegmentReason(enum.Enum):
    """Why a frame could not be segmented."""

    NOT_IP = "ethertype is neither IPv4 nor IPv6 (or the frame is tagged)"
    NOT_TCP = "IP packet that is not TCP"
    BAD_IP_HEADER = "IP version, header length or total length does not make sense"
    TRUNCATED = "frame shorter than its IP header says"
    FRAGMENT = "IPv4 fragment"
    IPV6_EXTENSION = "IPv6 extension headers or a jumbogram"
    BAD_TCP_HEADER = "TCP data offset below 5 words or beyond the packet"
    UNSUPPORTED_FLAGS = "SYN or URG on a frame to segment"
    NO_ROOM = "the headers leave no room for payload within the size limit"


class SegmentError(ValueError):
    def __init__(self, reason: SegmentReason) -> None:
        self.reason = reason
        super().__init__(f"{reason.name}: {reason.value}")


# ---------------------------------------------------------------------- the Internet checksum (RFC 1071)


def ones_complement_sum(data: bytes | bytearray | memoryview) -> int:
    """The 16-bit one's complement sum of `data` (zero-padded to even length), in 0..0xFFFF.

    2**16 is 1 modulo 0xFFFF, so the sum of the 16-bit words and the whole
    as one big-endian number agree modulo 0xFFFF: one C-speed `%` instead of
    a Python loop over the words. A non-zero sum that is a multiple of 0xFFFF
    is 0xFFFF (one's complement "negative zero"), as the folded loop gives.
    """
    raw = bytes(data)
    if len(raw) % 2:
        raw += b"\x00"
    value = int.from_bytes(raw, "big")
    if value == 0:
        return 0
    return value % 0xFFFF or 0xFFFF


def _add(a: int, b: int) -> int:
    total = a + b
    return (total & 0xFFFF) + (total >> 16)


def _checksum(*parts: int) -> int:
    """The checksum field for one's complement partial sums `parts`."""
    total = 0
    for part in parts:
        total = _add(total, part)
    return ~total & 0xFFFF


# ---------------------------------------------------------------------- parsing


class _Packet:
    """Offsets of one TCP/IP frame, checked: `ip_at`, `tcp_at`, `payload_at`, `end` (the IP packet's end)."""

    __slots__ = ("frame", "ipv6", "ip_at", "tcp_at", "payload_at", "end")

    def __init__(self, frame: bytes, ipv6: bool, ip_at: int, tcp_at: int, payload_at: int, end: int) -> None:
        self.frame = frame
        self.ipv6 = ipv6
        self.ip_at = ip_at
        self.tcp_at = tcp_at
        self.payload_at = payload_at
        self.end = end

    @property
    def flags(self) -> int:
        return self.frame[self.tcp_at + 13]

    def pseudo_sum(self, tcp_len: int) -> int:
        """One's complement sum of the pseudo-header (RFC 9293 3.1, RFC 8200 8.1) for `tcp_len` bytes of TCP."""
        f = self.frame
        if self.ipv6:
            addresses = f[self.ip_at + 8 : self.ip_at + 40]
            tail = struct.pack("!IxxxB", tcp_len, PROTO_TCP)
        else:
            addresses = f[self.ip_at + 12 : self.ip_at + 20]
            tail = struct.pack("!xBH", PROTO_TCP, tcp_len)
        return ones_complement_sum(addresses + tail)


def _parse(frame: bytes) -> _Packet:
    if len(frame) < ETH_HEADER_LEN:
        raise SegmentError(SegmentReason.TRUNCATED)
    ethertype = int.from_bytes(frame[12:14], "big")
    ip_at = ETH_HEADER_LEN
    if ethertype == ETH_TYPE_IPV4:
        if len(frame) < ip_at + IPV4_MIN_HEADER_LEN:
            raise SegmentError(SegmentReason.TRUNCATED)
        version_ihl, total_len, flags_offset, protocol = (
            frame[ip_at], int.from_bytes(frame[ip_at + 2 : ip_at + 4], "big"),
            int.from_bytes(frame[ip_at + 6 : ip_at + 8], "big"), frame[ip_at + 9],
        )  # fmt: skip
        header_len = (version_ihl & 0x0F) * 4
        if version_ihl >> 4 != 4 or header_len < IPV4_MIN_HEADER_LEN or total_len < header_len:
            raise SegmentError(SegmentReason.BAD_IP_HEADER)
        if len(frame) < ip_at + total_len:
            raise SegmentError(SegmentReason.TRUNCATED)
        if flags_offset & (_IPV4_MF | _IPV4_OFFSET):
            raise SegmentError(SegmentReason.FRAGMENT)
        if protocol != PROTO_TCP:
            raise SegmentError(SegmentReason.NOT_TCP)
        tcp_at, end, ipv6 = ip_at + header_len, ip_at + total_len, False
    elif ethertype == ETH_TYPE_IPV6:
        if len(frame) < ip_at + IPV6_HEADER_LEN:
            raise SegmentError(SegmentReason.TRUNCATED)
        if frame[ip_at] >> 4 != 6:
            raise SegmentError(SegmentReason.BAD_IP_HEADER)
        payload_len, next_header = int.from_bytes(frame[ip_at + 4 : ip_at + 6], "big"), frame[ip_at + 6]
        if next_header != PROTO_TCP:
            # Hop-by-hop (0, also a jumbogram's), routing, fragment, destination options, ...: not TCP here.
            extension = next_header in (0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254)
            raise SegmentError(SegmentReason.IPV6_EXTENSION if extension else SegmentReason.NOT_TCP)
        if len(frame) < ip_at + IPV6_HEADER_LEN + payload_len:
            raise SegmentError(SegmentReason.TRUNCATED)
        tcp_at, end, ipv6 = ip_at + IPV6_HEADER_LEN, ip_at + IPV6_HEADER_LEN + payload_len, True
    else:
        raise SegmentError(SegmentReason.NOT_IP)
    if end - tcp_at < TCP_MIN_HEADER_LEN:
        raise SegmentError(SegmentReason.BAD_TCP_HEADER)
    tcp_header_len = (frame[tcp_at + 12] >> 4) * 4
    if tcp_header_len < TCP_MIN_HEADER_LEN or tcp_at + tcp_header_len > end:
        raise SegmentError(SegmentReason.BAD_TCP_HEADER)
    return _Packet(frame, ipv6, ip_at, tcp_at, tcp_at + tcp_header_len, end)


# ---------------------------------------------------------------------- segmentation


def segment_tcp(frame: bytes, max_frame_len: int) -> list[bytes]:
    """`frame` as TCP segments of at most `max_frame_len` bytes each; SegmentError if it cannot be.

    A frame that fits already is returned as it is (one element).
    """
    if len(frame) <= max_frame_len:
        return [frame]
    p = _parse(frame)
    if p.flags & (SYN | URG):
        raise SegmentError(SegmentReason.UNSUPPORTED_FLAGS)
    headers_len = p.payload_at  # Ethernet + IP + TCP
    mss = max_frame_len - headers_len
    if mss <= 0:
        raise SegmentError(SegmentReason.NO_ROOM)
    payload = memoryview(frame)[p.payload_at : p.end]
    if len(payload) <= mss:
        # Too big only by its padding: trim it (the receiver ignores bytes past the IP length anyway).
        return [_build(p, 0, payload, first=True, last=True)]
    count = -(-len(payload) // mss)
    return [
        _build(p, i, payload[i * mss : (i + 1) * mss], first=i == 0, last=i == count - 1, offset=i * mss)
        for i in range(count)
    ]


def _build(p: _Packet, index: int, chunk: memoryview, first: bool, last: bool, offset: int = 0) -> bytes:
    f = p.frame
    ip = bytearray(f[p.ip_at : p.tcp_at])
    tcp = bytearray(f[p.tcp_at : p.payload_at])
    tcp_len = len(tcp) + len(chunk)
    if p.ipv6:
        ip[4:6] = tcp_len.to_bytes(2, "big")
    else:
        ip[2:4] = (len(ip) + tcp_len).to_bytes(2, "big")
        ident = (int.from_bytes(ip[4:6], "big") + index) & 0xFFFF
        ip[4:6] = ident.to_bytes(2, "big")
        ip[10:12] = b"\x00\x00"
        ip[10:12] = _checksum(ones_complement_sum(ip)).to_bytes(2, "big")
    seq = (int.from_bytes(tcp[4:8], "big") + offset) & 0xFFFF_FFFF
    tcp[4:8] = seq.to_bytes(4, "big")
    flags = tcp[13]
    if not last:
        flags &= ~(FIN | PSH)
    if not first:
        flags &= ~CWR
    tcp[13] = flags
    tcp[_TCP_CHECKSUM_AT : _TCP_CHECKSUM_AT + 2] = b"\x00\x00"
    body = bytes(chunk)
    # Header and payload summed apart is the same sum: the TCP header is whole 32-bit words.
    checksum = _checksum(p.pseudo_sum(tcp_len), ones_complement_sum(tcp), ones_complement_sum(body))
    tcp[_TCP_CHECKSUM_AT : _TCP_CHECKSUM_AT + 2] = checksum.to_bytes(2, "big")
    return bytes(f[: p.ip_at]) + bytes(ip) + bytes(tcp) + body


# ---------------------------------------------------------------------- checksum completion


def tcp_checksum_ok(frame: bytes) -> bool:
    """Whether `frame` is TCP/IP with a correct TCP checksum (SegmentError if it is not TCP/IP)."""
    p = _parse(frame)
    tcp_len = p.end - p.tcp_at
    return _add(p.pseudo_sum(tcp_len), ones_complement_sum(memoryview(frame)[p.tcp_at : p.end])) == 0xFFFF


def complete_partial_checksum(frame: bytes) -> bytes:
    """`frame` with its TCP checksum finished if offload left it partial; otherwise `frame` itself.

    Partial means the field holds the pseudo-header sum (what Linux leaves
    for CHECKSUM_PARTIAL) and the checksum does not verify.
    """
    try:
        p = _parse(frame)
    except SegmentError:
        return frame
    tcp_len = p.end - p.tcp_at
    pseudo = p.pseudo_sum(tcp_len)
    field_at = p.tcp_at + _TCP_CHECKSUM_AT
    field = int.from_bytes(frame[field_at : field_at + 2], "big")
    segment = memoryview(frame)[p.tcp_at : p.end]
    if _add(pseudo, ones_complement_sum(segment)) == 0xFFFF:
        return frame  # already right
    if field % 0xFFFF != pseudo % 0xFFFF:
        return frame  # not a partial checksum: wrong, and left for the receiver to drop
    zeroed = frame[:field_at] + b"\x00\x00" + frame[field_at + 2 : p.end]
    checksum = _checksum(pseudo, ones_complement_sum(memoryview(zeroed)[p.tcp_at :]))
    return frame[:field_at] + checksum.to_bytes(2, "big") + frame[field_at + 2 :]
