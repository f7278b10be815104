"""Guards on what members may tell a node's own interface and attached hosts: router advertisements and redirects
(RA guard), and ARP for another member's certified address (decision 0068, review21i I7 and I3).

RA guard. An ICMPv6 router advertisement (134) or redirect (137) that comes in by a tunnel port is dropped and
counted (`Drop.ROUTER_GUARD`) unless the overlay's config names its originating member in `ipv6_routers`: a member
that could otherwise make every node's kernel take it as IPv6 default router, or, with a prefix option's on-link
flag (2000::/3, say), the route for all global IPv6 traffic. The originator is judged as a relaying member cannot
forge it: an FRB's root must be the named member and, in trust mode, the RA's source MAC must be one that member's
signed announcement holds (0055); a unicast RA's sender is the member owning (trust) or rooting (learning) its
source MAC. Table 0 sends every RA and redirect to the controller (`GUARD_PRIORITY`), so none rides a unicast flow
past this check; they are rare (one a few minutes per router).

ARP guard. An ARP frame from a tunnel port whose sender protocol address is certified by the overlay CA (0062) for
another MAC than the one it gives (sender hardware address or Ethernet source) is dropped and counted
(`Drop.CERTIFIED_ADDRESS_SPOOFED`): the kernel would otherwise send that member's traffic to the sender. Table 0
holds two flows per certified IPv4 address (bounded by `MAX_GUARDED`): the true pair goes on to switching, any
other ARP naming the address goes to the controller, which applies this check (and the per-port packet-in rate).
Neighbour solicitations and advertisements in FRBs and packet-ins are checked the same way.

Pure: frames in, verdicts and flow descriptions out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from evio.sdn.flow_actions import AddGuardFlow
from evio.sdn.neighbor_answers import IPAddress, NeighborMessage

ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD
ICMPV6 = 58
ROUTER_ADVERTISEMENT, REDIRECT = 134, 137
ROUTER_TYPES = (ROUTER_ADVERTISEMENT, REDIRECT)
MAX_GUARDED = 4096  # certified IPv4 addresses guarded by flows (two each); members beyond: packet-ins still checked
_EXTENSIONS = (0, 43, 60)  # hop-by-hop, routing, destination options: an RA may hide behind them (RFC 7113)
_FRAGMENT = 44


def icmpv6_type(frame: bytes) -> int | None:
    """The ICMPv6 type of an untagged IPv6 frame (after any extension headers), or None. A fragment is not read:
    the kernel ignores fragmented neighbour discovery (RFC 6980), and OVS reads no type from it either."""
    if len(frame) < 54 or frame[12:14] != b"\x86\xdd":
        return None
    proto, at = frame[20], 54
    while proto in _EXTENSIONS and len(frame) >= at + 8:
        proto, at = frame[at], at + 8 + frame[at + 1] * 8
    if proto != ICMPV6 or len(frame) <= at:
        return None
    return frame[at]


def is_router_message(frame: bytes) -> bool:
    return icmpv6_type(frame) in ROUTER_TYPES


def router_allowed(routers: frozenset[int], origin: int | None, src_mac: str, mac_owners: Mapping[str, int]) -> bool:
    """Whether a router advertisement or redirect from member `origin` (None: not known), sent from `src_mac`,
    may reach this node's ports: the member is named, and in trust mode (`mac_owners` told) holds the MAC."""
    if origin is None or origin not in routers:
        return False
    return not mac_owners or mac_owners.get(src_mac.lower()) == origin


def spoofs_certified(certified: Mapping[IPAddress, str], msg: NeighborMessage) -> bool:
    """Whether an ARP or NDP message speaks for a certified address with a MAC other than the certified one."""
    if msg.sender_ip is None or msg.sender_ip.is_unspecified:
        return False
    mac = certified.get(msg.sender_ip)
    if mac is None:
        return False
    mac = mac.lower()
    return msg.eth_src.lower() != mac or (msg.sender_mac is not None and msg.sender_mac.lower() != mac)


def guard_flows(certified: Mapping[IPAddress, str]) -> frozenset[AddGuardFlow]:
    """The table-0 flows of the guards for these certified addresses."""
    flows = {AddGuardFlow((("eth_type", ETH_TYPE_IPV6), ("ip_proto", ICMPV6), ("icmpv6_type", kind)), to_switching=False)
             for kind in ROUTER_TYPES}
    ipv4 = sorted((ip, mac.lower()) for ip, mac in certified.items() if isinstance(ip, ipaddress.IPv4Address))
    for ip, mac in ipv4[:MAX_GUARDED]:
        flows.add(AddGuardFlow((("eth_type", ETH_TYPE_ARP), ("arp_spa", str(ip))), to_switching=False))
        flows.add(AddGuardFlow((("eth_type", ETH_TYPE_ARP), ("eth_src", mac), ("arp_spa", str(ip)), ("arp_sha", mac)),
                               to_switching=True))
    return frozenset(flows)
