"""A named router's link-local addresses bound to the MACs it holds (decision 0068, amended for review21k K7).

Once `ipv6_routers` names router R, every node's kernel takes `default via <the source of R's RA>`, a link-local
address no CA certifies, and resolves it by neighbour discovery. Without this binding any member took it with one
flooded override advertisement ("R's address is at my MAC"), and a relay of R's floods could pass an RA with R's
MAC and root but its own MAC in the source link-layer option: the RA guard's threat, one member as every node's
IPv6 router, back. So:

1. An RA that passed the guard (`neighbor_guard.router_allowed`) binds its IPv6 source address to its router, for
   as long as a kernel may route by it (its router lifetime, at least `MIN_HOLD`, at most RFC 4861's greatest
   router lifetime `MAX_HOLD`), each RA again. It is dropped instead (`Drop.ROUTER_ADDRESS_SPOOFED`) if its source
   link-layer option names a MAC the router does not hold, if the address is bound to another router (or, without
   trust, to another MAC), or if the router has `MAX_PER_ROUTER` other addresses bound already: an RA a node takes
   always has its next hop bound. Nor does a binding start (review21l L2: a relay of the router's floods bound
   another member's address to it, and that member lost neighbour discovery there) for a source that is not
   link-local (no kernel takes such an RA, RFC 4861 6.1.2), nor for an address the CA certified for, or this
   switch heard a MAC the router does not hold speak for within `HEARD_FOR` (`hear`: every link-local solicitation
   and advertisement from a tunnel port the guards let by, whichever way it came; trust mode, where the MAC's
   member is known).
2. A router solicitation, RA or neighbour solicitation from a bound address, or an advertisement for one, from a
   tunnel port, whose Ethernet source or link-layer option is not a MAC the router holds, is dropped and counted
   the same way: the kernel would take that MAC as the router's.
3. Table 0 sends every solicitation and advertisement naming a bound address (`ipv6_src` of an RS or NS,
   `ipv6_nd_target` of an NA) to the controller (`flows`), so none rides a unicast flow (0066) past check 2; the
   router's own are a packet-in each (neighbour unreachability detection: one exchange per node and half minute
   of traffic at most).

4. Some addresses are known to be a member's before any frame (`owner`, review21p: a member speaking for the
   router's address from its own MAC, once each `HEARD_FOR`, kept the router's RAs from binding it anywhere; a relay
   filling the router's `MAX_PER_ROUTER` bindings with forged addresses in its name did the same): one the config
   names for a router (`ipv6_router_addresses`, `named`), and, in trust mode, one made from a MAC (modified EUI-64,
   RFC 4291 appendix A: what a kernel makes by default), the member's holding that MAC (`made_by`). A router's RA
   from another member's never binds (L2, for an owner quiet for `HEARD_FOR` too), and a solicitation or
   advertisement speaking for a named router's is judged by check 2 before any RA bound it. A router's *own* (`own`,
   review21r: the config's, and those made from its interface MACs, `interfaces`; not its hosts', of which a site
   gateway holds up to 1,024) binds over what other MACs said of it and past `MAX_PER_ROUTER`, within its own
   `MAX_OWN_PER_ROUTER`. New host claims drop a binding made from a MAC another member now holds (`rehome`: a
   moved host's solicitations were judged by it). An address made otherwise (RFC 7217's stable privacy, a
   configured fe80::1 the config does not name) is judged by check 1 only.
5. A duplicate address detection probe (an NS from ::) for a bound or own address passes only as its router's own
   flood; at the router's node none from a tunnel does (`fails_dad`, review21r: the router's kernel failed its
   link-local address and sent no RA). Table 0 brings every probe (`neighbor_guard.DAD_PROBE_FLOW`, one flow for all
   targets since review21s 1), and at the router's node each advertisement of its own (`flows`).

What a router holds: in trust mode the MACs its signed announcement holds (`mac_owners`, 0055); without trust only
the MAC its first bound RA came from (a relay that forged the first RA in the router's name keeps the address for
the hold; without trust the root of an FRB is all the guard judges anyway). Pure: frames, `now` and maps in.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from evio.sdn.flow_actions import AddGuardFlow
from evio.sdn.frb import format_mac
from evio.sdn.neighbor_answers import icmpv6_at, link_layer_option

MAX_PER_ROUTER = 4  # link-local addresses bound per router: one in practice, two while it changes
# A router's own (check 4's `own`) bound apart from MAX_PER_ROUTER, so forged ones crowd none out, and capped too: the
# config names at most 4 (semantic_checks.MAX_ROUTER_ADDRESSES), and its interface's EUI-64 one and a second while
# its certified MAC changes make 6 (review21r: own ones were uncapped, and "own" held every MAC the router hosts).
MAX_OWN_PER_ROUTER = 6
MIN_HOLD = 600.0  # s a binding lasts at least (an RA of lifetime 0 ends routes, not neighbour entries at once)
MAX_HOLD = 9000.0  # s at most: RFC 4861 6.2.1's greatest router lifetime (an RA may write 65535)
HEARD_FOR = 300.0  # s a member's MAC heard speaking for a link-local address keeps it from being bound to a router
MAX_HEARD_PER_MEMBER = 64  # link-local addresses kept per member (its interface's and its hosts'), its oldest out
_ICMPV6 = 58
_RS, _RA, _NS, _NA = 133, 134, 135, 136
_FIXED = {_RS: 8, _RA: 16, _NS: 24, _NA: 24}  # bytes before the options
CLAIM_TYPES = frozenset(_FIXED)
_SOURCE_LL, _TARGET_LL = 1, 2
_TAGS = (b"\x81\x00", b"\x88\xa8")  # 802.1Q, 802.1ad
INTERFACE_ID_MASK = ipaddress.IPv6Address("::ffff:ffff:ffff:ffff")  # an address's interface identifier: low 64 bits


@dataclass(frozen=True, slots=True)
class Claim:
    """What an RS, RA, NS or NA says of an address's link-layer address."""

    kind: int  # the ICMPv6 type
    address: ipaddress.IPv6Address  # the source of an RS, RA or NS; the target of an NA
    eth_src: str
    lladdr: str | None  # the source (target, NA) link-layer option's MAC; None: none
    lifetime: int = 0  # an RA's router lifetime (s)
    target: ipaddress.IPv6Address | None = None  # an NS's target (a probe's, from ::, is what it speaks for)


