"""TAP offloads: virtio-net headers, TCP segmentation and coalescing, in pure Python.

Why (docs/design.md, "TAP offloads"): with ``IFF_VNET_HDR`` and TSO
negotiated, a TAP read or write can move one TCP super-frame of up to 64 KiB
instead of some 45 frames of the path MTU, and so can Open vSwitch's
userspace datapath behind it. The tunnel still carries records of at most
the path MTU, each a complete Ethernet frame with valid checksums, so the
wire format is unchanged and a peer without offloads reads them as before:

- ``segment_tcp`` cuts a super-frame read from the TAP into such frames in
  place (the headers of segment i are written over the tail of segment i-1's
  payload, which has been sealed by then), completing every checksum that
  checksum offload left partial;
- ``TcpCoalescer`` joins consecutive segments of one TCP stream opened from
  records back into a super-frame, written to the TAP with a vnet header
  (GSO type, segment size, partial checksum), as the kernel's GRO would.

Everything read here comes from the kernel or from a peer: lengths and
offsets are checked, and a bad header raises ``OffloadError`` (counted by
the data path), never IndexError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

# struct virtio_net_hdr (linux/virtio_net.h), little-endian on the hosts we run on.
VNET_HDR = struct.Struct("<BBHHHH")
VNET_HDR_LEN = VNET_HDR.size  # 10
F_NEEDS_CSUM = 1
F_DATA_VALID = 2
GSO_NONE = 0
GSO_TCPV4 = 1
GSO_UDP = 3
GSO_TCPV6 = 4
GSO_UDP_L4 = 5
GSO_ECN = 0x80
ZERO_VNET_HDR = bytes(VNET_HDR_LEN)

ETH_LEN = 14
ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
IPPROTO_TCP = 6
IPV4_LEN = 20
IPV6_LEN = 40
TCP_MIN_LEN = 20
TCP_CSUM_OFFSET = 16
TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK, TCP_URG, TCP_ECE, TCP_CWR = 1, 2, 4, 8, 16, 32, 64, 128
MAX_IP_PAYLOAD = 65535
"""An IPv4 total length or IPv6 payload length fits 16 bits: a coalesced frame stays under it."""

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")


class OffloadError(ValueError):
    """A vnet header or super-frame this code will not touch; the frame is dropped and counted."""


@dataclass(frozen=True)
class VnetHeader:
    flags: int = 0
    gso_type: int = GSO_NONE
    hdr_len: int = 0
    gso_size: int = 0
    csum_start: int = 0
    csum_offset: int = 0

    def pack(self) -> bytes:
        return VNET_HDR.pack(self.flags, self.gso_type, self.hdr_len, self.gso_size, self.csum_start, self.csum_offset)

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> VnetHeader:
        if len(data) - offset < VNET_HDR_LEN:
            raise OffloadError("short vnet header")
        return cls(*VNET_HDR.unpack_from(data, offset))


# -- checksums ----------------------------------------------------------------------


def ones_sum(data: bytes | bytearray | memoryview) -> int:
    """The 16-bit ones' complement sum of ``data`` (RFC 1071), not inverted; an odd tail is padded with zero.

    Computed as one integer: 2**16 = 1 (mod 2**16 - 1), so the sum of the 16-bit words
    is the integer's value mod 65535 (one C call instead of a Python loop per word).
    Little-endian words are summed and the result swapped back: RFC 1071's byte-order
    independence, and little-endian conversion is the cheaper one here.
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


def complete_checksum(buf: bytearray | memoryview, start: int, end: int, csum_start: int, csum_offset: int) -> None:
    """Finish a partial checksum (``VIRTIO_NET_HDR_F_NEEDS_CSUM``) of the frame ``buf[start:end]``.

    The field at ``csum_start + csum_offset`` holds the pseudo-header sum; the
    checksum covers everything from ``csum_start`` to the end, that field included.
    """
    field = start + csum_start + csum_offset
    if csum_start < ETH_LEN or field + 2 > end:
        raise OffloadError("checksum offsets outside the frame")
    _U16.pack_into(buf, field, finish(ones_sum(buf[start + csum_start : end])))


def ipv4_header_checksum(buf: bytearray | memoryview, at: int, length: int = IPV4_LEN) -> int:
    """The IPv4 header checksum of ``buf[at:at+length]`` with its checksum field counted as zero."""
    return finish(ones_sum(buf[at : at + 10]) + ones_sum(buf[at + 12 : at + length]))


