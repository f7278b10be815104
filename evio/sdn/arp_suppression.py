"""ARP answered by the local switch for addresses the overlay already knows (issue 23; EVPN-style suppression).

Every first contact on the overlay starts with an ARP request, a broadcast that Bounded Flood carries to every
node. In a 32-node lab, `evio lab pingall`'s 992 first contacts were 992 overlay-wide floods at once. The switch
sees every ARP that reaches a controller (broadcasts always do, as does the first frame of a new unicast pair),
so it can keep what they say, address to MAC, and answer a local host's request itself when it knows the
answer: the request then crosses no tunnel.

When it answers, and when it does not (the request is then flooded as before, so nothing breaks):

- only requests from a leaf port (a local host), never requests arriving from peers: the node that flooded
  them already chose to;
- only for an address learned from an ARP whose sender hardware address is the frame's Ethernet source and
  whose source the learning table accepted (so H4's rules on who may move a MAC apply to it too), seen within
  `max_age`;
- only while that MAC is itself live in the learning table, and not on the asking port (a LAN segment answers
  for itself);
- never for an address two MACs claimed within `max_age` (a move, a duplicate, or a member lying about
  another's address): such an address is *contested* until only one MAC has spoken for it for `max_age`, and
  its requests are flooded, so every owner answers as on any Ethernet;
- never for probes (sender address 0.0.0.0, RFC 5227) or announcements (gratuitous ARP): those are meant for
  everyone.

The table is bounded (`max_entries`, oldest evicted first), so ARP from invented senders costs a member only its
own entries. Pure: no clock, no I/O; times come in as arguments.
"""

from __future__ import annotations

import ipaddress
import struct
from collections import OrderedDict
from dataclasses import dataclass

from evio.sdn.frb import parse_mac
from evio.sdn.garp import ETH_MIN_FRAME_LEN, ETH_TYPE_ARP, ArpOp, ArpPacket

MAX_ENTRIES = 8192
_ARP_REPLY = struct.Struct("!6s6sHHHBBH6s4s6s4s")
_UNSPECIFIED = ipaddress.IPv4Address(0)


@dataclass
class _Entry:
    mac: str
    seen: float
    contested_until: float = 0.0  # another MAC spoke for the address: no answers before this


class ArpSuppression:
    def __init__(self, max_age: float = 300.0, max_entries: int = MAX_ENTRIES) -> None:
        self.max_age = max_age
        self.max_entries = max_entries
        self._entries: OrderedDict[ipaddress.IPv4Address, _Entry] = OrderedDict()  # least recently heard first
        self.answered = 0  # requests answered here instead of flooded
        self.contested = 0  # addresses two MACs spoke for within max_age
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def observe(self, arp: ArpPacket, now: float) -> None:
        """An ARP frame whose Ethernet source the learning table accepted: remember who spoke for its sender."""
        if arp.sender_mac != arp.eth_src or arp.sender_ip == _UNSPECIFIED:
            return  # a probe, or a frame speaking for another MAC (proxy ARP): nothing to learn
        entry = self._entries.get(arp.sender_ip)
        if entry is None:
            self._entries[arp.sender_ip] = _Entry(arp.sender_mac, now)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.evicted += 1
            return
        if entry.mac != arp.sender_mac:
            if now - entry.seen < self.max_age:
                if entry.contested_until <= now:
                    self.contested += 1
                entry.contested_until = now + self.max_age
            entry.mac = arp.sender_mac  # the latest claim; not answered for while contested
        entry.seen = now
        self._entries.move_to_end(arp.sender_ip)

    def answer(self, arp: ArpPacket, mac_is_live: bool, now: float) -> bytes | None:
        """The reply to give a local host's request in place of a flood, or None to flood it.

        `mac_is_live`: whether the learning table holds the MAC this table knows for the target, on another
        port than the request's (the caller looks it up: `known_mac`)."""
        if not self.suppressible(arp):
            return None
        entry = self._entries.get(arp.target_ip)
        if entry is None or not mac_is_live or now - entry.seen > self.max_age or entry.contested_until > now:
            return None
        self.answered += 1
        return arp_reply(entry.mac, arp.target_ip, arp.sender_mac, arp.sender_ip)

    def known_mac(self, arp: ArpPacket) -> str | None:
        """The MAC this table would answer a request with (None: none, or not a request it answers)."""
        if not self.suppressible(arp):
            return None
        entry = self._entries.get(arp.target_ip)
        return entry.mac if entry is not None else None

    @staticmethod
    def suppressible(arp: ArpPacket) -> bool:
        return arp.op is ArpOp.REQUEST and arp.sender_ip != _UNSPECIFIED and not arp.is_gratuitous

    def expire(self, now: float) -> None:
        while self._entries:
            ip, entry = next(iter(self._entries.items()))
            if now - entry.seen <= self.max_age:
                return
            del self._entries[ip]


def arp_reply(mac: str, address: ipaddress.IPv4Address, to_mac: str, to_address: ipaddress.IPv4Address) -> bytes:
    """The unicast reply telling `to_mac` (at `to_address`) that `address` is at `mac`."""
    sha, tha = parse_mac(mac), parse_mac(to_mac)
    frame = _ARP_REPLY.pack(tha, sha, ETH_TYPE_ARP, 1, 0x0800, 6, 4, ArpOp.REPLY, sha, address.packed, tha,
                            to_address.packed)  # fmt: skip
    return frame.ljust(ETH_MIN_FRAME_LEN, b"\x00")
