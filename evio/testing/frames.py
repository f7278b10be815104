"""Ethernet frames as unit tests of the switch logic send them: hosts' MACs, broadcasts, ARP, an ICMP redirect, an
IPv6 duplicate address detection probe.

Frames are the minimum Ethernet payload long (46 bytes) unless a test gives its own payload. An ARP frame's
default payload is a well-formed request (a probe: Ethernet/IPv4, sender `src` at 0.0.0.0): the switch drops ARP
it cannot read from tunnel ports (decision 0068, amended for review21k K3).
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb
from evio.tcpip import finish, ipv4_header_checksum, ones_sum

BROADCAST = b"\xff" * 6
H1 = "02:00:00:00:00:01"
H2 = "02:00:00:00:00:02"
H3 = "02:00:00:00:00:03"

_ARP = 0x0806
_ARP_HEADER = b"\x00\x01\x08\x00\x06\x04"  # Ethernet, IPv4, 6-byte MACs, 4-byte addresses (RFC 826)


def eth(dst: bytes | str, src: str, ethertype: int = 0x0800, payload: bytes | None = None) -> bytes:
    """A frame from `src` to `dst` (a MAC string, or 6 bytes such as `BROADCAST`)."""
    if payload is None:
        payload = (_ARP_HEADER + b"\x00\x01" + frb.parse_mac(src)).ljust(46, b"\x00") if ethertype == _ARP else b"x" * 46
    to = dst if isinstance(dst, bytes) else frb.parse_mac(dst)
    return to + frb.parse_mac(src) + ethertype.to_bytes(2, "big") + payload


def arp_request(src: str) -> bytes:
    return eth(BROADCAST, src, _ARP, _ARP_HEADER + b"\x00\x01" + b"\x00" * 20)


def arp_reply(src: str, dst: str) -> bytes:
    return eth(dst, src, _ARP, _ARP_HEADER + b"\x00\x02" + b"\x00" * 20)


def ipv4(src: str, dst: str, proto: int, payload: bytes) -> bytes:
    """An IPv4 packet without options, TTL 64, its header checksum right."""
    header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                                   ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed))  # fmt: skip
    header[10:12] = ipv4_header_checksum(header, 0).to_bytes(2, "big")
    return bytes(header) + payload


def icmp_redirect(dst_mac: str, src_mac: str, gateway: str, victim: str, destination: str, new_gateway: str,
                  quoting: str = "udp") -> bytes:  # fmt: skip
    """"From `gateway`: for `destination`, use `new_gateway`" (ICMP type 5, code 1: host), to `victim`, quoting a
    packet of `victim`'s to `destination`: a UDP datagram (Linux acts on it for a socket of that datagram's), or
    with `quoting="echo reply"` an ICMP echo reply (Linux acts on that one with no socket: icmp_err)."""
    if quoting == "udp":
        quoted = ipv4(victim, destination, 17, struct.pack("!HHHH", 1234, 53, 8, 0))
    else:
        quoted = ipv4(victim, destination, 1, struct.pack("!BBHHH", 0, 0, 0, 1, 1))
    icmp = bytearray(struct.pack("!BBH4s", 5, 1, 0, ipaddress.IPv4Address(new_gateway).packed) + quoted)
    icmp[2:4] = finish(ones_sum(icmp)).to_bytes(2, "big")
    return frb.parse_mac(dst_mac) + frb.parse_mac(src_mac) + b"\x08\x00" + ipv4(gateway, victim, 1, bytes(icmp))


def dad_probe(eth_src: str, target: str) -> bytes:
    """A duplicate-address-detection probe (RFC 4862 5.4.2): an NS from :: for `target`, to its solicited-node
    group, no option, no nonce (what another member floods for an address: review21n N3)."""
    tgt = ipaddress.IPv6Address(target)
    group = ipaddress.IPv6Address("ff02::1:ff00:0").packed[:13] + tgt.packed[13:]
    src = bytes(16)
    icmp = bytearray(bytes([135, 0, 0, 0, 0, 0, 0, 0]) + tgt.packed)
    icmp[2:4] = finish(ones_sum(src + group + struct.pack("!I3xB", len(icmp), 58) + icmp)).to_bytes(2, "big")
    ipv6 = struct.pack("!IHBB16s16s", 6 << 28, len(icmp), 58, 255, src, group)
    return b"\x33\x33" + group[12:] + frb.parse_mac(eth_src) + b"\x86\xdd" + ipv6 + bytes(icmp)
