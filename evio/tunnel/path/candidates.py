"""Which of a peer's ICE candidates this node tries (issue 21, M3).

A member's offer or answer lists up to 32 direct and 32 relay candidates, and
each is an address the node sends ICE checks to (direct) or has its TURN
server send them to (relay): unchecked, a member could aim the node, or the
TURN server, at anything (127.0.0.1, 169.254.169.254, a multicast group, the
LAN's broadcast). ``candidate_drop`` says why one is not tried:

1. unspecified (0.0.0.0/8, ::), loopback, link-local, multicast, broadcast
   (255.255.255.255 and the directed broadcast of this node's own subnets):
   never a peer;
2. the overlay's subnet: a tunnel over the overlay would loop;
3. this node's own addresses (direct candidates only: a relay candidate is the
   TURN server's address, which may be this host's when the node runs next to
   its coturn);
4. the overlay's deny list (``nat_traversal.deny_candidates``: link-local and
   the cloud metadata addresses by default, the operator's private ranges).

The same filter applies to a peer-reflexive candidate (RFC 8445 section
7.3.1.3: the source of an authenticated check that is no signalled
candidate), before aioice answers the check or learns the address
(inbound_gate.py), and a connection learns a few of those at most, none once
its path is selected (``PRFLX_LIMIT``, ``PRFLX_AFTER_UP``).

An IPv4-mapped IPv6 address is judged as the IPv4 address it maps. Pure but
for ``local_networks``, which reads the interfaces. ``CandidateDrops`` counts
what was dropped, by reason, and logs it once per peer per interval.
"""

from __future__ import annotations

import collections
import enum
import ipaddress
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import ifaddr

from evio.ratelimit import LogLimiter

logger = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # RFC 1122 3.2.1.3: "this host on this network", never a destination
_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class CandidateDrop(enum.Enum):
    """Why a remote candidate is not tried."""

    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    LINK_LOCAL = "link-local"
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    OVERLAY = "overlay"
    """In the overlay's own subnet."""
    OWN_ADDRESS = "own-address"
    """One of this node's addresses (direct candidates)."""
    DENIED = "denied"
    """In ``nat_traversal.deny_candidates``."""
    PRFLX_LIMIT = "prflx-limit"
    """A peer-reflexive source beyond the few one connection learns (inbound_gate.PRFLX_PER_CONNECTION)."""
    PRFLX_AFTER_UP = "prflx-after-up"
    """A peer-reflexive source on a connection whose path is already selected (the tunnel is up on it)."""


@dataclass(frozen=True)
class LocalNetworks:
    """This node's addresses and the directed broadcast addresses of its IPv4 subnets."""

    addresses: frozenset[Address] = frozenset()
    broadcasts: frozenset[ipaddress.IPv4Address] = frozenset()

    @classmethod
    def of(cls, interfaces: Iterable[Interface]) -> LocalNetworks:
        addresses: set[Address] = set()
        broadcasts: set[ipaddress.IPv4Address] = set()
        for interface in interfaces:
            addresses.add(interface.ip)
            network = interface.network
            if isinstance(network, ipaddress.IPv4Network) and network.prefixlen < 31:  # /31, /32 have none
                broadcasts.add(network.broadcast_address)
        return cls(frozenset(addresses), frozenset(broadcasts))


def local_networks() -> LocalNetworks:
    """This host's interface addresses now (read per tunnel setup: they change)."""
    interfaces: list[Interface] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            try:
                interfaces.append(ipaddress.ip_interface(f"{text.partition('%')[0]}/{ip.network_prefix}"))
            except ValueError:
                continue
    return LocalNetworks.of(interfaces)


@dataclass(frozen=True)
class CandidatePolicy:
    deny: tuple[Network, ...] = ()
    overlay: tuple[Network, ...] = ()
    allow_local: bool = False
    """Loopback and this node's own addresses allowed: peers on one host (an agent that gathered only
    loopback addresses: unit tests)."""