@dataclass(frozen=True, slots=True)
class _Binding:
    router: int
    mac: str  # the first bound RA's Ethernet source (what a router holds without trust)
    until: float


def claim(frame: bytes) -> Claim | None:
    """The claim of an IPv6 frame carrying an RS, RA, NS or NA of code 0 (past one VLAN tag, as a host's VLAN device
    takes it, and extension headers), or None. The hop limit is not read: a frame the kernel ignores may be judged
    all the same."""
    if frame[12:14] in _TAGS:
        frame = frame[:12] + frame[16:]
    found = icmpv6_at(frame)
    if found is None or found[2] or found[0] not in _FIXED:
        return None  # (neighbour discovery in a fragment: the guard refuses it, UNREADABLE_FRAME)
    kind, at = found[0], found[1]
    if len(frame) < at + _FIXED[kind] or frame[at + 1] != 0:
        return None  # code 0 only: the kernel drops others (RFC 4861 6.1, 7.1), and OVS reads no target of them
    address = ipaddress.IPv6Address(frame[at + 8 : at + 24] if kind == _NA else frame[22:38])
    lladdr = link_layer_option(frame[at + _FIXED[kind] :], _TARGET_LL if kind == _NA else _SOURCE_LL)
    lifetime = int.from_bytes(frame[at + 6 : at + 8], "big") if kind == _RA else 0
    target = ipaddress.IPv6Address(frame[at + 8 : at + 24]) if kind == _NS else None
    return Claim(kind, address, format_mac(frame[6:12]), lladdr, lifetime, target)


