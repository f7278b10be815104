"""TAP offloads, the pure parts: vnet headers, checksums, TCP segmentation and coalescing.

Checksums are verified with a plain word-by-word RFC 1071 sum
(`evio.testing.tcp_frames.reference_sum`), independent of the integer trick the code uses.
"""

from __future__ import annotations

import os
import random
import struct

import pytest

from evio.tcpip import ACK, CWR, FIN, PSH, SYN
from evio.testing.tcp_frames import (
    ETH4,
    MAX_FRAME,
    complete,
    cut,
    gso,
    parse,
    tcp_frame,
)
from evio.tunnel.datapath.offload import (
    F_NEEDS_CSUM,
    GSO_NONE,
    GSO_TCPV4,
    GSO_TCPV6,
    GSO_UDP_L4,
    VNET_HDR_LEN,
    OffloadError,
    TcpCoalescer,
    VnetHeader,
    complete_checksum,
)

# -- checksums and headers ---------------------------------------------------------------


def test_vnet_header_round_trip_and_layout() -> None:
    h = VnetHeader(F_NEEDS_CSUM, GSO_TCPV4, 66, 1374, 34, 16)
    packed = h.pack()
    assert len(packed) == VNET_HDR_LEN == 10
    assert packed == bytes([1, 1]) + struct.pack("<HHHH", 66, 1374, 34, 16)  # little-endian virtio fields
    assert VnetHeader.unpack(b"\0" * 3 + packed, 3) == h
    with pytest.raises(OffloadError):
        VnetHeader.unpack(packed[:9])


def test_complete_checksum_finishes_a_partial_one() -> None:
    frame = bytearray(tcp_frame(os.urandom(333), partial=True))
    assert not parse(bytes(frame))["tcp_ok"]
    complete_checksum(frame, 0, len(frame), 34, 16)
    assert parse(bytes(frame))["tcp_ok"]
    for bad_start, bad_offset in ((len(frame) - 1, 0), (4, 16), (34, len(frame))):
        with pytest.raises(OffloadError):
            complete_checksum(frame, 0, len(frame), bad_start, bad_offset)


# -- segmentation -------------------------------------------------------------------------


