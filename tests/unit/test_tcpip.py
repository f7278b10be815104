"""The shared TCP/IP base (evio.tcpip): the Internet checksum and the header parse.

Sums are checked against a plain RFC 1071 loop over 16-bit words
(evio.testing.tcp_frames.reference_sum), which shares nothing with the integer
trick the module uses. What each
segmenter does with a parse is tested with it (test_sdn_segmentation.py,
test_tunnel_offload.py).
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evio.tcpip import (
    ETH_HEADER_LEN,
    SegmentError,
    SegmentReason,
    finish,
    fold,
    ipv4_header_checksum,
    ones_sum,
    parse_tcp,
    pseudo_header_sum,
)
from evio.testing.tcp_frames import reference_sum

SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6, DST6 = bytes.fromhex("fd00" + "00" * 13 + "01"), bytes.fromhex("fd00" + "00" * 13 + "02")
ETH = bytes.fromhex("020000000002" "020000000001")


def tcp_ipv4(payload: bytes, ip_options: bytes = b"", tcp_options: bytes = b"", padding: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 5201, 1, 2, (20 + len(tcp_options)) // 4 << 4, 0x10, 512, 0, 0)
    tcp += tcp_options
    header_len = 20 + len(ip_options)
    ip = struct.pack("!BBHHHBBH", 0x40 | header_len // 4, 0, header_len + len(tcp) + len(payload), 7, 0x4000, 64, 6, 0)
    return ETH + b"\x08\x00" + ip + SRC4 + DST4 + ip_options + tcp + payload + padding


def tcp_ipv6(payload: bytes, padding: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 5201, 1, 2, 5 << 4, 0x10, 512, 0, 0)
    ip = struct.pack("!IHBB", 6 << 28, len(tcp) + len(payload), 6, 64) + SRC6 + DST6
    return ETH + b"\x86\xdd" + ip + tcp + payload + padding


# ---------------------------------------------------------------------- sums


@pytest.mark.parametrize("length", [0, 1, 2, 3, 20, 1399, 1400, 65535])
def test_ones_sum_matches_the_word_by_word_sum(length: int) -> None:
    rng = random.Random(length)
    for _ in range(5):
        data = bytes(rng.getrandbits(8) for _ in range(length))
        assert ones_sum(data) == reference_sum(data)
        assert ones_sum(memoryview(bytearray(data))) == reference_sum(data)
    assert ones_sum(b"\xff\xff" * 3) == 0xFFFF == reference_sum(b"\xff\xff" * 3)
    assert ones_sum(b"") == 0


@given(st.binary(max_size=300))
def test_ones_sum_matches_the_textbook_loop_for_any_bytes(data: bytes) -> None:
    assert ones_sum(data) == reference_sum(data)


@given(st.lists(st.integers(0, 0xFFFF), max_size=40))
def test_fold_and_finish_agree_with_summing_word_by_word(words: list[int]) -> None:
    as_bytes = b"".join(w.to_bytes(2, "big") for w in words)
    assert fold(sum(words)) == reference_sum(as_bytes)
    field = finish(sum(words))
    assert field != 0  # zero goes out as 0xFFFF, its equal
    assert reference_sum(as_bytes + field.to_bytes(2, "big")) == 0xFFFF  # the sum with its checksum verifies


def test_the_ipv4_header_checksum_ignores_the_field_and_verifies() -> None:
    header = bytearray(tcp_ipv4(b"x" * 10, ip_options=b"\x01\x01\x01\x00")[ETH_HEADER_LEN : ETH_HEADER_LEN + 24])
    header[10:12] = b"\xab\xcd"  # whatever is in the field does not count
    header[10:12] = ipv4_header_checksum(header, 0, len(header)).to_bytes(2, "big")
    assert reference_sum(bytes(header)) == 0xFFFF


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_pseudo_header_sum_is_the_sum_of_the_rfc_pseudo_header(ipv6: bool) -> None:
    frame = tcp_ipv6(b"p" * 999) if ipv6 else tcp_ipv4(b"p" * 999)
    if ipv6:
        pseudo = SRC6 + DST6 + struct.pack("!IxxxB", 70_000, 6)  # a 32-bit length: carries must fold
    else:
        pseudo = SRC4 + DST4 + struct.pack("!xBH", 6, 1019)
    assert fold(pseudo_header_sum(frame, 0, ipv6, 70_000 if ipv6 else 1019)) == reference_sum(pseudo)
    shifted = b"\0" * 10 + frame  # the frame need not start the buffer
    assert fold(pseudo_header_sum(shifted, 10, ipv6, 5)) == fold(pseudo_header_sum(frame, 0, ipv6, 5))


# ---------------------------------------------------------------------- the header parse


def test_offsets_of_ipv4_with_options_and_ipv6() -> None:
    v4 = tcp_ipv4(b"d" * 100, ip_options=b"\x01" * 8, tcp_options=b"\x01" * 12)
    p = parse_tcp(v4, 0, len(v4), ip_length=True)
    assert (p.ipv6, p.tcp_at, p.payload_at, p.end) == (False, 14 + 28, 14 + 28 + 32, len(v4))
    v6 = tcp_ipv6(b"d" * 100)
    p = parse_tcp(b"\0" * 3 + v6, 3, len(v6), ip_length=True)
    assert (p.ipv6, p.tcp_at, p.payload_at, p.end) == (True, 54, 74, len(v6))


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_the_ip_length_ends_the_packet_only_when_asked(ipv6: bool) -> None:
    padded = tcp_ipv6(b"d" * 4, padding=b"\0" * 6) if ipv6 else tcp_ipv4(b"d" * 4, padding=b"\0" * 6)
    assert parse_tcp(padded, 0, len(padded), ip_length=True).end == len(padded) - 6  # padding is not payload
    assert parse_tcp(padded, 0, len(padded), ip_length=False).end == len(padded)
    short = padded[:-10]  # shorter than the IP length says
    with pytest.raises(SegmentError) as caught:
        parse_tcp(short, 0, len(short), ip_length=True)
    assert caught.value.reason is SegmentReason.TRUNCATED
    assert parse_tcp(short, 0, len(short), ip_length=False).end == len(short)  # a super-frame's length is not read


@given(st.binary(max_size=120), st.booleans(), st.sampled_from([b"", b"\x08\x00\x45", b"\x86\xdd\x60"]))
def test_any_bytes_parse_or_raise_segment_error(junk: bytes, ip_length: bool, lead: bytes) -> None:
    data = ETH + lead + junk if lead else junk
    try:
        p = parse_tcp(data, 0, len(data), ip_length=ip_length)
    except SegmentError:
        return
    assert ETH_HEADER_LEN + 20 <= p.tcp_at < p.payload_at <= p.end <= len(data)
