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
the data path), never IndexError. The checksum arithmetic and the header
parse are ``evio.tcpip``'s, shared with the controller's segmenter
(``evio.sdn.segmentation``, which copies where this works in place).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass

from evio.tcpip import (
    ACK,
    CWR,
    ETH_HEADER_LEN,
    FIN,
    IPV4_MIN_HEADER_LEN,
    IPV6_HEADER_LEN,
    PSH,
    TCP_CHECKSUM_AT,
    TCP_MIN_HEADER_LEN,
    SegmentError,
    TcpHeaders,
    finish,
    fold,
    ipv4_header_checksum,
    ones_sum,
    parse_tcp,
    pseudo_header_sum,
)
from evio.tunnel.datapath.buffers import release, zeroed

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


# -- checksums and headers -------------------------------------------------------------


def complete_checksum(buf: bytearray | memoryview, start: int, end: int, csum_start: int, csum_offset: int) -> None:
    """Finish a partial checksum (``VIRTIO_NET_HDR_F_NEEDS_CSUM``) of the frame ``buf[start:end]``.

    The field at ``csum_start + csum_offset`` holds the pseudo-header sum; the
    checksum covers everything from ``csum_start`` to the end, that field included.
    """
    field = start + csum_start + csum_offset
    if csum_start < ETH_HEADER_LEN or field + 2 > end:
        raise OffloadError("checksum offsets outside the frame")
    _U16.pack_into(buf, field, finish(ones_sum(buf[start + csum_start : end])))


