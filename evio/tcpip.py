"""TCP/IP headers and the Internet checksum, for the code that segments frames and finishes checksums: pure.

Two callers share it: `evio.sdn.segmentation` (frames the controller sends,
as bytes) and `evio.tunnel.datapath.offload` (super-frames of the data path, in place
in its buffers). Both read bytes from the network or the kernel, so
`parse_tcp` checks every length and offset before it reads and raises
`SegmentError` with a `SegmentReason`, never IndexError.

Sums are kept unfolded while they are added up (Python integers do not
overflow) and folded once: `fold` for a sum, `finish` for the checksum field.
Frames are untagged Ethernet (14-byte header, no FCS); offsets returned are
from the frame's first byte.
"""

from __future__ import annotations

import enum

ETH_HEADER_LEN = 14
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
IPV4_MIN_HEADER_LEN = 20
IPV6_HEADER_LEN = 40
TCP_MIN_HEADER_LEN = 20
TCP_CHECKSUM_AT = 16
"""Offset of the checksum field in the TCP header."""
PROTO_TCP = 6

# TCP flag bits (byte 13 of the header).
FIN, SYN, RST, PSH, ACK, URG, ECE, CWR = (1 << i for i in range(8))

_IPV4_FRAGMENT = 0x3FFF  # MF and the fragment offset
# IPv6 next headers that are extension headers (hop-by-hop, also a jumbogram's, routing, fragment, ...).
_IPV6_EXTENSIONS = frozenset((0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254))


# ---------------------------------------------------------------------- the Internet checksum (RFC 1071)


def ones_sum(data: bytes | bytearray | memoryview) -> int:
    """The 16-bit ones' complement sum of ``data`` (RFC 1071), not inverted; an odd tail is padded with zero.

    Computed as one integer: 2**16 = 1 (mod 2**16 - 1), so the sum of the 16-bit words
    is the integer's value mod 65535 (one C call instead of a Python loop per word).
    Little-endian words are summed and the result swapped back: RFC 1071's byte-order
    independence, and little-endian conversion is the cheaper one here (no copy to pad).
    """
    value = int.from_bytes(data, "little")
    total = value % 0xFFFF
    if total == 0 and value:
        total = 0xFFFF  # a nonzero sum of words is never +0 in ones' complement
    return ((total & 0xFF) << 8) | (total >> 8)


def fold(total: int) -> int:
    """Fold a sum of 16-bit words into 16 bits (ones' complement, end-around carry)."""
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def finish(total: int) -> int:
    """The checksum field for a ones' complement sum: inverted; 0 becomes 0xFFFF (as skb_checksum_help)."""
    return (~fold(total) & 0xFFFF) or 0xFFFF


def ipv4_header_checksum(buf: bytes | bytearray | memoryview, at: int, length: int = IPV4_MIN_HEADER_LEN) -> int:
    """The IPv4 header checksum of ``buf[at:at+length]`` with its checksum field counted as zero."""
    return finish(ones_sum(buf[at : at + 10]) + ones_sum(buf[at + 12 : at + length]))


def address_sum(buf: bytes | bytearray | memoryview, start: int, ipv6: bool) -> int:
    """Sum of the source and destination addresses of the frame at ``start``."""
    ip = start + ETH_HEADER_LEN
    if ipv6:
        return ones_sum(buf[ip + 8 : ip + 40])
    return ones_sum(buf[ip + 12 : ip + 20])


def pseudo_header_sum(buf: bytes | bytearray | memoryview, start: int, ipv6: bool, tcp_len: int) -> int:
    """Unfolded sum of the TCP pseudo-header (RFC 9293 3.1, RFC 8200 8.1) for ``tcp_len`` bytes of TCP.

    The protocol and length are added as numbers: the sum of their 16-bit
    words is the same modulo 0xFFFF, and the caller folds.
    """
    return address_sum(buf, start, ipv6) + PROTO_TCP + tcp_len


# ---------------------------------------------------------------------- parsing


class SegmentReason(enum.Enum):
    """Why a frame cannot be cut into TCP segments: the first seven are `parse_tcp`'s."""

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


