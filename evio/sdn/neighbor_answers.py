"""ARP and IPv6 neighbour solicitations answered by the local switch for addresses the overlay knows (issue 23).

Every first contact on the overlay starts with an ARP request or a neighbour solicitation, a broadcast or
multicast that Bounded Flood carries to every node: in a 32-node lab, `evio lab pingall`'s 992 first contacts
were 992 overlay-wide floods at once. The switch sees every such frame that reaches a controller (floods always
do, as does the first frame of a new unicast pair), so it keeps what they say, address to MAC, and answers a
local host itself when it knows the answer (as EVPN's ARP/ND suppression does): the request crosses no tunnel.

When it answers, and when it does not (the request is then flooded as before, so nothing breaks):

- only requests from a leaf port (a local host), never requests arriving from peers: the node that flooded
  them already chose to;
- only for an address learned from a frame whose link-layer address (ARP's sender, an NS's source or an NA's
  target link-layer option) is the frame's Ethernet source, and whose source the learning table accepted (so
  the rules on who may move a MAC apply to it too), heard within `max_age`;
- only for an address *confirmed* here: spoken for on a leaf port (a local host, the owner's own port), or
  by a reply (ARP reply, neighbour advertisement) from that MAC within `ASK_WINDOW` after this switch flooded
  a local host's request for it, while no other MAC contests the address (review21c). A member's announcement alone is never answered for (issue 21, N1: any
  member may announce any address; a first claim answered here would silence the owner, whom the request
  would no longer reach). The first request for an address floods, so the owner answers it as on any
  Ethernet, and a second MAC answering contests it (decision 0056);
- only while that MAC is itself live in the learning table, and not on the asking port (a LAN segment answers
  for itself);
- never for an address two MACs claimed within `max_age` (a move, a duplicate, or a member lying about
  another's address): it is *contested* until one MAC alone has spoken for it for `max_age`, and its requests
  are flooded, so every owner answers as on any Ethernet;
- never for probes (ARP from 0.0.0.0, duplicate address detection from ::) or announcements;
- but at once, with no request flooded first, for a member's own overlay address that its CA certificate names
  (`certified`, from the signed host claims: decision 0062), with the MAC the member names for it, while that
  MAC is live on another port; and never with another MAC, whatever frames said (IPv6: once its router flag
  is known from an advertisement of that MAC);
- IPv6 only for an address learned from a neighbour advertisement, whose router flag the answer repeats: a
  wrong router flag would make the asker drop its default router (RFC 4861 7.2.5).

The table is bounded: a port's frames hold at most a quarter of it (its own least recently heard out first),
and a full table evicts from the port holding most, so frames from invented senders cost a member only its
own entries, never another port's live ones. Left, as on any Ethernet: a member may answer a flooded request
for an address whose owner is absent (or race the owner's reply, which then contests it). Pure: no clock, no
I/O; times come in as arguments.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
from collections import OrderedDict
from dataclasses import dataclass

from evio.sdn.frb import format_mac, parse_mac
from evio.sdn.garp import ETH_MIN_FRAME_LEN, ETH_TYPE_ARP, ArpOp, parse_arp
from evio.tcpip import finish, ones_sum

MAX_ENTRIES = 8192
ASK_WINDOW = 3.0  # s after a local host's request was flooded in which a reply confirms its address (ARP retries 1/s)
MAX_ASKED = 1024  # addresses asked for and not yet answered, oldest out (only local hosts' requests add)
ETH_TYPE_IPV6 = 0x86DD
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_ARP = struct.Struct("!6s6sHHHBBH6s4s6s4s")
_IPV6 = struct.Struct("!IHBB16s16s")  # version/class/flow, payload length, next header, hop limit, src, dst
_ICMPV6 = 58
_EXTENSIONS = (0, 43, 60)  # hop-by-hop, routing, destination options: ND may follow them (RFC 4861 asks no less)
_FRAGMENT = 44
_NS, _NA = 135, 136
_NA_ROUTER, _NA_SOLICITED, _NA_OVERRIDE = 0x80000000, 0x40000000, 0x20000000
_OPT_SOURCE_LL, _OPT_TARGET_LL = 1, 2
_UNSPECIFIED4, _UNSPECIFIED6 = ipaddress.IPv4Address(0), ipaddress.IPv6Address(0)


class Kind(enum.Enum):
    REQUEST = "request"  # ARP request, neighbour solicitation: may be answered
    SPEAKS = "speaks"  # ARP reply or announcement, neighbour advertisement: only learned from


@dataclass(frozen=True, slots=True)
class NeighborMessage:
    """What an ARP or NDP frame says, in one shape for both families."""

    kind: Kind
    eth_src: str
    sender_mac: str | None  # the link-layer address it gives for `sender_ip` (None: none given)
    sender_ip: IPAddress | None  # the address it speaks for (None or unspecified: a probe)
    target_ip: IPAddress | None  # a request's question
    router: bool | None = None  # a neighbour advertisement's router flag (None: ARP, or a solicitation)
    announcement: bool = False  # gratuitous ARP, unsolicited advertisement: meant for everyone, never answered


def parse(frame: bytes, icmpv6: tuple[int, int, bool] | None = None) -> NeighborMessage | None:
    """The ARP or NDP message in an untagged frame, or None (no exception for bad input). ARP of hardware type 1
    or 6 (Linux takes both on Ethernet: review21k K3); neighbour discovery past extension headers (K6), never in
    a fragment. `icmpv6`: what `icmpv6_at(frame)` said, if the caller asked already (the guards do)."""
    if len(frame) < 14:
        return None
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_TYPE_ARP:
        arp = parse_arp(frame)
        if arp is None:
            return None
        kind = Kind.REQUEST if arp.op is ArpOp.REQUEST else Kind.SPEAKS
        return NeighborMessage(kind, arp.eth_src, arp.sender_mac, arp.sender_ip, arp.target_ip,
                               announcement=arp.is_gratuitous)  # fmt: skip
    if ethertype == ETH_TYPE_IPV6:
        return _parse_nd(frame, icmpv6 or icmpv6_at(frame))
    return None


def icmpv6_at(frame: bytes) -> tuple[int, int, bool] | None:
    """(ICMPv6 type, offset of the ICMPv6 header, whether in a fragment) of an untagged IPv6 frame, past any
    hop-by-hop, routing and destination-options headers and a first fragment's header, as Linux and OVS read
    them (review21k K6); None: no ICMPv6 header to read (another protocol, a later fragment, truncated)."""
    if len(frame) < 54 or frame[12:14] != b"\x86\xdd":
        return None
    proto, at, fragment = frame[20], 54, False
    while len(frame) >= at + 8:
        if proto in _EXTENSIONS:
            proto, at = frame[at], at + 8 + frame[at + 1] * 8
        elif proto == _FRAGMENT and not int.from_bytes(frame[at + 2:at + 4], "big") & 0xFFF8:
            proto, at, fragment = frame[at], at + 8, True  # a first fragment: its headers are all in it (RFC 7112)
        else:
            break
    if proto != _ICMPV6 or len(frame) <= at:
        return None
    return frame[at], at, fragment


def _parse_nd(frame: bytes, found: tuple[int, int, bool] | None) -> NeighborMessage | None:
    if found is None or found[0] not in (_NS, _NA) or found[2]:
        return None  # RFC 6980: no neighbour discovery in fragments (Linux's suppress_frag_ndisc)
    _, length, _, hop_limit, src, _ = _IPV6.unpack_from(frame, 14)
    at, end = found[1], 14 + _IPV6.size + length
    icmp = frame[at:end]
    # RFC 4861 7.1.1/7.1.2: hop limit 255 (from the link itself), code 0; extension headers may come first (K6).
    if hop_limit != 255 or len(icmp) < 24 or end > len(frame) or icmp[1] != 0:
        return None
    kind, flags, target = icmp[0], int.from_bytes(icmp[4:8], "big"), ipaddress.IPv6Address(icmp[8:24])
    if kind not in (_NS, _NA) or target.is_multicast:
        return None
    option = link_layer_option(icmp[24:], _OPT_SOURCE_LL if kind == _NS else _OPT_TARGET_LL)
    eth_src = format_mac(frame[6:12])
    if kind == _NS:
        source = ipaddress.IPv6Address(src)
        return NeighborMessage(Kind.REQUEST, eth_src, option, source, target)
    # Unsolicited (no S flag): an announcement, never the answer to a solicitation.
    return NeighborMessage(Kind.SPEAKS, eth_src, option, target, None, router=bool(flags & _NA_ROUTER),
                           announcement=not flags & _NA_SOLICITED)  # fmt: skip


def link_layer_option(options: bytes, wanted: int) -> str | None:
    """The Ethernet address in option `wanted` (RFC 4861 4.6.1), or None; malformed options end the walk."""
    while len(options) >= 8:
        kind, units = options[0], options[1]
        if units == 0 or units * 8 > len(options):
            return None
        if kind == wanted and units == 1:
            return format_mac(options[2:8])
        options = options[units * 8 :]
    return None


@dataclass
class _Entry:
    mac: str
    seen: float
    port: int  # where the frame that taught it came in
    router: bool | None = None  # IPv6: from the last advertisement
    contested_until: float = 0.0  # another MAC spoke for the address: no answers before this
    confirmed: bool = False  # spoken for locally, or by `mac` answering a request this switch flooded


class NeighborAnswers:
    def __init__(self, max_age: float = 300.0, max_entries: int = MAX_ENTRIES) -> None:
        self.max_age = max_age
        self.max_entries = max_entries
        self.max_per_port = max(1, max_entries // 4)
        self._entries: OrderedDict[IPAddress, _Entry] = OrderedDict()  # least recently heard first
        self._by_port: dict[int, OrderedDict[IPAddress, None]] = {}  # the same, per port that taught them
        self._asked: OrderedDict[IPAddress, float] = OrderedDict()  # a local host's request flooded then
        # Members' own addresses their CA certificates name -> the MAC the member names (decision 0062), set whole
        # by the daemon from the host claims (`SetCertifiedAddresses`).
        self.certified: dict[IPAddress, str] = {}
        self.answered_certified = 0  # of `answered`: for a certified address, no request flooded first
        self.answered = 0  # requests answered here instead of flooded
        self.contested = 0  # addresses two MACs spoke for within max_age
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def observe(self, msg: NeighborMessage, port: int, now: float, local: bool = False) -> None:
        """A frame from `port` (`local`: a leaf port) whose Ethernet source the learning table placed there:
        remember who spoke for its address."""
        ip = msg.sender_ip
        if msg.sender_mac != msg.eth_src or ip is None or ip.is_unspecified or ip.is_multicast:
            return  # a probe, a frame without a link-layer address, or one speaking for another MAC
        # A reply to a request of a local host's that we flooded: the answer of whoever owns the address.
        asked = self._asked.get(ip)
        answers = msg.kind is Kind.SPEAKS and not msg.announcement and asked is not None and now - asked <= ASK_WINDOW
        entry = self._entries.get(ip)
        if entry is None:
            share = self._by_port.get(port)
            if share is not None and len(share) >= self.max_per_port:
                self._remove(next(iter(share)))  # the port's own least recently heard
            elif len(self._entries) >= self.max_entries:
                largest = max(self._by_port.values(), key=len)
                self._remove(next(iter(largest)))
            entry = self._entries[ip] = _Entry(msg.sender_mac, now, port)
        elif entry.mac != msg.sender_mac:
            if now - entry.seen < self.max_age:
                if entry.contested_until <= now:
                    self.contested += 1
                entry.contested_until = now + self.max_age
            # The latest claim; not answered while contested, nor before it is confirmed.
            entry.mac, entry.router, entry.confirmed = msg.sender_mac, None, False
        # An answer confirms only an uncontested address: while two MACs speak for it, whichever answered last
        # in the window would be confirmed, and answered for once the contest ends (review21c: the attacker
        # answers after the owner, then keeps speaking while the owner is quiet). The first request after the
        # contest floods again, and a lone answer to it confirms.
        entry.confirmed = entry.confirmed or local or (answers and entry.contested_until <= now)
        entry.seen = now
        if msg.router is not None:
            entry.router = msg.router
        self._entries.move_to_end(ip)
        if entry.port != port:
            self._by_port[entry.port].pop(ip, None)
            if not self._by_port[entry.port]:
                del self._by_port[entry.port]
            entry.port = port
        self._by_port.setdefault(port, OrderedDict())[ip] = None
        self._by_port[port].move_to_end(ip)

    def _remove(self, ip: IPAddress) -> None:
        entry = self._entries.pop(ip)
        share = self._by_port[entry.port]
        del share[ip]
        if not share:
            del self._by_port[entry.port]
        self.evicted += 1

    def known_mac(self, msg: NeighborMessage) -> str | None:
        """The MAC a request would be answered with (None: none, or not a request answered here)."""
        if not _answerable(msg) or msg.target_ip is None:
            return None
        certified = self.certified.get(msg.target_ip)
        if certified is not None:
            return certified
        entry = self._entries.get(msg.target_ip)
        return entry.mac if entry is not None else None

    def answer(self, msg: NeighborMessage, mac_is_live: bool, now: float) -> bytes | None:
        """The reply to give a local host's request in place of a flood, or None to flood it.

        `mac_is_live`: whether the learning table holds `known_mac(msg)` on another port than the request's."""
        if not _answerable(msg) or msg.target_ip is None or msg.sender_ip is None or msg.sender_mac is None:
            return None
        entry = self._entries.get(msg.target_ip)
        certified = self.certified.get(msg.target_ip)
        if certified is not None:
            # The CA's binding: no flood first, no contest or confirmation needed, and never another MAC.
            router = entry.router if entry is not None and entry.mac == certified else None
            reply = _reply(certified, msg.target_ip, msg.sender_mac, msg.sender_ip, router) if mac_is_live else None
            if reply is None:
                self._ask(msg.target_ip, now)
                return None
            self.answered += 1
            self.answered_certified += 1
            return reply
        if (entry is None or not entry.confirmed or not mac_is_live or now - entry.seen > self.max_age
                or entry.contested_until > now):
            self._ask(msg.target_ip, now)
            return None
        reply = _reply(entry.mac, msg.target_ip, msg.sender_mac, msg.sender_ip, entry.router)
        if reply is None:
            if isinstance(msg.target_ip, ipaddress.IPv6Address):
                self._ask(msg.target_ip, now)
            return None
        self.answered += 1
        return reply

    def asks(self, msg: NeighborMessage) -> bool:
        """Whether `msg` is a request this table would answer or, unanswered, flood and wait for the reply to."""
        return _answerable(msg) and msg.target_ip is not None and msg.sender_ip is not None

    def _ask(self, ip: IPAddress, now: float) -> None:
        """A local host's request for `ip` is flooded: a reply within `ASK_WINDOW` confirms who answered."""
        self._asked.pop(ip, None)
        self._asked[ip] = now
        while len(self._asked) > MAX_ASKED:
            self._asked.popitem(last=False)

    def expire(self, now: float) -> None:
        while self._asked:
            ip, asked = next(iter(self._asked.items()))
            if now - asked <= ASK_WINDOW:
                break
            del self._asked[ip]
        while self._entries:
            ip, entry = next(iter(self._entries.items()))
            if now - entry.seen <= self.max_age:
                return
            self._remove(ip)
            self.evicted -= 1  # aged out, not pushed out