def _pseudo_sum(buf: bytearray | memoryview, start: int, ipv6: bool) -> int:
    """Sum of the source and destination addresses (the length and protocol are added per segment)."""
    if ipv6:
        return ones_sum(buf[start + ETH_LEN + 8 : start + ETH_LEN + 40])
    return ones_sum(buf[start + ETH_LEN + 12 : start + ETH_LEN + 20])


# -- parsing ------------------------------------------------------------------------


@dataclass(frozen=True)
class TcpLayout:
    """Where the headers of a TCP frame lie, relative to its first byte."""

    ipv6: bool
    l3_len: int
    header_len: int
    """Ethernet + IP + TCP headers."""

    @property
    def l4_start(self) -> int:
        return ETH_LEN + self.l3_len


def tcp_layout(buf: bytearray | memoryview, start: int, length: int) -> TcpLayout:
    """The header layout of a TCP frame over IPv4 (options allowed) or IPv6 (no extension headers)."""
    if length < ETH_LEN + IPV4_LEN + TCP_MIN_LEN:
        raise OffloadError("frame too short for TCP")
    ethertype = buf[start + 12] << 8 | buf[start + 13]
    ip = start + ETH_LEN
    if ethertype == ETH_P_IPV4:
        if buf[ip] >> 4 != 4:
            raise OffloadError("not IPv4")
        l3 = (buf[ip] & 0x0F) * 4
        if l3 < IPV4_LEN or buf[ip + 9] != IPPROTO_TCP:
            raise OffloadError("not TCP over IPv4")
        if (buf[ip + 6] << 8 | buf[ip + 7]) & 0x3FFF:
            raise OffloadError("IPv4 fragment")
        ipv6 = False
    elif ethertype == ETH_P_IPV6:
        if buf[ip] >> 4 != 6 or buf[ip + 6] != IPPROTO_TCP:
            raise OffloadError("not TCP over IPv6 without extension headers")
        l3 = IPV6_LEN
        ipv6 = True
    else:
        raise OffloadError("not IP")
    tcp = ip + l3
    if ETH_LEN + l3 + TCP_MIN_LEN > length:
        raise OffloadError("frame too short for its IP header")
    l4 = (buf[tcp + 12] >> 4) * 4
    if l4 < TCP_MIN_LEN or ETH_LEN + l3 + l4 > length:
        raise OffloadError("bad TCP header length")
    return TcpLayout(ipv6, l3, ETH_LEN + l3 + l4)


# -- segmentation (TAP -> records) ----------------------------------------------------


def segment_tcp(
    buf: bytearray | memoryview,
    start: int,
    length: int,
    vnet: VnetHeader,
    max_frame: int,
    emit: Callable[[int, int], None],
) -> int:
    """Cut the TCP super-frame ``buf[start:start+length]`` into frames of at most ``max_frame`` bytes, in place.

    ``emit(frame_start, frame_end)`` gets each segment in order and must be done
    with those bytes when it returns: the next segment's headers overwrite the
    end of the previous one's payload. Each segment gets its IP length (and IPv4
    id and header checksum), sequence number, flags (FIN and PSH on the last,
    CWR on the first only) and a complete TCP checksum. The segment size is the
    header's ``gso_size``, lowered so that a segment fits ``max_frame``. Returns
    the number of segments.
    """
    gso = vnet.gso_type & ~GSO_ECN
    if gso not in (GSO_TCPV4, GSO_TCPV6):
        raise OffloadError(f"unsupported GSO type {vnet.gso_type}")
    layout = tcp_layout(buf, start, length)
    if layout.ipv6 != (gso == GSO_TCPV6):
        raise OffloadError("GSO type does not match the IP version")
    header_len = layout.header_len
    payload = length - header_len
    size = min(vnet.gso_size, max_frame - header_len)
    if size <= 0 or vnet.gso_size <= 0:
        raise OffloadError("bad segment size")
    if payload <= 0:
        raise OffloadError("GSO frame without payload")
    if size < header_len:
        raise OffloadError("segment size below the header length")  # in-place headers would overlap
    ip = ETH_LEN
    tcp = layout.l4_start
    template = bytes(buf[start : start + header_len])
    ipv6 = layout.ipv6
    pseudo = _pseudo_sum(buf, start, ipv6) + IPPROTO_TCP
    seq0 = _U32.unpack_from(template, tcp + 4)[0]
    flags0 = template[tcp + 13]
    ip_id0 = 0 if ipv6 else _U16.unpack_from(template, ip + 4)[0]
    # The IPv4 header sum without its length, id and checksum: per segment only those two are added.
    ip_base = 0 if ipv6 else ones_sum(template[ip : ip + 2]) + ones_sum(template[ip + 6 : ip + 10]) + ones_sum(
        template[ip + 12 : tcp]
    )
    segments = (payload + size - 1) // size
    pack16 = _U16.pack_into
    pack32 = _U32.pack_into
    for i in range(segments):
        at = start + i * size  # segment i's headers end where its payload starts
        chunk = min(size, payload - i * size)
        if i:
            buf[at : at + header_len] = template
        l4_len = header_len - tcp + chunk
        if ipv6:
            pack16(buf, at + ip + 4, l4_len)
        else:
            ip_len = tcp - ip + l4_len
            ip_id = (ip_id0 + i) & 0xFFFF
            pack16(buf, at + ip + 2, ip_len)
            pack16(buf, at + ip + 4, ip_id)
            pack16(buf, at + ip + 10, finish(ip_base + ip_len + ip_id))
        flags = flags0
        if i < segments - 1:
            flags &= ~(TCP_FIN | TCP_PSH)
        if i:
            flags &= ~TCP_CWR
        buf[at + tcp + 13] = flags
        pack32(buf, at + tcp + 4, (seq0 + i * size) & 0xFFFFFFFF)
        pack16(buf, at + tcp + TCP_CSUM_OFFSET, 0)
        end = at + header_len + chunk
        pack16(buf, at + tcp + TCP_CSUM_OFFSET, finish(pseudo + l4_len + ones_sum(buf[at + tcp : end])))
        emit(at, end)
    return segments