class RouterAddresses:
    """The named routers' bound link-local addresses of one switch."""

    def __init__(self) -> None:
        self.bound: dict[ipaddress.IPv6Address, _Binding] = {}  # (read it; an attribute: the guard asks per frame)
        self.changed = False  # the set of bound addresses changed since `flows` last ran
        self.named: Mapping[ipaddress.IPv6Address, int] = {}  # routers' addresses the config names (check 4)
        # The named routers' own interface MACs -> router (check 4's `own`; the switch tells them): those the CA
        # certified an address for (0062) and the router holds, and, at a named router's node, its bridge's own.
        # Not every MAC a router's announcement holds: its hosts are not its interfaces (review21r).
        self.interfaces: Mapping[str, int] = {}
        # Link-local addresses members' MACs spoke for lately (check 1, review21l L2): address -> MAC -> (when, the
        # member holding the MAC then), and each member's (address, MAC) pairs, least recently heard first, at most
        # MAX_HEARD_PER_MEMBER: a member inventing addresses pushes out only its own. A pair is in one share only,
        # its last speaker's: a MAC changes holder (host claims' ALONE_HOLD), and a pair in two shares was
        # forgotten by the first and then not found by the second (review21n N1: every tick raised KeyError).
        self._heard: dict[ipaddress.IPv6Address, dict[str, tuple[float, int]]] = {}
        self._heard_by: dict[int, OrderedDict[tuple[ipaddress.IPv6Address, str], None]] = {}

    def hear(self, said: Claim, member: int, now: float) -> None:
        """A solicitation or advertisement from a MAC `member` holds, which the guards let by: it speaks for its
        address (an RS's, NS's source, an NA's target), if link-local and given with no other link-layer address."""
        if said.kind == _RA or not said.address.is_link_local or said.lladdr not in (None, said.eth_src):
            return
        pair = (said.address, said.eth_src)
        macs = self._heard.setdefault(said.address, {})
        before = macs.get(said.eth_src)
        if before is not None and before[1] != member and (other := self._heard_by.get(before[1])) is not None:
            other.pop(pair, None)  # the MAC's holder changed: the pair moves to the new one's share
            if not other:
                del self._heard_by[before[1]]
        share = self._heard_by.setdefault(member, OrderedDict())
        share.pop(pair, None)
        share[pair] = None
        macs[said.eth_src] = (now, member)
        if len(share) > MAX_HEARD_PER_MEMBER:
            self._forget_heard(*share.popitem(last=False)[0])

    def admit_advert(
        self, router: int, ra: Claim, mac_owners: Mapping[str, int], now: float, certified: str | None = None,
    ) -> bool:
        """Check 1: whether an RA `router` may send (the guard let it by) is taken; binds its source if so.
        `certified`: the MAC the CA certified the source address for, if any. A signed statement (decision 0081)
        does not override what other MACs said of the address: a member using a stable-privacy address of its own
        and a squatter of the router's look alike here (review21t 1); name such a router address instead."""
        if not ra.address.is_link_local:
            return False  # no kernel takes it (RFC 4861 6.1.2), and a global address is some member's (L2)
        maker = self.owner(ra.address, mac_owners)
        if maker is not None and maker != router:
            return False  # another member's by its MAC or the config, heard lately or not (L2, review21p)
        held = self.bound.get(ra.address)
        if held is not None and held.until < now:
            held = None  # expired: `expire` had not run yet
        mac = held.mac if held is not None and held.router == router else ra.eth_src
        if held is not None and held.router != router:
            return False  # another named router's address
        if not _holds(router, mac, ra.eth_src, mac_owners) or (
                ra.lladdr is not None and not _holds(router, mac, ra.lladdr, mac_owners)):
            return False
        # Made from one of the router's interface MACs, or named for it, the address is the router's own: another MAC
        # that spoke for it squats it, and a relay's forged addresses in the router's name cannot crowd it out
        # (review21p). Own ones have their own allowance, and only the router's own interfaces' count (review21r: a
        # relay bound one address per MAC a site gateway hosts, up to 1,024, each three flows, past the cap).
        own = self.own(ra.address) == router
        speakers = [*(() if own else self._heard.get(ra.address, {})),
                    *([certified] if certified is not None else [])]
        if held is None and any(not _holds(router, mac, other, mac_owners) for other in speakers):
            return False  # another member's address: bound, it would lose neighbour discovery here (review21l L2)
        if held is None and sum(b.router == router and (self.own(a) == router) == own
                                for a, b in self.bound.items()) >= (MAX_OWN_PER_ROUTER if own else MAX_PER_ROUTER):
            return False
        until = now + min(max(float(ra.lifetime), MIN_HOLD), MAX_HOLD)
        self.bound[ra.address] = _Binding(router, mac, max(until, held.until if held is not None else 0.0))
        self.changed |= held is None
        return True

    def spoofs(
        self, said: Claim, mac_owners: Mapping[str, int], now: float, routers: frozenset[int] = frozenset(),
    ) -> bool:
        """Check 2: whether a solicitation or advertisement speaks for a bound address, or one known to be one of the
        named `routers`' (check 4, trust mode), with a MAC its router does not hold (an RA: `admit_advert`)."""
        held = self.bound.get(said.address)
        if held is not None and held.until >= now:
            router, first = held.router, held.mac
        elif mac_owners and (maker := self.owner(said.address, mac_owners)) in routers:
            router, first = maker, ""  # (trust mode: `_holds` asks `mac_owners`, not a first MAC)
        else:
            return False
        return not _holds(router, first, said.eth_src, mac_owners) or (
            said.lladdr is not None and not _holds(router, first, said.lladdr, mac_owners))

    def fails_dad(self, said: Claim, root: int | None, mac_owners: Mapping[str, int], now: float, here: int) -> bool:
        """Check 5 (review21r): whether a duplicate address detection probe (an NS from ::) for a bound address or a
        named router's own (`own`) would fail it at the router, as `neighbor_guard.fails_owners_dad` judges one for a
        certified address: it passes only as the router's own flood (rooted at it, from a MAC it holds); at the
        router's node (`here`) none from a tunnel passes: its own floods never come back to it. (An advertisement,
        which fails DAD too, is check 2's: only the router's MACs speak for its address.)"""
        if said.kind != _NS or not said.address.is_unspecified or said.target is None:
            return False
        address = said.target
        held = self.bound.get(address)
        if held is not None and held.until >= now:
            router, first = held.router, held.mac
        elif (named := self.own(address)) is not None:
            router, first = named, ""  # (named without trust: the root alone is judged, as the RA guard judges it)
        else:
            return False
        if router == here:
            return True
        return root != router or (bool(mac_owners or first) and not _holds(router, first, said.eth_src, mac_owners))

    def own(self, address: ipaddress.IPv6Address) -> int | None:
        """The named router `address` is its own of (check 4): the config names it, or it was made from one of the
        router's interface MACs (`interfaces`); None: neither."""
        named = self.named.get(address)
        if named is not None:
            return named
        mac = made_from(address) if self.interfaces else None
        return None if mac is None else self.interfaces.get(mac)

    def own_addresses(self) -> list[tuple[ipaddress.IPv6Address, int]]:
        """Every named router's own addresses (a config's named ones, and its interfaces' EUI-64 ones), sorted."""
        found = dict(self.named)
        found.update((link_local_of(mac), router) for mac, router in self.interfaces.items())
        return sorted(found.items())

    def rehome(self, mac_owners: Mapping[str, int]) -> None:
        """New signed host claims: a binding whose address was made from a MAC another member now holds goes (review21r:
        a relay's forged binding of a host's address in the router's name outlived the host's move, and check 2
        then dropped the host's own solicitations at its new site for up to `MAX_HOLD`)."""
        for address in [a for a, b in self.bound.items() if self.owner(a, mac_owners) not in (None, b.router)]:
            del self.bound[address]
            self.changed = True

    def owner(self, address: ipaddress.IPv6Address, mac_owners: Mapping[str, int]) -> int | None:
        """The member `address` is known to be of before any frame (check 4): the router the config names it for, or
        the holder of the MAC it was made from; None: no frame-free fact says."""
        named = self.named.get(address)
        return named if named is not None else made_by(address, mac_owners)

    def expire(self, now: float) -> None:
        for address in [a for a, b in self.bound.items() if b.until < now]:
            del self.bound[address]
            self.changed = True
        for member, share in list(self._heard_by.items()):
            while share:
                address, mac = next(iter(share))
                if now - self._heard[address][mac][0] <= HEARD_FOR:
                    break
                del share[(address, mac)]
                self._forget_heard(address, mac)
            if not share:
                del self._heard_by[member]

    def _forget_heard(self, address: ipaddress.IPv6Address, mac: str) -> None:
        macs = self._heard[address]
        del macs[mac]
        if not macs:
            del self._heard[address]

    def flows(self, here: int | None = None) -> frozenset[AddGuardFlow]:
        """Check 3's table-0 flows: every RS, NS and NA naming a bound address to the controller; and check 5's: at a
        router's node (`here`) every advertisement of its own (not bound there: a neighbour's unicast one rode a flow
        ahead to its interface past check 2, and failed DAD). Probes for bound and own addresses, whose source is ::,
        come by `neighbor_guard.DAD_PROBE_FLOW`, one for every target (review21s 1; it was one flow per address
        here). Bound: 3 per bound address (`MAX_PER_ROUTER` + `MAX_OWN_PER_ROUTER` per router), 1 per own address
        at its router's node (the config's named, at most 4, and its interface MACs')."""
        self.changed = False
        icmpv6 = (("eth_type", 0x86DD), ("ip_proto", _ICMPV6))
        flows = set()
        for address in sorted(self.bound):
            flows |= {AddGuardFlow((*icmpv6, ("icmpv6_type", kind), ("ipv6_src", str(address))), to_switching=False)
                      for kind in (_RS, _NS)}
            flows.add(AddGuardFlow((*icmpv6, ("icmpv6_type", _NA), ("ipv6_nd_target", str(address))),
                                   to_switching=False))
        own = self.own_addresses()
        flows |= {AddGuardFlow((*icmpv6, ("icmpv6_type", _NA), ("ipv6_nd_target", str(address))), to_switching=False)
                  for address, router in own if router == here}
        return frozenset(flows)


