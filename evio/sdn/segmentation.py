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

Sizes are whole Ethernet frames without FCS (14-byte header, untagged). The
checksum arithmetic and the header parse are `evio.tcpip`'s, shared with the
data path's in-place segmenter (`evio.tunnel.datapath.offload`).
"""

from __future__ import annotations

from evio.tcpip import (
    CWR,
    ETH_HEADER_LEN,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    FIN,
    PSH,
    SYN,
    TCP_CHECKSUM_AT,
    URG,
    SegmentError,
    SegmentReason,
    TcpHeaders,
    finish,
    fold,
    ipv4_header_checksum,
    ones_sum,
    parse_tcp,
    pseudo_header_sum,
)

# The switch and its tests name these here: frames the controller sends are its concern.
__all__ = ["ETH_TYPE_IPV4", "ETH_TYPE_IPV6", "SegmentError", "SegmentReason", "complete_partial_checksum",
           "segment_tcp", "tcp_checksum_ok"]


def _parse(frame: bytes) -> TcpHeaders:
    return parse_tcp(frame, 0, len(frame), ip_length=True)


# ---------------------------------------------------------------------- segmentation


def segment_tcp(frame: bytes, max_frame_len: int) -> list[bytes]:
    """`frame` as TCP segments of at most `max_frame_len` bytes each; SegmentError if it cannot be.

    A frame that fits already is returned as it is (one element).
    """
    if len(frame) <= max_frame_len:
        return [frame]
    p = _parse(frame)
    if frame[p.tcp_at + 13] & (SYN | URG):
        raise SegmentError(SegmentReason.UNSUPPORTED_FLAGS)
    headers_len = p.payload_at  # Ethernet + IP + TCP
    mss = max_frame_len - headers_len
    if mss <= 0:
        raise SegmentError(SegmentReason.NO_ROOM)
    payload = memoryview(frame)[p.payload_at : p.end]
    if len(payload) <= mss:
        # Too big only by its padding: trim it (the receiver ignores bytes past the IP length anyway).
        return [_build(frame, p, 0, payload, first=True, last=True)]
    count = -(-len(payload) // mss)
    return [
        _build(frame, p, i, payload[i * mss : (i + 1) * mss], first=i == 0, last=i == count - 1, offset=i * mss)
        for i in range(count)
    ]


def _build(
    f: bytes, p: TcpHeaders, index: int, chunk: memoryview, first: bool, last: bool, offset: int = 0
) -> bytes:
    ip = bytearray(f[ETH_HEADER_LEN : p.tcp_at])
    tcp = bytearray(f[p.tcp_at : p.payload_at])
    tcp_len = len(tcp) + len(chunk)
    if p.ipv6:
        ip[4:6] = tcp_len.to_bytes(2, "big")
    else:
        ip[2:4] = (len(ip) + tcp_len).to_bytes(2, "big")
        ident = (int.from_bytes(ip[4:6], "big") + index) & 0xFFFF
        ip[4:6] = ident.to_bytes(2, "big")
        ip[10:12] = ipv4_header_checksum(ip, 0, len(ip)).to_bytes(2, "big")
    seq = (int.from_bytes(tcp[4:8], "big") + offset) & 0xFFFF_FFFF
    tcp[4:8] = seq.to_bytes(4, "big")
    flags = tcp[13]
    if not last:
        flags &= ~(FIN | PSH)
    if not first:
        flags &= ~CWR
    tcp[13] = flags
    tcp[TCP_CHECKSUM_AT : TCP_CHECKSUM_AT + 2] = b"\x00\x00"
    body = bytes(chunk)
    # Header and payload summed apart is the same sum: the TCP header is whole 32-bit words.
    checksum = finish(pseudo_header_sum(f, 0, p.ipv6, tcp_len) + ones_sum(tcp) + ones_sum(body))
    tcp[TCP_CHECKSUM_AT : TCP_CHECKSUM_AT + 2] = checksum.to_bytes(2, "big")
    return bytes(f[:ETH_HEADER_LEN]) + bytes(ip) + bytes(tcp) + body


# ---------------------------------------------------------------------- checksum completion


def tcp_checksum_ok(frame: bytes) -> bool:
    """Whether `frame` is TCP/IP with a correct TCP checksum (SegmentError if it is not TCP/IP)."""
    p = _parse(frame)
    pseudo = pseudo_header_sum(frame, 0, p.ipv6, p.end - p.tcp_at)
    return fold(pseudo + ones_sum(memoryview(frame)[p.tcp_at : p.end])) == 0xFFFF


def complete_partial_checksum(frame: bytes) -> bytes:
    """`frame` with its TCP checksum finished if offload left it partial; otherwise `frame` itself.

    Partial means the field holds the pseudo-header sum (what Linux leaves
    for CHECKSUM_PARTIAL) and the checksum does not verify.
    """
    try:
        p = _parse(frame)
    except SegmentError:
        return frame
    pseudo = fold(pseudo_header_sum(frame, 0, p.ipv6, p.end - p.tcp_at))
    field_at = p.tcp_at + TCP_CHECKSUM_AT
    field = int.from_bytes(frame[field_at : field_at + 2], "big")
    segment = memoryview(frame)[p.tcp_at : p.end]
    if fold(pseudo + ones_sum(segment)) == 0xFFFF:
        return frame  # already right
    if field % 0xFFFF != pseudo % 0xFFFF:
        return frame  # not a partial checksum: wrong, and left for the receiver to drop
    zeroed = frame[:field_at] + b"\x00\x00" + frame[field_at + 2 : p.end]
    checksum = finish(pseudo + ones_sum(memoryview(zeroed)[p.tcp_at :]))
    return frame[:field_at] + checksum.to_bytes(2, "big") + frame[field_at + 2 :]