class TcpHeaders:
    """Where the headers of one TCP/IP frame lie, checked; offsets from the frame's first byte.

    The IP header starts at ``ETH_HEADER_LEN``; ``payload_at`` is the length of
    all headers; ``end`` is where the IP packet ends.
    """

    __slots__ = ("ipv6", "tcp_at", "payload_at", "end")

    def __init__(self, ipv6: bool, tcp_at: int, payload_at: int, end: int) -> None:
        self.ipv6 = ipv6
        self.tcp_at = tcp_at
        self.payload_at = payload_at
        self.end = end


def parse_tcp(buf: bytes | bytearray | memoryview, start: int, length: int, *, ip_length: bool) -> TcpHeaders:
    """The headers of the TCP frame ``buf[start:start+length]``; SegmentError if it is not one.

    TCP over IPv4 (options allowed, no fragment) or IPv6 (no extension
    headers). With ``ip_length`` the packet ends where its IP length says,
    which must lie within the frame (Ethernet padding after it is not
    payload); without, it ends with the frame and the IP length is not read
    (a super-frame's is rewritten per segment anyway).
    """
    if length < ETH_HEADER_LEN:
        raise SegmentError(SegmentReason.TRUNCATED)
    ethertype = buf[start + 12] << 8 | buf[start + 13]
    ip = start + ETH_HEADER_LEN
    if ethertype == ETH_TYPE_IPV4:
        if length < ETH_HEADER_LEN + IPV4_MIN_HEADER_LEN:
            raise SegmentError(SegmentReason.TRUNCATED)
        version_ihl = buf[ip]
        header_len = (version_ihl & 0x0F) * 4
        if version_ihl >> 4 != 4 or header_len < IPV4_MIN_HEADER_LEN:
            raise SegmentError(SegmentReason.BAD_IP_HEADER)
        end = length
        if ip_length:
            total_len = buf[ip + 2] << 8 | buf[ip + 3]
            if total_len < header_len:
                raise SegmentError(SegmentReason.BAD_IP_HEADER)
            end = ETH_HEADER_LEN + total_len
            if length < end:
                raise SegmentError(SegmentReason.TRUNCATED)
        if (buf[ip + 6] << 8 | buf[ip + 7]) & _IPV4_FRAGMENT:
            raise SegmentError(SegmentReason.FRAGMENT)
        if buf[ip + 9] != PROTO_TCP:
            raise SegmentError(SegmentReason.NOT_TCP)
        tcp_at, ipv6 = ETH_HEADER_LEN + header_len, False
    elif ethertype == ETH_TYPE_IPV6:
        if length < ETH_HEADER_LEN + IPV6_HEADER_LEN:
            raise SegmentError(SegmentReason.TRUNCATED)
        if buf[ip] >> 4 != 6:
            raise SegmentError(SegmentReason.BAD_IP_HEADER)
        next_header = buf[ip + 6]
        if next_header != PROTO_TCP:
            raise SegmentError(
                SegmentReason.IPV6_EXTENSION if next_header in _IPV6_EXTENSIONS else SegmentReason.NOT_TCP
            )
        tcp_at, ipv6 = ETH_HEADER_LEN + IPV6_HEADER_LEN, True
        end = length
        if ip_length:
            end = tcp_at + (buf[ip + 4] << 8 | buf[ip + 5])
            if length < end:
                raise SegmentError(SegmentReason.TRUNCATED)
    else:
        raise SegmentError(SegmentReason.NOT_IP)
    if end - tcp_at < TCP_MIN_HEADER_LEN:
        raise SegmentError(SegmentReason.BAD_TCP_HEADER)
    tcp_header_len = (buf[start + tcp_at + 12] >> 4) * 4
    if tcp_header_len < TCP_MIN_HEADER_LEN or tcp_at + tcp_header_len > end:
        raise SegmentError(SegmentReason.BAD_TCP_HEADER)
    return TcpHeaders(ipv6, tcp_at, tcp_at + tcp_header_len, end)