def made_from(address: ipaddress.IPv6Address) -> str | None:
    """The MAC a link-local address's interface identifier is the modified EUI-64 of (fe80::/64, ff:fe in its middle
    and the universal/local bit flipped: RFC 4291 appendix A, Linux's `addr_gen_mode` 0), or None."""
    return interface_mac(address) if address.packed[:8] == b"\xfe\x80" + bytes(6) else None


def interface_mac(address: ipaddress.IPv6Address) -> str | None:
    """The MAC an address's interface identifier is the modified EUI-64 of, whatever its prefix (a link-local one,
    or one SLAAC made from an advertised prefix: RFC 4862 5.5.3), or None (review21s 1)."""
    packed = address.packed
    if packed[11:13] != b"\xff\xfe":
        return None
    return format_mac(bytes([packed[8] ^ 0x02]) + packed[9:11] + packed[13:16])


def interface_id_of(mac: str) -> ipaddress.IPv6Address:
    """The modified EUI-64 interface identifier a kernel makes from `mac`, as an address (::iid; `interface_mac`'s
    inverse): with `INTERFACE_ID_MASK`, a flow matching every address made from the MAC, whatever its prefix."""
    return ipaddress.IPv6Address(int(link_local_of(mac)) & int(INTERFACE_ID_MASK))


def link_local_of(mac: str) -> ipaddress.IPv6Address:
    """The link-local address a kernel makes from `mac` (modified EUI-64: `made_from`'s inverse)."""
    octets = bytes.fromhex(mac.replace(":", ""))
    return ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + bytes([octets[0] ^ 0x02]) + octets[1:3] + b"\xff\xfe"
                                 + octets[3:6])


def made_by(address: ipaddress.IPv6Address, mac_owners: Mapping[str, int]) -> int | None:
    """The member holding the MAC `address` was made from (trust mode; without it no MAC's member is known)."""
    mac = made_from(address) if mac_owners else None
    return None if mac is None else mac_owners.get(mac)


def _holds(router: int, first_mac: str, mac: str, mac_owners: Mapping[str, int]) -> bool:
    """Whether `router` holds `mac`: its signed announcement does (trust), or it is its first bound RA's (no trust)."""
    if mac_owners:
        return mac_owners.get(mac.lower()) == router
    return mac.lower() == first_mac.lower()