def candidate_drop(host: str, relayed: bool, policy: CandidatePolicy, local: LocalNetworks) -> CandidateDrop | None:
    """None when a candidate at ``host`` may be tried, otherwise why not (``relayed``: a relay candidate)."""
    try:
        address: Address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return CandidateDrop.UNSPECIFIED  # not an address: the offer parser lets none through
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    # An IPv6 address that a translator or relay on the path turns into an IPv4 one is judged as that one too
    # (review21g G6: loopback or the metadata service inside NAT64, 6to4 or IPv4-compatible forms).
    for judged in (address, *embedded_ipv4(address)):
        drop = _drop(judged, relayed, policy, local)
        if drop is not None:
            return drop
    return None


def _drop(address: Address, relayed: bool, policy: CandidatePolicy, local: LocalNetworks) -> CandidateDrop | None:
    if address.is_unspecified or address in _THIS_NETWORK:
        return CandidateDrop.UNSPECIFIED
    if address.is_loopback and not policy.allow_local:
        return CandidateDrop.LOOPBACK
    if address.is_link_local:
        return CandidateDrop.LINK_LOCAL
    if address.is_multicast:
        return CandidateDrop.MULTICAST
    if address == _LIMITED_BROADCAST or address in local.broadcasts:
        return CandidateDrop.BROADCAST
    if _within(address, policy.overlay):
        return CandidateDrop.OVERLAY
    if not relayed and not policy.allow_local and address in local.addresses:
        return CandidateDrop.OWN_ADDRESS
    if _within(address, policy.deny):
        return CandidateDrop.DENIED
    return None


_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix
# RFC 8215's local-use prefix, read at /96 as translators mostly use it (the other RFC 6052 lengths would judge
# what a /96 deployment holds as other, mostly unspecified, addresses)
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible (::a.b.c.d)
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT's IPv4-translated form


def embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses `address` stands for on some path (NAT64, 6to4, Teredo, the old embeddings)."""
    if not isinstance(address, ipaddress.IPv6Address) or int(address) <= 1:
        return []  # :: and ::1 are IPv6's own (unspecified, loopback), not IPv4-compatible 0.0.0.0 and 0.0.0.1
    value = int(address)
    found: list[ipaddress.IPv4Address] = []
    if any(address in net for net in (_NAT64, _NAT64_LOCAL, _COMPATIBLE, _TRANSLATED)):
        found.append(ipaddress.IPv4Address(value & 0xFFFFFFFF))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def in_networks(host: str, networks: Sequence[Network]) -> bool:
    """Is ``host`` in one of ``networks``? A name that is not an address (mDNS) counts as in: never used."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return True
    return any(address in net for net in networks)


def family_of(host: str) -> int | None:
    """4 or 6 for an address (an IPv4-mapped IPv6 address is 4), None for a name (mDNS)."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return 4
    return address.version


def underlay_ipv6_addresses(exclude: Sequence[str] = ()) -> list[ipaddress.IPv6Address]:
    """This host's IPv6 addresses a tunnel could use: not loopback, link-local, multicast, nor in ``exclude``
    (the overlays' own subnets: a bridge's IPv6 address is no underlay). ULAs count: a site's peers use them."""
    networks = [ipaddress.ip_network(n, strict=False) for n in exclude]
    found = []
    for address in local_networks().addresses:
        if (isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None and not address.is_loopback
                and not address.is_link_local and not address.is_multicast and not address.is_unspecified
                and not _within(address, networks)):
            found.append(address)
    return sorted(found)


def _within(address: Address, networks: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


DROP_LOG_INTERVAL = 60.0


class CandidateDrops:
    """Remote candidates dropped, by reason (one per overlay: the tunnel manager's); a line per peer per interval."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.counts: collections.Counter[CandidateDrop] = collections.Counter()
        self._log = LogLimiter[int | None](DROP_LOG_INTERVAL)
        self._clock = clock

    def dropped(self, peer: int | None, reason: CandidateDrop, candidate: str) -> None:
        self.counts[reason] += 1
        if self._log.should_log(peer, self._clock()):
            logger.warning(
                "tunnel candidate dropped peer=%s: %s is %s (%d %s so far; logged once a minute per peer)",
                f"{peer:032x}" if peer is not None else "?", candidate, reason.value, self.counts[reason], reason.value,
            )

    def as_dict(self) -> dict[str, int]:
        return {reason.value: n for reason, n in sorted(self.counts.items(), key=lambda i: i[0].value) if n}
