"""The answer to a frame that fits the TAP but not the tunnel's path: ICMP "fragmentation needed"
(IPv4, RFC 792 with RFC 1191's next-hop MTU) or ICMPv6 "packet too big" (RFC 4443 section 3.2),
written back into the TAP to the frame's sender, as a router on the path would send it.

Pure: ``answer(frame, mtu)`` returns the Ethernet frame to write, or None where no answer is due
(not IP; IPv4 without DF, which a router would fragment, or a fragment other than the first;
an ICMP error itself, RFC 1122 3.2.2 and RFC 4443 2.4(e); a multicast or unspecified source).
The answer comes from the packet's destination address and MAC: the sender's kernel checks the
quoted header against its socket, not who sent the error (Linux tcp_v4_err / tcp_v6_err).
"""

from __future__ import annotations

import struct

ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
_ETH = struct.Struct("!6s6sH")
_ICMP_ERRORS_V4 = frozenset({3, 4, 5, 11, 12})
IPV4_MIN_MTU = 68
IPV6_MIN_MTU = 1280
_V4_QUOTE = 576 - 20 - 8  # RFC 1812 4.3.2.3: as much of the packet as fits a 576-byte answer
_V6_QUOTE = IPV6_MIN_MTU - 40 - 8  # RFC 4443 2.4(c): as much as fits the minimum MTU


def answer(frame: bytes | bytearray | memoryview, mtu: int) -> bytes | None:
    """The ICMP error telling the sender of ``frame`` that the path takes IP packets of ``mtu`` bytes."""
    if len(frame) < _ETH.size:
        return None
    dst_mac, src_mac, ethertype = _ETH.unpack_from(frame, 0)
    if src_mac[0] & 1:
        return None
    packet = bytes(frame[_ETH.size :])
    if ethertype == ETH_P_IPV4:
        icmp = _answer_v4(packet, mtu)
    elif ethertype == ETH_P_IPV6:
        icmp = _answer_v6(packet, mtu)
    else:
        return None
    if icmp is None:
        return None
    return _ETH.pack(src_mac, dst_mac, ethertype) + icmp


def _answer_v4(packet: bytes, mtu: int) -> bytes | None:
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    ihl = (packet[0] & 0x0F) * 4
    flags_offset = int.from_bytes(packet[6:8], "big")
    if not flags_offset & 0x4000 or flags_offset & 0x1FFF:  # DF clear: routers fragment; a later fragment
        return None
    protocol, src, dst = packet[9], packet[12:16], packet[16:20]
    if protocol == 1 and len(packet) > ihl and packet[ihl] in _ICMP_ERRORS_V4:
        return None
    if src == bytes(4) or src[0] >= 224:
        return None
    icmp = bytearray(struct.pack("!BBHHH", 3, 4, 0, 0, max(mtu, IPV4_MIN_MTU)) + packet[:_V4_QUOTE])
    icmp[2:4] = _checksum(icmp).to_bytes(2, "big")
    header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, 20 + len(icmp), 0, 0, 64, 1, 0, dst, src))
    header[10:12] = _checksum(header).to_bytes(2, "big")
    return bytes(header + icmp)


def _answer_v6(packet: bytes, mtu: int) -> bytes | None:
    if len(packet) < 40 or packet[0] >> 4 != 6:
        return None
    src, dst = packet[8:24], packet[24:40]
    if src == bytes(16) or src[0] == 0xFF:
        return None
    if packet[6] == 58 and len(packet) > 40 and packet[40] < 128:  # an ICMPv6 error (no extension headers)
        return None
    # The answer's source: the destination, unless that is multicast (then the sender learns nothing
    # per destination anyway; a link-local of ours would do, but the frame's MAC is all we have).
    if dst[0] == 0xFF:
        return None
    body = struct.pack("!BBHI", 2, 0, 0, max(mtu, IPV6_MIN_MTU)) + packet[:_V6_QUOTE]
    pseudo = dst + src + len(body).to_bytes(4, "big") + b"\x00\x00\x00\x3a"  # the answer's: from dst to src
    icmp = bytearray(body)
    icmp[2:4] = _checksum(pseudo + body).to_bytes(2, "big")
    header = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 64, dst, src)
    return header + bytes(icmp)


def _checksum(data: bytes | bytearray) -> int:
    """RFC 1071 ones' complement sum."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
