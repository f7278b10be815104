"""Which link-local multicast a frame is, so the switch can bound it per port (issue 23; pure).

Every host on the overlay's Ethernet (the bridges' own ports, since they keep
their IPv6 link-local address, and the hosts behind attached ports) sends
link-local multicast on its own: a DAD probe and MLD reports when an address
appears, router solicitations (RFC 4861 6.3.7; Linux goes on for ever,
backing off to one an hour, RFC 7559), mDNS (224.0.0.251, ff02::fb), LLMNR,
IGMP. Bounded Flood carries each to every member, so what one port may start
is bounded in the switch, per port and kind, rather than by turning IPv6 off:

- `ROUTER_SOLICITATION` (ICMPv6 type 133): a few at a host's start, then rare;
- `LINK_LOCAL_MULTICAST`: anything else to ff02::/16 or 224.0.0.0/24.

Address resolution is not bounded here, as ARP is not: neighbour
solicitations and advertisements (ICMPv6 135, 136) pass as any broadcast
does, within the port's packet-in and flood budgets.
"""

from __future__ import annotations

import enum

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
IPV6_HEADER_LEN = 40
NEXT_HOP_BY_HOP = 0  # MLD reports carry a hop-by-hop Router Alert before the ICMPv6 header
NEXT_ICMPV6 = 58
ICMPV6_ROUTER_SOLICITATION = 133
ICMPV6_NEIGHBOUR_SOLICITATION = 135
ICMPV6_NEIGHBOUR_ADVERTISEMENT = 136

# Per leaf port and kind: (frames a second, burst). A host solicits a router 3 times in its first
# 8 s (RFC 4861's MAX_RTR_SOLICITATIONS, 4 s apart); a burst of 10 lets a few start together. mDNS
# announces a host's services in a burst of a few frames and answers queries; 10 a second is a busy LAN's.
ROUTER_SOLICITATION_RATE = (0.2, 10)
LINK_LOCAL_MULTICAST_RATE = (10.0, 50)


class LinkLocalKind(enum.Enum):
    ROUTER_SOLICITATION = "router-solicitation"
    LINK_LOCAL_MULTICAST = "link-local-multicast"


def link_local_kind(frame: bytes) -> LinkLocalKind | None:
    """The kind of link-local multicast `frame` (an Ethernet frame, untagged) is, None if it is none or is
    address resolution."""
    if len(frame) < 14 or not frame[0] & 0x01:
        return None
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_TYPE_IPV4:
        # 224.0.0.0/24 maps to 01:00:5e:00:00:xx (RFC 1112 6.4): local network control, never routed.
        return LinkLocalKind.LINK_LOCAL_MULTICAST if frame[0:5] == b"\x01\x00\x5e\x00\x00" else None
    if ethertype != ETH_TYPE_IPV6 or len(frame) < 14 + IPV6_HEADER_LEN:
        return None
    ip = frame[14:]
    if ip[24] != 0xFF or ip[25] & 0x0F != 0x02:  # destination ff02::/16 (scope 2, link-local: RFC 4291 2.7)
        return None
    next_header, offset = ip[6], IPV6_HEADER_LEN
    if next_header == NEXT_HOP_BY_HOP and len(ip) >= offset + 2:
        next_header, offset = ip[offset], offset + (ip[offset + 1] + 1) * 8
    if next_header == NEXT_ICMPV6 and len(ip) > offset:
        icmp_type = ip[offset]
        if icmp_type in (ICMPV6_NEIGHBOUR_SOLICITATION, ICMPV6_NEIGHBOUR_ADVERTISEMENT):
            return None
        if icmp_type == ICMPV6_ROUTER_SOLICITATION:
            return LinkLocalKind.ROUTER_SOLICITATION
    return LinkLocalKind.LINK_LOCAL_MULTICAST
