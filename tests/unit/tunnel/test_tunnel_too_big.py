"""Frames over the path: the ICMP answers (too_big.py), checked with the independent RFC 1071 sum of
evio.testing.tcp_frames, the probe records, and both data paths answering into the TAP instead of sending."""

from __future__ import annotations

import struct

import pytest

from evio.testing.datapath_pair import close, collected, frame, make_pair
from evio.testing.tcp_frames import ETH4, ETH6, checksum_ok, tcp_frame
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.interface import DropReason, ProbesPath
from evio.tunnel.datapath.record import ECHO, ControlMessage, ControlOpcode, pack_control, pack_probe, parse_control
from evio.tunnel.datapath.too_big import answer
from evio.tunnel.errors import RecordError


def test_an_ipv4_df_packet_is_answered_frag_needed_from_its_destination_quoting_its_header() -> None:
    original = tcp_frame(b"x" * 1300)
    reply = answer(original, 1208)
    assert reply is not None
    assert reply[:6] == ETH4[6:12] and reply[6:12] == ETH4[:6] and reply[12:14] == b"\x08\x00"
    ip = reply[14:34]
    assert checksum_ok(ip) and ip[9] == 1 and ip[12:16] == original[30:34] and ip[16:20] == original[26:30]
    icmp = reply[34:]
    assert checksum_ok(icmp) and (icmp[0], icmp[1]) == (3, 4) and struct.unpack("!H", icmp[6:8])[0] == 1208
    assert icmp[8:36] == original[14:42]  # the original header and the first 8 bytes of its payload
    assert len(reply) - 14 <= 576


def test_an_ipv6_packet_is_answered_packet_too_big_at_least_the_ipv6_minimum() -> None:
    original = tcp_frame(b"x" * 1300, ipv6=True)
    reply = answer(original, 1208)
    assert reply is not None and reply[:6] == ETH6[6:12] and reply[12:14] == b"\x86\xdd"
    src, dst, icmp = reply[22:38], reply[38:54], reply[54:]
    assert (src, dst) == (original[38:54], original[22:38])
    pseudo = src + dst + struct.pack("!IxxxB", len(icmp), 58)
    assert checksum_ok(pseudo + icmp) and (icmp[0], icmp[1]) == (2, 0)
    assert struct.unpack("!I", icmp[4:8])[0] == 1280  # RFC 8200: no link below it
    assert icmp[8:48] == original[14:54] and len(reply) - 14 <= 1280


@pytest.mark.parametrize("case", ["no-df", "later-fragment", "icmp-error", "arp", "multicast-source", "short"])
def test_no_answer_where_a_router_would_send_none(case: str) -> None:
    original = bytearray(tcp_frame(b"x" * 1300))
    if case == "no-df":
        original[20:22] = b"\x00\x00"
    elif case == "later-fragment":
        original[20:22] = b"\x40\x10"
    elif case == "icmp-error":
        original[23] = 1
        original[34] = 3
    elif case == "arp":
        original[12:14] = b"\x08\x06"
    elif case == "multicast-source":
        original[6] |= 1
    else:
        original = original[:20]
    assert answer(original, 1208) is None


def test_probe_records_are_padded_and_answered_with_the_token() -> None:
    payload = pack_probe(0xABCD, 1400)
    assert len(payload) == 1400
    assert parse_control(payload) == ControlMessage(ControlOpcode.PMTU_PROBE, 0, 0xABCD)
    ack = pack_control(ControlOpcode.PMTU_ACK, 0, 0xABCD)
    assert len(ack) == ECHO.size and parse_control(ack) == ControlMessage(ControlOpcode.PMTU_ACK, 0, 0xABCD)
    with pytest.raises(RecordError):
        parse_control(ack[:-1])
    with pytest.raises(ValueError):
        pack_probe(1, ECHO.size - 1)


async def test_a_frame_over_the_path_is_answered_into_the_tap_and_counted_not_sent(implementation: str) -> None:
    pair = await make_pair(implementation)
    try:
        sender = pair.a.datapath
        assert isinstance(sender, ProbesPath)
        assert sender.largest_datagram() == 20 + 8 + 1428 + 14 + 26
        sender.set_path_mtu(1280)  # frames of up to 1280 - 28 - 26 = 1226 bytes
        pair.a.tap.send_frame(tcp_frame(b"x" * 1300))
        pair.a.tap.send_frame(frame(2, size=1226))
        got: list[bytes] = []
        await wait_until(collected(pair.b.tap, got, 1))
        assert [len(f) for f in got] == [1226]
        answers: list[bytes] = []
        await wait_until(collected(pair.a.tap, answers, 1))
        assert answers[0][34:36] == b"\x03\x04" and struct.unpack("!H", answers[0][40:42])[0] == 1280 - 28 - 26 - 14
        assert sender.stats().drops == {DropReason.PATH_TOO_BIG: 1}
        sender.set_path_mtu(None)  # the whole MTU again
        pair.a.tap.send_frame(tcp_frame(b"x" * 1300))
        await wait_until(collected(pair.b.tap, got, 2))
    finally:
        close(pair)


async def test_a_probe_crosses_padded_to_its_size(implementation: str) -> None:
    pair = await make_pair(implementation)
    try:
        assert isinstance(pair.a.datapath, ProbesPath)
        pair.a.datapath.send_probe(77, 1400)
        await wait_until(lambda: bool(pair.b.control))
        assert pair.b.control == [ControlMessage(ControlOpcode.PMTU_PROBE, 0, 77)]
        assert pair.b.datapath.stats().rx_bytes == 0  # a control record, not a frame
    finally:
        close(pair)