def tcp_layout(buf: bytearray | memoryview, start: int, length: int) -> TcpHeaders:
    """The headers of a TCP frame over IPv4 (options allowed) or IPv6 (no extension headers).

    The frame's length is the packet's: a super-frame's IP length is not read.
    """
    try:
        return parse_tcp(buf, start, length, ip_length=False)
    except SegmentError as err:
        raise OffloadError(str(err)) from None


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
    header_len = layout.payload_at
    payload = length - header_len
    size = min(vnet.gso_size, max_frame - header_len)
    if size <= 0 or vnet.gso_size <= 0:
        raise OffloadError("bad segment size")
    if payload <= 0:
        raise OffloadError("GSO frame without payload")
    if size < header_len:
        raise OffloadError("segment size below the header length")  # in-place headers would overlap
    ip = ETH_HEADER_LEN
    tcp = layout.tcp_at
    template = bytes(buf[start : start + header_len])
    ipv6 = layout.ipv6
    pseudo = pseudo_header_sum(buf, start, ipv6, 0)
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
            flags &= ~(FIN | PSH)
        if i:
            flags &= ~CWR
        buf[at + tcp + 13] = flags
        pack32(buf, at + tcp + 4, (seq0 + i * size) & 0xFFFFFFFF)
        pack16(buf, at + tcp + TCP_CHECKSUM_AT, 0)
        end = at + header_len + chunk
        pack16(buf, at + tcp + TCP_CHECKSUM_AT, finish(pseudo + l4_len + ones_sum(buf[at + tcp : end])))
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
        self._buf = zeroed(VNET_HDR_LEN + ETH_HEADER_LEN + IPV6_HEADER_LEN + MAX_IP_PAYLOAD)
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

    def release(self) -> None:
        """Hand the buffer's written pages back to the kernel (what is held is dropped: flush first)."""
        self._held = self._end = 0
        self._open = False
        release(self._buf)

    @property
    def memory(self) -> bytearray | mmap.mmap:
        return self._buf

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
                    self._end - VNET_HDR_LEN - ETH_HEADER_LEN + payload <= MAX_IP_PAYLOAD
                ):
                    start = self._end
                    self._view[start : start + payload] = frame[header_len:]
                    self._end = start + payload
                    self._held += 1
                    self._next_seq = (self._next_seq + payload) & 0xFFFFFFFF
                    psh = frame[tcp + 13] & PSH
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

    def _start_run(self, frame: memoryview, n: int, layout: TcpHeaders) -> None:
        header_len = layout.payload_at
        tcp = layout.tcp_at
        base = VNET_HDR_LEN
        self._view[base : base + n] = frame
        self._end = base + n
        self._held = 1
        self._header_len = header_len
        self._tcp = tcp
        self._ipv6 = layout.ipv6
        self._size = n - header_len
        self._next_seq = (_U32.unpack_from(frame, tcp + 4)[0] + self._size) & 0xFFFFFFFF
        psh = bool(frame[tcp + 13] & PSH)
        self._open = not psh
        self._psh = psh
        # Bytes that may differ between segments of one run: IP length (and IPv4 id and header
        # checksum), TCP sequence number and checksum, and the PSH bit.
        if layout.ipv6:
            self._ip_len_at, self._ip_len_base = ETH_HEADER_LEN + 4, ETH_HEADER_LEN + IPV6_HEADER_LEN
            varying = [(ETH_HEADER_LEN + 4, 2)]
        else:
            self._ip_len_at, self._ip_len_base = ETH_HEADER_LEN + 2, ETH_HEADER_LEN
            varying = [(ETH_HEADER_LEN + 2, 4), (ETH_HEADER_LEN + 10, 2)]
        varying += [(tcp + 4, 4), (tcp + TCP_CHECKSUM_AT, 2)]
        mask = bytearray(b"\xff" * header_len)
        for at, length in varying:
            mask[at : at + length] = bytes(length)
        mask[tcp + 13] = 0xFF & ~PSH
        self._mask = int.from_bytes(mask, "big")
        self._key = int.from_bytes(frame[:header_len], "big") & self._mask

    def _candidate(self, frame: memoryview, n: int) -> TcpHeaders | None:
        """The layout of a frame that could join or start a run: a TCP data segment, only ACK/PSH set."""
        if n < ETH_HEADER_LEN + IPV4_MIN_HEADER_LEN + TCP_MIN_HEADER_LEN:
            return None
        try:
            layout = tcp_layout(frame, 0, n)
        except OffloadError:
            return None
        if n <= layout.payload_at:
            return None  # no payload: a pure ACK is passed through
        tcp = layout.tcp_at
        if frame[tcp + 13] & ~PSH != ACK:
            return None
        # The IP length must say exactly this frame (no padding, no truncation).
        if layout.ipv6:
            if _U16.unpack_from(frame, ETH_HEADER_LEN + 4)[0] != n - ETH_HEADER_LEN - IPV6_HEADER_LEN:
                return None
        elif _U16.unpack_from(frame, ETH_HEADER_LEN + 2)[0] != n - ETH_HEADER_LEN:
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
        tcp = base + ETH_HEADER_LEN + (IPV6_HEADER_LEN if self._ipv6 else 0)
        frame_len = self._end - base
        if self._ipv6:
            l4_len = frame_len - ETH_HEADER_LEN - IPV6_HEADER_LEN
            _U16.pack_into(view, base + ETH_HEADER_LEN + 4, l4_len)
            pseudo = pseudo_header_sum(view, base, True, l4_len)
        else:
            ip = base + ETH_HEADER_LEN
            l3 = (view[ip] & 0x0F) * 4
            tcp = ip + l3
            l4_len = frame_len - ETH_HEADER_LEN - l3
            _U16.pack_into(view, ip + 2, frame_len - ETH_HEADER_LEN)
            _U16.pack_into(view, ip + 10, 0)
            _U16.pack_into(view, ip + 10, ipv4_header_checksum(view, ip, l3))
            pseudo = pseudo_header_sum(view, base, False, l4_len)
        if self._psh:
            view[tcp + 13] |= PSH
        # CHECKSUM_PARTIAL: the field holds the pseudo-header sum over the whole length, not inverted.
        _U16.pack_into(view, tcp + TCP_CHECKSUM_AT, fold(pseudo))
        VNET_HDR.pack_into(
            view, 0, F_NEEDS_CSUM, GSO_TCPV6 if self._ipv6 else GSO_TCPV4, self._header_len, self._size,
            tcp - base, TCP_CHECKSUM_AT,
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
