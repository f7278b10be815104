"""Ethernet frames as unit tests of the switch logic send them: hosts' MACs, broadcasts, ARP.

Frames are the minimum Ethernet payload long (46 bytes) unless a test gives its own payload. An ARP frame's
default payload is a well-formed request (a probe: Ethernet/IPv4, sender `src` at 0.0.0.0): the switch drops ARP
it cannot read from tunnel ports (decision 0068, amended for review21k K3).
"""

from __future__ import annotations

from evio.sdn import frb

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