@pytest.mark.parametrize("ipv6", [False, True])
@pytest.mark.parametrize("payload_len", [1, 1374, 1375, 20000, 65000])
def test_segments_carry_the_payload_with_valid_headers(ipv6: bool, payload_len: int) -> None:
    payload = os.urandom(payload_len)
    size = 1374 if not ipv6 else 1354
    superframe = tcp_frame(payload, seq=0xFFFFF000, flags=ACK | PSH | FIN | CWR, ipv6=ipv6,
                           partial=True, ip_id=0xFFFE)  # fmt: skip
    segments = cut(superframe, gso(ipv6, size))
    assert len(segments) == -(-payload_len // size)
    fields = [parse(s) for s in segments]
    assert b"".join(f["payload"] for f in fields) == payload  # type: ignore[misc]
    assert all(f["ip_ok"] and f["tcp_ok"] for f in fields)
    assert all(len(s) <= MAX_FRAME for s in segments)
    for i, f in enumerate(fields):
        assert f["seq"] == (0xFFFFF000 + i * size) & 0xFFFFFFFF  # wraps
        assert f["ack"] == 5000
        last, first = i == len(fields) - 1, i == 0
        assert f["flags"] == ACK | (PSH | FIN if last else 0) | (CWR if first else 0)
        if not ipv6:
            assert f["ip_id"] == (0xFFFE + i) & 0xFFFF


def test_segment_size_is_lowered_to_fit_the_tunnel() -> None:
    """A gso_size larger than the tunnel carries is cut smaller, never dropped."""
    payload = os.urandom(9000)
    segments = cut(tcp_frame(payload, partial=True), gso(False, 8000))
    assert max(map(len, segments)) == MAX_FRAME
    assert b"".join(parse(s)["payload"] for s in segments) == payload  # type: ignore[misc]
    assert all(parse(s)["tcp_ok"] for s in segments)


@pytest.mark.parametrize(
    "frame, vnet",
    [
        (tcp_frame(b"x" * 3000), VnetHeader(F_NEEDS_CSUM, GSO_UDP_L4, 0, 1000, 34, 6)),  # not TCP GSO
        (tcp_frame(b"x" * 3000), gso(True, 1000)),  # says IPv6, is IPv4
        (tcp_frame(b"x" * 3000), gso(False, 0)),  # no segment size
        (tcp_frame(b"x" * 3000), gso(False, 10)),  # segments smaller than their headers
        (tcp_frame(b""), gso(False, 1000)),  # nothing to segment
        (tcp_frame(b"x" * 3000)[:40], gso(False, 1000)),  # truncated headers
        (ETH4 + b"\x45" + bytes(60), gso(False, 1000)),  # IPv4 but not TCP
        (b"\x00" * 100, gso(False, 1000)),  # not IP
    ],
)
def test_malformed_super_frames_are_refused(frame: bytes, vnet: VnetHeader) -> None:
    with pytest.raises(OffloadError):
        cut(frame, vnet)


def test_fragments_and_bad_tcp_header_lengths_are_refused() -> None:
    fragment = bytearray(tcp_frame(b"x" * 3000))
    fragment[20] |= 0x20  # more fragments
    bad_doff = bytearray(tcp_frame(b"x" * 3000))
    bad_doff[46] = 0xF0  # 60-byte TCP header claimed ... fine, but 4 bytes is not
    bad_doff[46] = 0x10
    for frame in (fragment, bad_doff):
        with pytest.raises(OffloadError):
            cut(bytes(frame), gso(False, 1000))


def test_random_bytes_never_escape_as_anything_but_offload_error() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randrange(0, 200)
        frame = bytes(rng.getrandbits(8) for _ in range(n))
        if rng.random() < 0.5 and n > 60:  # mostly plausible headers, to get deeper
            frame = tcp_frame(b"y" * rng.randrange(0, 3000))[: rng.randrange(0, 200)] + frame
        vnet = VnetHeader(rng.choice([0, 1, 3]), rng.choice([GSO_TCPV4, GSO_TCPV6, 0x81, 5, 0]), rng.randrange(65536),
                          rng.randrange(65536), rng.randrange(65536), rng.randrange(65536))  # fmt: skip
        try:
            cut(frame, vnet)
        except OffloadError:
            pass


# -- coalescing -------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.writes: list[tuple[VnetHeader, bytes]] = []

    def __call__(self, data: memoryview) -> None:
        self.writes.append((VnetHeader.unpack(data), bytes(data[VNET_HDR_LEN:])))


def coalesce(frames: list[bytes]) -> list[tuple[VnetHeader, bytes]]:
    sink = Sink()
    c = TcpCoalescer(sink, MAX_FRAME)
    for f in frames:
        c.add(memoryview(f))
    c.flush()
    assert c.held == 0
    return sink.writes


@pytest.mark.parametrize("ipv6", [False, True])
def test_segments_join_into_one_super_frame(ipv6: bool) -> None:
    payload = os.urandom(50000)
    original = tcp_frame(payload, flags=ACK | PSH, ipv6=ipv6, partial=True)
    segments = cut(original, gso(ipv6, 1300))
    writes = coalesce(segments)
    assert len(writes) == 1
    vnet, frame = writes[0]
    hdr = 14 + (40 if ipv6 else 20) + 32
    assert vnet == VnetHeader(F_NEEDS_CSUM, GSO_TCPV6 if ipv6 else GSO_TCPV4, hdr, 1300, hdr - 32, 16)
    fields = parse(complete(vnet, frame))
    assert fields["payload"] == payload and fields["ip_ok"] and fields["tcp_ok"]
    assert fields["flags"] == ACK | PSH and fields["seq"] == 1000
    # ... and cutting it again gives the very segments it was joined from.
    assert cut(frame, vnet) == segments


def test_runs_end_at_psh_at_a_short_segment_and_at_a_gap() -> None:
    def seg(seq: int, n: int, flags: int = ACK) -> bytes:
        return tcp_frame(bytes([seq & 0xFF]) * n, seq=seq, flags=flags)

    frames = [
        seg(0, 1000), seg(1000, 1000), seg(2000, 1000, ACK | PSH),  # PSH ends a run
        seg(3000, 1000), seg(4000, 500),  # a shorter one ends it too
        seg(4500, 1000), seg(5500, 1000), seg(7000, 1000),  # a gap
    ]
    writes = coalesce(frames)
    assert [len(parse(complete(v, f))["payload"]) for v, f in writes] == [3000, 1500, 2000, 1000]  # type: ignore[arg-type]
    assert [v.gso_type for v, _ in writes] == [GSO_TCPV4, GSO_TCPV4, GSO_TCPV4, GSO_NONE]
    # A frame that is not joined goes out as it came, checksums and all, behind an empty vnet header.
    assert writes[3] == (VnetHeader(), frames[7])
    assert all(parse(complete(v, f))["tcp_ok"] for v, f in writes)


def test_only_the_same_stream_joins_and_order_is_kept() -> None:
    a0, a1 = tcp_frame(b"a" * 800, seq=0), tcp_frame(b"a" * 800, seq=800)
    other_port = tcp_frame(b"b" * 800, seq=800, sport=40001)
    other_ack = tcp_frame(b"c" * 800, seq=1600, ack=6000)
    syn = tcp_frame(b"", seq=0, flags=SYN)
    pure_ack = tcp_frame(b"", seq=77)
    padded = tcp_frame(b"d" * 10, seq=2400, total_len=20 + 32 + 5)
    not_ip = ETH4[:12] + b"\x08\x06" + bytes(28)
    frames = [a0, a1, other_port, other_ack, syn, pure_ack, padded, not_ip]
    writes = coalesce(frames)
    assert [v.gso_type for v, _ in writes] == [GSO_TCPV4] + [GSO_NONE] * 6
    assert [f for _, f in writes[1:]] == frames[2:]
    assert parse(complete(*writes[0]))["payload"] == b"a" * 1600


def test_a_run_stops_below_64_kib() -> None:
    frames = [tcp_frame(bytes(1374), seq=i * 1374) for i in range(60)]
    writes = coalesce(frames)
    assert len(writes) == 2
    assert all(len(f) - 14 <= 65535 for _, f in writes)
    assert sum(len(parse(complete(v, f))["payload"]) for v, f in writes) == 60 * 1374  # type: ignore[arg-type]


def test_garbage_passes_through_unchanged() -> None:
    rng = random.Random(11)
    frames = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 120))) for _ in range(500)]
    frames += [tcp_frame(b"z" * 100)[: rng.randrange(1, 160)] for _ in range(200)]
    writes = coalesce(frames)
    joined = [f for v, f in writes if v.gso_type == GSO_NONE]
    assert len(writes) == len(joined)  # nothing of it was joined
    assert joined == frames


def test_a_stream_split_across_bursts_joins_per_burst() -> None:
    """``flush`` at a burst's end closes the run: the next burst's segments start a new one, not append to it."""
    frames = [tcp_frame(bytes([i]) * 1000, seq=i * 1000) for i in range(6)]
    sink = Sink()
    c = TcpCoalescer(sink, MAX_FRAME)
    for burst in (frames[:2], frames[2:3], frames[3:]):
        for f in burst:
            c.add(memoryview(f))
        c.flush()
    payloads = [parse(complete(v, f))["payload"] for v, f in sink.writes]
    assert payloads == [bytes([0]) * 1000 + bytes([1]) * 1000, bytes([2]) * 1000,
                        bytes([3]) * 1000 + bytes([4]) * 1000 + bytes([5]) * 1000]  # fmt: skip
    assert sink.writes[1] == (VnetHeader(), frames[2])
