"""Gratuitous ARP frames (RFC 5227 section 3; RFC 826): a pure builder and a parser.

When an overlay address appears on a node (or moves to it from another), the
node announces it, so every host on the overlay updates its ARP cache at once
instead of waiting for its stale entry to fail (the paper's E2: 6.15 s).

Two forms, both broadcast, sender and target protocol address equal:

- request (RFC 5227's "ARP Announcement"): op 1, target hardware address zero;
- reply: op 2, target hardware address = sender's. Linux only takes an ARP
  reply as gratuitous when the two hardware addresses are equal
  (net/ipv4/arp.c, arp_is_garp); some other stacks only heed replies.

Frames are padded to Ethernet's 60-byte minimum.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from dataclasses import dataclass

from evio.sdn.frb import format_mac, parse_mac

ETH_TYPE_ARP = 0x0806
ETH_MIN_FRAME_LEN = 60
BROADCAST = b"\xff" * 6
ZERO_MAC = b"\x00" * 6

# Ethernet header, then ARP for Ethernet/IPv4: htype ptype hlen plen op sha spa tha tpa.
_ARP_FRAME = struct.Struct("!6s6sHHHBBH6s4s6s4s")
_HTYPE_ETHERNET = 1
# Linux's arp_rcv takes hardware type 1 or 6 (IEEE 802) on an Ethernet device (RFC 2625): both are Ethernet here,
# so a guard reading only 1 misses what the kernel takes (review21k K3).
_HTYPES = (_HTYPE_ETHERNET, 6)
_PTYPE_IPV4 = 0x0800


class ArpOp(enum.IntEnum):
    REQUEST = 1
    REPLY = 2


@dataclass(frozen=True, slots=True)
class ArpPacket:
    """An Ethernet/IPv4 ARP frame; MACs as "aa:bb:cc:dd:ee:ff"."""

    eth_dst: str
    eth_src: str
    op: ArpOp
    sender_mac: str
    sender_ip: ipaddress.IPv4Address
    target_mac: str
    target_ip: ipaddress.IPv4Address

    @property
    def is_gratuitous(self) -> bool:
        """Sender and target address equal, as RFC 5227 announcements and Linux want them."""
        if self.sender_ip != self.target_ip:
            return False
        return self.op is ArpOp.REQUEST or self.target_mac == self.sender_mac


def gratuitous_arp(mac: str, address: ipaddress.IPv4Address | str, op: ArpOp = ArpOp.REQUEST) -> bytes:
    """The broadcast frame announcing that `address` is at `mac`."""
    ip = ipaddress.IPv4Address(address).packed
    sha = parse_mac(mac)
    if sha[0] & 0x01 or sha == ZERO_MAC:
        raise ValueError(f"a gratuitous ARP needs a unicast sender MAC, got {mac}")
    tha = ZERO_MAC if op is ArpOp.REQUEST else sha
    frame = _ARP_FRAME.pack(BROADCAST, sha, ETH_TYPE_ARP, _HTYPE_ETHERNET, _PTYPE_IPV4, 6, 4, op, sha, ip, tha, ip)
    return frame.ljust(ETH_MIN_FRAME_LEN, b"\x00")


def parse_arp(frame: bytes) -> ArpPacket | None:
    """The ARP packet in `frame`, or None if it is not Ethernet/IPv4 ARP (hardware type 1 or 6, as Linux reads
    it on Ethernet) with op request or reply (no exception for bad input)."""
    if len(frame) < _ARP_FRAME.size:
        return None
    dst, src, ethertype, htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _ARP_FRAME.unpack_from(frame)
    if ethertype != ETH_TYPE_ARP or htype not in _HTYPES or (ptype, hlen, plen) != (_PTYPE_IPV4, 6, 4):
        return None
    if op not in (ArpOp.REQUEST, ArpOp.REPLY):
        return None
    return ArpPacket(format_mac(dst), format_mac(src), ArpOp(op), format_mac(sha), ipaddress.IPv4Address(spa),
                     format_mac(tha), ipaddress.IPv4Address(tpa))


def is_readable_arp(frame: bytes) -> bool:
    """Whether an untagged ARP frame is one `parse_arp` reads (the guards' check, without building the packet)."""
    return len(frame) >= _ARP_FRAME.size and frame[14:22] in _READABLE


# htype, ptype, hlen, plen, op of the ARP `parse_arp` reads: one slice and a set lookup per frame for the guards.
_READABLE = frozenset(struct.pack("!HHBBH", htype, _PTYPE_IPV4, 6, 4, op) for htype in _HTYPES for op in ArpOp)
