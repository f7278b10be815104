"""Software TCP segmentation and checksum completion (evio.sdn.segmentation).

Checksums are verified against two computations that share nothing with the
module: a plain RFC 1071 loop over 16-bit words written here, and os-ken's
packet library, which also parses every segment back.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from os_ken.lib.packet import packet, packet_utils
from os_ken.lib.packet import tcp as osken_tcp

from evio.sdn import frb
from evio.sdn import segmentation as seg
from evio.sdn.boundary import AttachOverlay, DropCounts
from evio.sdn.flow_actions import AddFlow, FlowMatch, PacketOut
from evio.sdn.overlay_switch import OverlaySwitch
from evio.sdn.segmentation import SegmentError, SegmentReason
from evio.sdn.switch import FLOW_HARD_TIMEOUT, BoundedFloodSwitch, Drop, PortKind, SwitchPort
from evio.tcpip import ACK, CWR, ECE, FIN, PSH, RST, SYN, URG

SRC_MAC = bytes.fromhex("020000000001")
DST_MAC = bytes.fromhex("020000000002")
V4_SRC, V4_DST = ipaddress.IPv4Address("10.10.0.1"), ipaddress.IPv4Address("10.10.0.2")
V6_SRC, V6_DST = ipaddress.IPv6Address("fd00::1"), ipaddress.IPv6Address("fd00::2")
MTU = 1428
MAX_FRAME = MTU + 14


# ---------------------------------------------------------------------- an independent reference


def rfc1071(data: bytes) -> int:
    """The Internet checksum, the textbook way: add 16-bit words, fold carries, complement."""
    if len(data) % 2:
        data += b"\x00"
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pseudo(src: bytes, dst: bytes, length: int, ipv6: bool) -> bytes:
    if ipv6:
        return src + dst + struct.pack("!I3xB", length, 6)
    return src + dst + struct.pack("!xBH", 6, length)


def tcp_header(seq: int, flags: int, options: bytes = b"", checksum: int = 0) -> bytes:
    assert len(options) % 4 == 0
    offset = (20 + len(options)) // 4
    return struct.pack("!HHIIBBHHH", 40000, 5201, seq, 77, offset << 4, flags, 512, checksum, 0) + options


def frame(payload: bytes, *, ipv6: bool = False, seq: int = 1000, flags: int = ACK | PSH, tcp_options: bytes = b"",
          ip_options: bytes = b"", ident: int = 0x1234, checksum: str = "good", padding: bytes = b"",
          ip_flags: int = 0x4000) -> bytes:
    """A TCP/IP frame; `checksum` "good" (correct), "partial" (pseudo-header sum, as offload leaves it) or "zero"."""
    tcp = tcp_header(seq, flags, tcp_options)
    tcp_len = len(tcp) + len(payload)
    src, dst = (V6_SRC.packed, V6_DST.packed) if ipv6 else (V4_SRC.packed, V4_DST.packed)
    if checksum == "good":
        value = rfc1071(pseudo(src, dst, tcp_len, ipv6) + tcp + payload)
    elif checksum == "partial":
        value = ~rfc1071(pseudo(src, dst, tcp_len, ipv6)) & 0xFFFF
    else:
        value = 0
    tcp = tcp[:16] + value.to_bytes(2, "big") + tcp[18:]
    if ipv6:
        ip = struct.pack("!IHBB", 6 << 28, tcp_len, 6, 64) + src + dst
        ethertype = 0x86DD
    else:
        header_len = 20 + len(ip_options)
        ip = struct.pack("!BBHHHBBH", 0x40 | header_len // 4, 0, header_len + tcp_len, ident, ip_flags, 64, 6, 0)
        ip += src + dst + ip_options
        ip = ip[:10] + rfc1071(ip).to_bytes(2, "big") + ip[12:]
        ethertype = 0x0800
    return DST_MAC + SRC_MAC + ethertype.to_bytes(2, "big") + ip + tcp + payload + padding


def check_segment(data: bytes) -> tuple[int, int, bytes]:
    """Verify one segment independently; (seq, flags, payload)."""
    ipv6 = data[12:14] == b"\x86\xdd"
    if ipv6:
        ip_end = 14 + 40
        assert int.from_bytes(data[18:20], "big") == len(data) - ip_end  # payload length
        src, dst = data[22:38], data[38:54]
    else:
        ihl = (data[14] & 0x0F) * 4
        ip_end = 14 + ihl
        assert int.from_bytes(data[16:18], "big") == len(data) - 14  # total length
        assert rfc1071(data[14:ip_end]) == 0  # the IPv4 header checksum verifies
        src, dst = data[26:30], data[30:34]
    segment = data[ip_end:]
    assert rfc1071(pseudo(src, dst, len(segment), ipv6) + segment) == 0  # the TCP checksum verifies
    # os-ken's parser and checksum agree.
    parsed = packet.Packet(data)
    ip = parsed.protocols[1]
    t = parsed.get_protocol(osken_tcp.tcp)
    assert t is not None
    assert packet_utils.checksum_ip(ip, len(segment), segment) == 0
    header_len = (segment[12] >> 4) * 4
    return t.seq, segment[13], segment[header_len:]


def payload_of(length: int) -> bytes:
    return bytes((i * 7 + 3) & 0xFF for i in range(length))


# ---------------------------------------------------------------------- segmentation


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_a_super_frame_becomes_segments_that_each_fit_and_verify(ipv6: bool) -> None:
    data = payload_of(64_000)
    big = frame(data, ipv6=ipv6, seq=0xFFFF_F000, checksum="partial")  # offload left the checksum partial
    out = seg.segment_tcp(big, MAX_FRAME)
    headers = 14 + (40 if ipv6 else 20) + 20
    mss = MAX_FRAME - headers
    assert len(out) == -(-len(data) // mss)
    assert all(len(s) <= MAX_FRAME for s in out)
    assert all(len(s) == MAX_FRAME for s in out[:-1])  # full segments but the last
    seqs, flags, payloads = zip(*(check_segment(s) for s in out), strict=True)
    assert b"".join(payloads) == data
    assert list(seqs) == [(0xFFFF_F000 + i * mss) & 0xFFFF_FFFF for i in range(len(out))]  # wraps at 2**32
    assert [f & PSH for f in flags] == [0] * (len(out) - 1) + [PSH]
    assert all(s[:14] == big[:14] for s in out)


def test_ipv4_identification_advances_per_segment_and_options_are_copied() -> None:
    ip_options = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL
    tcp_options = b"\x01\x01\x08\x0a" + struct.pack("!II", 123456, 654321)  # NOP NOP timestamps
    big = frame(payload_of(5000), ident=0xFFFE, ip_options=ip_options, tcp_options=tcp_options)
    out = seg.segment_tcp(big, MAX_FRAME)
    assert len(out) == 4
    assert [int.from_bytes(s[18:20], "big") for s in out] == [0xFFFE, 0xFFFF, 0x0000, 0x0001]
    for s in out:
        check_segment(s)
        assert s[34:38] == ip_options
        assert s[38 + 20 : 38 + 32] == tcp_options
        assert s[20] & 0x40  # DF kept


def test_fin_and_psh_only_on_the_last_cwr_only_on_the_first_others_on_all() -> None:
    big = frame(payload_of(4000), flags=ACK | PSH | FIN | CWR | ECE)
    out = seg.segment_tcp(big, MAX_FRAME)
    flags = [check_segment(s)[1] for s in out]
    assert flags[0] == ACK | ECE | CWR
    assert all(f == ACK | ECE for f in flags[1:-1])
    assert flags[-1] == ACK | ECE | PSH | FIN
    assert len(flags) >= 3


def test_rst_is_kept_on_every_segment() -> None:
    out = seg.segment_tcp(frame(payload_of(3000), flags=ACK | RST), MAX_FRAME)
    assert all(check_segment(s)[1] == ACK | RST for s in out)


def test_exact_multiple_of_the_mss_gives_full_segments_only() -> None:
    mss = MAX_FRAME - 54
    out = seg.segment_tcp(frame(payload_of(3 * mss)), MAX_FRAME)
    assert [len(s) for s in out] == [MAX_FRAME] * 3
    one_more = seg.segment_tcp(frame(payload_of(3 * mss + 1)), MAX_FRAME)
    assert [len(s) for s in one_more] == [MAX_FRAME] * 3 + [55]
    assert check_segment(one_more[-1])[2] == payload_of(3 * mss + 1)[-1:]


def test_a_frame_that_fits_is_returned_as_it_is() -> None:
    small = frame(payload_of(100), checksum="partial")
    assert seg.segment_tcp(small, MAX_FRAME) == [small]
    exact = frame(payload_of(MAX_FRAME - 54))
    assert len(exact) == MAX_FRAME and seg.segment_tcp(exact, MAX_FRAME) == [exact]


def test_a_frame_too_big_only_by_padding_is_trimmed() -> None:
    padded = frame(payload_of(10), padding=b"\x00" * 100)
    (out,) = seg.segment_tcp(padded, 80)
    assert len(out) == 64
    assert check_segment(out)[2] == payload_of(10)


def test_tiny_limit_gives_one_byte_segments() -> None:
    out = seg.segment_tcp(frame(b"abc", flags=ACK | PSH | FIN), 55)
    assert [check_segment(s)[2] for s in out] == [b"a", b"b", b"c"]
    assert [check_segment(s)[1] & (FIN | PSH) for s in out] == [0, 0, FIN | PSH]


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 9000), limit=st.integers(75, 1600), ipv6=st.booleans(),
       seq=st.integers(0, 0xFFFF_FFFF), partial=st.booleans())
def test_segments_reassemble_and_verify(length: int, limit: int, ipv6: bool, seq: int, partial: bool) -> None:
    data = payload_of(length)
    big = frame(data, ipv6=ipv6, seq=seq, checksum="partial" if partial else "good")
    out = seg.segment_tcp(big, limit)
    if len(big) <= limit:
        assert out == [big]
        return
    assert all(len(s) <= limit for s in out)
    parts = [check_segment(s) for s in out]
    assert b"".join(p[2] for p in parts) == data
    expected, at = [], seq
    for p in parts:
        expected.append(at)
        at = (at + len(p[2])) & 0xFFFF_FFFF
    assert [p[0] for p in parts] == expected


# ---------------------------------------------------------------------- what cannot be segmented


def udp_frame(size: int) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, size - 14, 1, 0, 64, 17, 0, V4_SRC.packed, V4_DST.packed)
    return DST_MAC + SRC_MAC + b"\x08\x00" + ip + b"\x00" * (size - 34)


def reason_for(data: bytes, limit: int = MAX_FRAME) -> SegmentReason:
    with pytest.raises(SegmentError) as caught:
        seg.segment_tcp(data, limit)
    return caught.value.reason


def test_what_cannot_be_segmented_is_refused_with_its_reason() -> None:
    big = frame(payload_of(3000))
    assert reason_for(udp_frame(3000)) is SegmentReason.NOT_TCP
    assert reason_for(big[:12] + b"\x08\x06" + big[14:]) is SegmentReason.NOT_IP  # ARP ethertype
    assert reason_for(big[:12] + b"\x81\x00" + big[14:]) is SegmentReason.NOT_IP  # VLAN-tagged
    assert reason_for(big[:1500]) is SegmentReason.TRUNCATED  # total length beyond the frame
    assert reason_for(big[:14] + b"\x44" + big[15:]) is SegmentReason.BAD_IP_HEADER  # IHL 4 words
    assert reason_for(big[:14] + b"\x65" + big[15:]) is SegmentReason.BAD_IP_HEADER  # version 6 in IPv4
    assert reason_for(frame(payload_of(3000), ip_flags=0x2000)) is SegmentReason.FRAGMENT  # more fragments
    assert reason_for(frame(payload_of(3000), ip_flags=0x0010)) is SegmentReason.FRAGMENT  # offset
    assert reason_for(frame(payload_of(3000), flags=SYN | ACK)) is SegmentReason.UNSUPPORTED_FLAGS
    assert reason_for(frame(payload_of(3000), flags=URG | ACK)) is SegmentReason.UNSUPPORTED_FLAGS
    assert reason_for(big[:46] + b"\x40" + big[47:]) is SegmentReason.BAD_TCP_HEADER  # data offset 4 words
    assert reason_for(big, limit=54) is SegmentReason.NO_ROOM  # the headers alone fill the limit


def test_malformed_ipv6_is_refused() -> None:
    big6 = frame(payload_of(3000), ipv6=True)
    hop_by_hop = big6[:20] + b"\x00" + big6[21:]
    assert reason_for(hop_by_hop) is SegmentReason.IPV6_EXTENSION
    assert reason_for(big6[:20] + b"\x11" + big6[21:]) is SegmentReason.NOT_TCP  # UDP
    assert reason_for(big6[:1000], limit=500) is SegmentReason.TRUNCATED
    assert reason_for(big6[:14] + b"\x40" + big6[15:]) is SegmentReason.BAD_IP_HEADER


@given(st.binary(min_size=0, max_size=200))
def test_garbage_only_ever_raises_segment_error(junk: bytes) -> None:
    for data in (junk, big_prefix() + junk, big_prefix(ipv6=True) + junk):
        try:
            out = seg.segment_tcp(data, 60)
        except SegmentError:
            continue
        assert all(len(s) <= 60 for s in out)


def big_prefix(ipv6: bool = False) -> bytes:
    return frame(payload_of(200), ipv6=ipv6)[:60]


# ---------------------------------------------------------------------- checksum completion


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("length", [0, 1, 2, 1374])
def test_a_partial_checksum_is_finished(ipv6: bool, length: int) -> None:
    partial = frame(payload_of(length), ipv6=ipv6, checksum="partial")
    done = seg.complete_partial_checksum(partial)
    assert done == frame(payload_of(length), ipv6=ipv6, checksum="good")
    check_segment(done)
    assert seg.tcp_checksum_ok(done) and not seg.tcp_checksum_ok(partial)


def test_partial_checksum_finished_with_ethernet_padding_left_alone() -> None:
    partial = frame(b"x", checksum="partial", padding=b"\xaa" * 5)
    done = seg.complete_partial_checksum(partial)
    assert done[-5:] == b"\xaa" * 5 and seg.tcp_checksum_ok(done)


def test_good_wrong_and_non_tcp_checksums_are_left_alone() -> None:
    good = frame(payload_of(50))
    assert seg.complete_partial_checksum(good) is good
    wrong = frame(payload_of(50), checksum="zero")  # neither right nor partial: the receiver drops it
    assert seg.complete_partial_checksum(wrong) is wrong
    udp = udp_frame(100)
    assert seg.complete_partial_checksum(udp) is udp
    runt = good[:30]
    assert seg.complete_partial_checksum(runt) is runt


# ---------------------------------------------------------------------- in the switch

H1, H2 = SRC_MAC.hex(":"), DST_MAC.hex(":")


def switch_with_ports() -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01", flow_idle_timeout=30, tunnel_mtu=MTU)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, "02:aa:00:00:00:09"), now=0)
    sw.port_added(SwitchPort(2, "app0", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    sw.port_added(SwitchPort(11, "t300", PortKind.PEER, 300), now=0)
    return sw


def packet_outs(actions: list, port: int) -> list[bytes]:
    return [a.data for a in actions if isinstance(a, PacketOut) and a.port == port]


def test_a_flooded_super_frame_goes_out_as_segments_that_fit_a_tunnel_inside_their_frb() -> None:
    sw = switch_with_ports()
    data = payload_of(60_000)
    big = frame(data, checksum="partial")  # from the host behind br0; H2 is not known yet
    actions = sw.packet_in(1, big, now=1)
    for port in (10, 11):
        wires = packet_outs(actions, port)
        assert wires and all(len(w) <= MAX_FRAME for w in wires)  # what the tunnel TAP takes
        inner = [frb.parse(w).payload for w in wires]
        assert all(len(f) == MAX_FRAME - frb.FRB_MIN_FRAME_LEN for f in inner[:-1])
        assert b"".join(check_segment(f)[2] for f in inner) == data
    to_leaf = packet_outs(actions, 2)
    assert all(len(f) <= MAX_FRAME for f in to_leaf) and len(to_leaf) == -(-len(data) // (MAX_FRAME - 54))
    assert b"".join(check_segment(f)[2] for f in to_leaf) == data
    assert sw.counters.segmented == 2 and sw.counters.broadcasts_originated == 1
    assert sw.drops == {}


def test_a_super_frame_to_a_known_peer_is_segmented_to_the_tunnel_mtu() -> None:
    sw = switch_with_ports()
    from_h2 = SRC_MAC + DST_MAC + frame(b"")[12:]
    sw.packet_in(10, frb.pack(frb.broadcast(from_h2, 200, 100, 1)), now=1)  # H2 learned on port 10
    data = payload_of(20_000)
    actions = sw.packet_in(1, frame(data, checksum="partial"), now=2)
    assert actions[-1] == AddFlow(FlowMatch(1, H1, H2), 10, 30, hard_timeout=FLOW_HARD_TIMEOUT, counted=True)  # after the frames: they need no flow
    out = packet_outs(actions, 10)
    assert all(len(f) <= MAX_FRAME for f in out) and len(out) == -(-len(data) // (MAX_FRAME - 54))
    assert b"".join(check_segment(f)[2] for f in out) == data


def test_a_partial_checksum_is_finished_before_the_frame_is_sent() -> None:
    sw = switch_with_ports()
    actions = sw.packet_in(1, frame(payload_of(200), checksum="partial"), now=1)
    wires = packet_outs(actions, 10)
    check_segment(frb.parse(wires[0]).payload)
    assert sw.counters.checksums_completed == 1 and sw.counters.segmented == 0


def test_an_oversized_frame_that_is_not_tcp_is_dropped_and_counted_never_raised() -> None:
    sw = switch_with_ports()
    assert sw.packet_in(1, udp_frame(9000), now=1) == []
    assert sw.drops[Drop.OVERSIZED] == 2  # once for the leaves, once for the flood
    assert sw.segment_errors == {SegmentReason.NOT_TCP: 2}
    # A full-size UDP frame fits a tunnel but not inside an FRB: the other leaf gets it, no peer does.
    full = udp_frame(MAX_FRAME)
    actions = sw.packet_in(1, full, now=2)
    assert packet_outs(actions, 10) == [] and packet_outs(actions, 2) == [full]
    assert sw.segment_errors[SegmentReason.NOT_TCP] == 3


def test_the_overlay_passes_its_tunnel_mtu_and_reports_why_oversized_frames_were_dropped() -> None:
    overlay = OverlaySwitch(AttachOverlay("red", 0x1F, 100, tunnel_mtu=1408))  # an IPv6 underlay's TAP MTU
    assert overlay.switch.max_frame_len == 1422
    overlay.port_up(1, "br0", "02:aa:00:00:00:09", now=0)
    overlay.port_up(2, "app0", "02:aa:00:00:00:0a", now=0)
    overlay.packet_in(1, udp_frame(2000), now=1)
    (report,) = overlay.drop_report()
    assert isinstance(report, DropCounts)
    assert report.drops == {"OVERSIZED": 1} and report.segment_errors == {"NOT_TCP": 1}