def _reply(mac: str, target: IPAddress, to_mac: str, to_address: IPAddress, router: bool | None) -> bytes | None:
    """The answer telling `to_mac` (at `to_address`) that `target` is at `mac`; None for IPv6 while the router flag
    is unknown (never heard advertise itself), or for a question mixing families."""
    if isinstance(target, ipaddress.IPv4Address) and isinstance(to_address, ipaddress.IPv4Address):
        return arp_reply(mac, target, to_mac, to_address)
    if isinstance(target, ipaddress.IPv6Address) and isinstance(to_address, ipaddress.IPv6Address):
        return None if router is None else neighbor_advertisement(mac, target, router, to_mac, to_address)
    return None


def _answerable(msg: NeighborMessage) -> bool:
    ip = msg.sender_ip
    return msg.kind is Kind.REQUEST and not msg.announcement and ip is not None and not ip.is_unspecified


def arp_reply(mac: str, address: ipaddress.IPv4Address, to_mac: str, to_address: ipaddress.IPv4Address) -> bytes:
    """The unicast reply telling `to_mac` (at `to_address`) that `address` is at `mac`."""
    sha, tha = parse_mac(mac), parse_mac(to_mac)
    frame = _ARP.pack(tha, sha, ETH_TYPE_ARP, 1, 0x0800, 6, 4, ArpOp.REPLY, sha, address.packed, tha,
                      to_address.packed)  # fmt: skip
    return frame.ljust(ETH_MIN_FRAME_LEN, b"\x00")


def neighbor_advertisement(mac: str, address: ipaddress.IPv6Address, router: bool, to_mac: str,
                           to_address: ipaddress.IPv6Address) -> bytes:  # fmt: skip
    """The solicited advertisement telling `to_mac` (at `to_address`) that `address` is at `mac`."""
    flags = _NA_SOLICITED | _NA_OVERRIDE | (_NA_ROUTER if router else 0)
    body = bytearray(struct.pack("!BBHI16sBB6s", _NA, 0, 0, flags, address.packed, _OPT_TARGET_LL, 1, parse_mac(mac)))
    pseudo = address.packed + to_address.packed + len(body).to_bytes(4, "big") + bytes(3) + bytes([_ICMPV6])
    body[2:4] = finish(ones_sum(pseudo) + ones_sum(body)).to_bytes(2, "big")
    ip = _IPV6.pack(6 << 28, len(body), _ICMPV6, 255, address.packed, to_address.packed)
    return parse_mac(to_mac) + parse_mac(mac) + ETH_TYPE_IPV6.to_bytes(2, "big") + ip + bytes(body)
