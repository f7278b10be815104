"""TCP frames for the offload tests: built, parsed and checksummed here, independently of the code.

The checksums use `reference_sum`, RFC 1071 word by word, which shares nothing with the integer
trick of `evio.tcpip.ones_sum`, so a test that checks one with the other checks something.
`cut` and `complete` do what the data path and the kernel do with a superframe and a NEEDS_CSUM
frame; the data path, transit and native tests feed the frames through a TAP with vnet headers.
"""

from __future__ import annotations

import struct

from evio.tcpip import ACK
from evio.tunnel.datapath.offload import F_NEEDS_CSUM, GSO_TCPV4, GSO_TCPV6, VNET_HDR_LEN, VnetHeader, segment_tcp

MAX_FRAME = 1428 + 14
ETH4 = bytes.fromhex("020000000002" "020000000001" "0800")
ETH6 = bytes.fromhex("020000000002" "020000000001" "86dd")
SRC4, DST4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SRC6, DST6 = bytes.fromhex("fd00" + "00" * 13 + "01"), bytes.fromhex("fd00" + "00" * 13 + "02")
TIMESTAMPS = bytes.fromhex("0101080a0001e2400000abcd")  # NOP NOP TS: 12 bytes of options


def reference_sum(data: bytes) -> int:
    """RFC 1071, word by word: the independent check."""
    if len(data) % 2:
        data += b"\0"
    total = 0
    for (word,) in struct.iter_unpack("!H", data):
        total += word
        total = (total & 0xFFFF) + (total >> 16)
    return total


def checksum_ok(data: bytes) -> bool:
    """A region with its checksum field in place sums to 0xFFFF."""
    return reference_sum(data) == 0xFFFF


def tcp_frame(
    payload: bytes, seq: int = 1000, flags: int = ACK, ipv6: bool = False, options: bytes = TIMESTAMPS,
    ack: int = 5000, window: int = 512, ip_id: int = 7, sport: int = 40000, total_len: int | None = None,
    partial: bool = False,
) -> bytes:  # fmt: skip
    """An Ethernet frame with IPv4 or IPv6 and TCP, checksums complete, or the pseudo-header sum alone
    with ``partial`` (what a TAP with vnet headers hands over)."""
    doff = (20 + len(options)) // 4
    tcp = struct.pack("!HHIIBBHHH", sport, 5201, seq, ack, doff << 4, flags, window, 0, 0) + options
    l4_len = len(tcp) + len(payload)
    if ipv6:
        pseudo = SRC6 + DST6 + struct.pack("!IxxxB", l4_len, 6)
        ip = struct.pack("!IHBB", 6 << 28, l4_len if total_len is None else total_len, 6, 64) + SRC6 + DST6
        eth = ETH6
    else:
        pseudo = SRC4 + DST4 + struct.pack("!xBH", 6, l4_len)
        tot = 20 + l4_len if total_len is None else total_len
        ip = struct.pack("!BBHHHBBH", 0x45, 0, tot, ip_id, 0x4000, 64, 6, 0) + SRC4 + DST4
        ip = ip[:10] + struct.pack("!H", ~reference_sum(ip) & 0xFFFF) + ip[12:]
        eth = ETH4
    if partial:
        csum = reference_sum(pseudo)
    else:
        csum = ~reference_sum(pseudo + tcp + payload) & 0xFFFF
    tcp = tcp[:16] + struct.pack("!H", csum) + tcp[18:]
    return eth + ip + tcp + payload


def parse(frame: bytes) -> dict[str, int | bytes | bool]:
    """The fields a test looks at, and whether both checksums verify (independently)."""
    ipv6 = frame[12:14] == b"\x86\xdd"
    if ipv6:
        l3, l4_len = 40, struct.unpack_from("!H", frame, 18)[0]
        pseudo = frame[22:54] + struct.pack("!IxxxB", l4_len, 6)
        ip_ok, ip_id = True, 0
    else:
        l3 = (frame[14] & 15) * 4
        tot, ip_id = struct.unpack_from("!HH", frame, 16)
        assert tot == len(frame) - 14
        l4_len = tot - l3
        pseudo = frame[26:34] + struct.pack("!xBH", 6, l4_len)
        ip_ok = checksum_ok(frame[14 : 14 + l3])
    tcp = 14 + l3
    assert 14 + l3 + l4_len == len(frame)
    seq, ack = struct.unpack_from("!II", frame, tcp + 4)
    hl = (frame[tcp + 12] >> 4) * 4
    return {
        "seq": seq, "ack": ack, "flags": frame[tcp + 13], "ip_id": ip_id, "payload": frame[tcp + hl :],
        "ip_ok": ip_ok, "tcp_ok": checksum_ok(pseudo + frame[tcp:]),
    }  # fmt: skip


def gso(ipv6: bool, size: int, flags: int = F_NEEDS_CSUM) -> VnetHeader:
    """The vnet header of a TCP superframe cut into `size`-byte segments."""
    return VnetHeader(flags, GSO_TCPV6 if ipv6 else GSO_TCPV4, 0, size, 34 + (20 if ipv6 else 0), 16)


def cut(superframe: bytes, vnet: VnetHeader, max_frame: int = MAX_FRAME) -> list[bytes]:
    """The frames `segment_tcp` makes of a superframe."""
    buf = bytearray(VNET_HDR_LEN) + bytearray(superframe)
    out: list[bytes] = []
    count = segment_tcp(buf, VNET_HDR_LEN, len(superframe), vnet, max_frame, lambda s, e: out.append(bytes(buf[s:e])))
    assert count == len(out)
    return out


def complete(vnet: VnetHeader, frame: bytes) -> bytes:
    """What the kernel does with a NEEDS_CSUM frame: finish the checksum (with the independent sum)."""
    if not vnet.flags & F_NEEDS_CSUM:
        return frame
    at = vnet.csum_start + vnet.csum_offset
    body = frame[:at] + b"\0\0" + frame[at + 2 :]
    partial = struct.unpack_from("!H", frame, at)[0]
    total = reference_sum(body[vnet.csum_start :]) + partial
    total = (total & 0xFFFF) + (total >> 16)
    return body[:at] + struct.pack("!H", ~total & 0xFFFF) + body[at + 2 :]