# -- coalescing (records -> TAP) ------------------------------------------------------


class TcpCoalescer:
    """Join consecutive TCP segments of one stream into a super-frame with a vnet header, as GRO does.

    Frames go in one by one (``add``), in the order they arrived; ``write`` gets
    every output as one buffer, vnet header first: a coalesced super-frame, or a
    frame passed through with an empty vnet header (its checksums are the
    sender's, already complete). ``flush`` writes what is held; call it at the
    end of every burst, so nothing waits for a later one.

    Segments join when they are pure ACK (or ACK|PSH) data segments with equal
    addresses, ports, acknowledgment, window and options, each starting where
    the previous ended, all but the last of the first one's size, and the
    result fits 64 KiB. A PSH or a shorter segment ends the run.
    """

    def __init__(self, write: Callable[[memoryview], None], max_frame: int) -> None:
        self._write = write
        self._buf = bytearray(VNET_HDR_LEN + ETH_LEN + IPV6_LEN + MAX_IP_PAYLOAD)
        self._view = memoryview(self._buf)
        self._max_frame = max_frame
        self._held = 0  # segments held
        self._end = 0  # end of the held frame in _buf
        self._header_len = 0
        self._ipv6 = False
        self._size = 0  # payload of the first segment: the GSO size
        self._next_seq = 0
        self._open = False  # whether another segment may still join
        self._psh = False
        self._mask = 0  # the header bits that must match the run's first segment
        self._key = 0  # those bits of the first segment
        self._ip_len_at = 0
        self._ip_len_base = 0  # the IP length field is the frame length minus this
        self._tcp = 0
        self.frames_in = 0
        self.frames_out = 0

    @property
    def held(self) -> int:
        return self._held

    def add(self, frame: memoryview) -> None:
        """One complete Ethernet frame (at most ``max_frame`` bytes)."""
        self.frames_in += 1
        n = len(frame)
        if self._open:
            # The common case, a segment that extends the run: one masked comparison of the whole
            # header (which also pins the layout: Ethernet type, IP and TCP header lengths).
            header_len = self._header_len
            payload = n - header_len
            if (0 < payload <= self._size and int.from_bytes(frame[:header_len], "big") & self._mask == self._key
                    and _U16.unpack_from(frame, self._ip_len_at)[0] == n - self._ip_len_base):  # fmt: skip
                tcp = self._tcp
                if _U32.unpack_from(frame, tcp + 4)[0] == self._next_seq and (
                    self._end - VNET_HDR_LEN - ETH_LEN + payload <= MAX_IP_PAYLOAD
                ):
                    start = self._end
                    self._view[start : start + payload] = frame[header_len:]
                    self._end = start + payload
                    self._held += 1
                    self._next_seq = (self._next_seq + payload) & 0xFFFFFFFF
                    psh = frame[tcp + 13] & TCP_PSH
                    if psh or payload < self._size:
                        self._open = False
                        self._psh = bool(psh)
                    return
        layout = self._candidate(frame, n)
        self.flush()
        if layout is None:
            self._pass_through(frame)
            return
        self._start_run(frame, n, layout)

    def _start_run(self, frame: memoryview, n: int, layout: TcpLayout) -> None:
        header_len = layout.header_len
        tcp = layout.l4_start
        base = VNET_HDR_LEN
        self._view[base : base + n] = frame
        self._end = base + n
        self._held = 1
        self._header_len = header_len
        self._tcp = tcp
        self._ipv6 = layout.ipv6
        self._size = n - header_len
        self._next_seq = (_U32.unpack_from(frame, tcp + 4)[0] + self._size) & 0xFFFFFFFF
        psh = bool(frame[tcp + 13] & TCP_PSH)
        self._open = not psh
        self._psh = psh
        # Bytes that may differ between segments of one run: IP length (and IPv4 id and header
        # checksum), TCP sequence number and checksum, and the PSH bit.
        if layout.ipv6:
            self._ip_len_at, self._ip_len_base = ETH_LEN + 4, ETH_LEN + IPV6_LEN
            varying = [(ETH_LEN + 4, 2)]
        else:
            self._ip_len_at, self._ip_len_base = ETH_LEN + 2, ETH_LEN
            varying = [(ETH_LEN + 2, 4), (ETH_LEN + 10, 2)]
        varying += [(tcp + 4, 4), (tcp + TCP_CSUM_OFFSET, 2)]
        mask = bytearray(b"\xff" * header_len)
        for at, length in varying:
            mask[at : at + length] = bytes(length)
        mask[tcp + 13] = 0xFF & ~TCP_PSH
        self._mask = int.from_bytes(mask, "big")
        self._key = int.from_bytes(frame[:header_len], "big") & self._mask

    def _candidate(self, frame: memoryview, n: int) -> TcpLayout | None:
        """The layout of a frame that could join or start a run: a TCP data segment, only ACK/PSH set."""
        if n < ETH_LEN + IPV4_LEN + TCP_MIN_LEN:
            return None
        try:
            layout = tcp_layout(frame, 0, n)
        except OffloadError:
            return None
        if n <= layout.header_len:
            return None  # no payload: a pure ACK is passed through
        tcp = layout.l4_start
        if frame[tcp + 13] & ~TCP_PSH != TCP_ACK:
            return None
        # The IP length must say exactly this frame (no padding, no truncation).
        if layout.ipv6:
            if _U16.unpack_from(frame, ETH_LEN + 4)[0] != n - ETH_LEN - IPV6_LEN:
                return None
        elif _U16.unpack_from(frame, ETH_LEN + 2)[0] != n - ETH_LEN:
            return None
        return layout

    def flush(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, 0
        self._open = False
        view = self._view
        if held == 1:
            self.frames_out += 1
            view[:VNET_HDR_LEN] = ZERO_VNET_HDR
            self._write(view[: self._end])
            return
        base = VNET_HDR_LEN
        tcp = base + ETH_LEN + (IPV6_LEN if self._ipv6 else 0)
        frame_len = self._end - base
        if self._ipv6:
            l4_len = frame_len - ETH_LEN - IPV6_LEN
            _U16.pack_into(view, base + ETH_LEN + 4, l4_len)
            pseudo = _pseudo_sum(view, base, True)
        else:
            ip = base + ETH_LEN
            l3 = (view[ip] & 0x0F) * 4
            tcp = ip + l3
            l4_len = frame_len - ETH_LEN - l3
            _U16.pack_into(view, ip + 2, frame_len - ETH_LEN)
            _U16.pack_into(view, ip + 10, 0)
            _U16.pack_into(view, ip + 10, ipv4_header_checksum(view, ip, l3))
            pseudo = _pseudo_sum(view, base, False)
        if self._psh:
            view[tcp + 13] |= TCP_PSH
        # CHECKSUM_PARTIAL: the field holds the pseudo-header sum over the whole length, not inverted.
        _U16.pack_into(view, tcp + TCP_CSUM_OFFSET, fold(pseudo + IPPROTO_TCP + l4_len))
        VNET_HDR.pack_into(
            view, 0, F_NEEDS_CSUM, GSO_TCPV6 if self._ipv6 else GSO_TCPV4, self._header_len, self._size,
            tcp - base, TCP_CSUM_OFFSET,
        )
        self.frames_out += 1
        self._write(view[: self._end])

    def _pass_through(self, frame: memoryview) -> None:
        n = len(frame)
        view = self._view
        view[:VNET_HDR_LEN] = ZERO_VNET_HDR
        view[VNET_HDR_LEN : VNET_HDR_LEN + n] = frame
        self.frames_out += 1
        self._write(view[: VNET_HDR_LEN + n])
