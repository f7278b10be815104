"""Guards on what members may tell a node's own interface and attached hosts: router advertisements and redirects
(RA guard), and ARP for another member's certified address (decision 0068, review21i I7 and I3).

RA guard. An ICMPv6 router advertisement (134) or redirect (137) that comes in by a tunnel port is dropped and
counted (`Drop.ROUTER_GUARD`) unless the overlay's config names its originating member in `ipv6_routers`: a member
that could otherwise make every node's kernel take it as IPv6 default router, or, with a prefix option's on-link
flag (2000::/3, say), the route for all global IPv6 traffic. The originator is judged as a relaying member cannot
forge it: an FRB's root must be the named member and, in trust mode, the RA's source MAC must be one that member's
signed announcement holds (0055); a unicast RA's sender is the member owning (trust) or rooting (learning) its
source MAC, and only if it came by that member's own link or by the port learning places the MAC on under it
(review21l L1: anyone can write the router's MAC; a named router's node floods its hosts' unicast RAs and
redirects rooted at itself, `BoundedFloodSwitch._unicast_sender`). Table 0 sends every RA and redirect to the
controller (`GUARD_PRIORITY`), so none rides a unicast flow past this check; they are rare (one a few minutes per
router). An ICMP (IPv4) redirect (type 5) from a tunnel port is dropped and counted the same way from every member
(review21l L5): no config names IPv4 routers, and the kernel takes one whatever the bridge interface's own
`accept_redirects=0` says when `all` is 1 and forwarding is off (the kernel's default); a table-0 flow sends each to
the controller, so none rides a unicast flow past it.

ARP guard. An ARP frame from a tunnel port whose sender protocol address is certified by the overlay CA (0062) for
another MAC than the one it gives (sender hardware address or Ethernet source) is dropped and counted
(`Drop.CERTIFIED_ADDRESS_SPOOFED`): the kernel would otherwise send that member's traffic to the sender. Table 0
holds two flows per certified IPv4 address (bounded by `MAX_GUARDED`): the true pair goes on to switching, any
other ARP naming the address goes to the controller, which applies this check (and the per-port packet-in rate).
Neighbour solicitations and advertisements and router solicitations in FRBs and packet-ins are checked the same way
(an RS's source link-layer option is what a forwarding kernel stores: review21m M3). Table 0 sends every one naming
a certified IPv6 address to the controller (`ipv6_src` of an RS or NS, `ipv6_nd_target` of an NA), and every NA
whose target Open vSwitch does not read, so none rides a unicast flow past the check (review21m M1, decision 0075).
A duplicate address detection probe (an NS from ::) for a certified IPv6 address, which fails the address at its
owner while tentative, passes only as the owner's own flood; at the owner's node no probe for its own certified
address nor advertisement of it from a tunnel port passes (`fails_owners_dad`; review21n N3, decision 0076). So too
for an address made from a MAC a member holds (its interface identifier the MAC's modified EUI-64, whatever the
prefix: the link-local address every kernel makes, and SLAAC's), its holder's as a certified one is its owner's:
a probe passes only as the holder's own flood from that MAC, an advertisement only from the holder's MACs, and at the
holder's node none from a tunnel (`fails_holders_dad`, review21s 1, 0076 amended). Table 0 sends every probe to the
controller by one flow (`DAD_PROBE_FLOW`), and at the holder's node every advertisement of an address made from one
of the bridge's own MACs, by its interface identifier under a mask (`holder_flows`).

Redirects (137) from a tunnel port reach no port, whoever sent them (review21m M2, decision 0075): a redirect's
target link-layer option names another host's MAC by design, so no binding can judge it, and a router on another
node has no business redirecting hosts across the overlay.

Read as the kernel reads it, or refused (decision 0068, amended for review21k K1-K3 and K6). A frame from a tunnel
port is judged as the receiving kernel will take it (`as_received`): Linux strips any number of VLAN-0
(priority) tags and delivers the frame as untagged, and takes ARP of hardware type 6 as it takes 1, and
neighbour discovery behind extension headers. So a frame with a VLAN-0 tag, or a second tag (Open vSwitch
reads one: its vlan-limit is 1), ARP other than Ethernet/IPv4 request or reply, and neighbour discovery in a
fragment (RFC 6980) or malformed are dropped from tunnel ports and counted (`Drop.UNREADABLE_FRAME`); one tag
of a non-zero VLAN id (a host's VLAN device takes it: an attached trunk's frames) is read through, so a
tagged RA or ARP is judged like an untagged one. Table 0 sends each tunnel port's such frames to the controller
(`tunnel_flows`, above the certified pairs' flows), so none rides a flow past the check: Open vSwitch reads no
ARP field of hardware type 6 (all 0: `arp_op=0` matches it) and matches `eth_type` past one tag only.

Pure: frames in, verdicts and flow descriptions out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection, Iterable, Mapping

from evio.sdn import router_addresses
from evio.sdn.flow_actions import AddGuardFlow
from evio.sdn.garp import is_readable_arp
from evio.sdn.neighbor_answers import IPAddress, Kind, NeighborMessage, icmpv6_at, link_layer_option
from evio.sdn.neighbor_answers import parse as parse_neighbor

ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
ICMP, ICMP_REDIRECT = 1, 5
ICMPV6 = 58
ROUTER_ADVERTISEMENT, REDIRECT = 134, 137
ROUTER_TYPES = (ROUTER_ADVERTISEMENT, REDIRECT)
# Certified addresses of each family guarded by flows (IPv4 two each, IPv6 four); members beyond: packet-ins still
# checked, their unicast neighbour messages ride flows.
MAX_GUARDED = 4096
ND_TYPES = frozenset(range(133, 138))  # router solicitation and advertisement, neighbour ones, redirect
ROUTER_SOLICITATION, NEIGHBOR_SOLICITATION, NEIGHBOR_ADVERTISEMENT = 133, 135, 136
NEIGHBOR_TYPES = (NEIGHBOR_SOLICITATION, NEIGHBOR_ADVERTISEMENT)  # what `neighbor_answers.parse` reads
CERTIFIED_TYPES = (ROUTER_SOLICITATION, *NEIGHBOR_TYPES)  # what speaks for a certified IPv6 address (M1, M3)
_TAGS = (b"\x81\x00", b"\x88\xa8")  # 802.1Q, 802.1ad: Linux and Open vSwitch read both as a VLAN tag
VLAN_PRESENT = 0x1000  # OFPVID_PRESENT in an OpenFlow vlan_vid
_UNSPECIFIED = bytes(16)  # ::, a DAD probe's source
# Every duplicate address detection probe (an NS from ::), whatever its target, to the controller (review21n N3,
# review21s 1): a member's own probe is multicast, flooded in an FRB and judged there, so this flow meets only a
# unicast one (which no kernel sends: it would otherwise ride 0072's flow to its victim's MAC past the guards) and a
# local host's own (one per address and link-up).
DAD_PROBE_FLOW = AddGuardFlow((("eth_type", ETH_TYPE_IPV6), ("ip_proto", ICMPV6), ("icmpv6_type", 135),
                               ("ipv6_src", "::")), to_switching=False)


def as_received(frame: bytes) -> bytes | None:
    """A frame from a tunnel port as the receiving kernel reads it, for the guards: untagged as it is, one tag of a
    VLAN id other than 0 removed (a host's VLAN device takes the frame so); None where the switch refuses it
    instead: a VLAN-0 tag (Linux strips any number of them and takes the frame as untagged: K1, K2), a second
    tag (more than Open vSwitch reads), a truncated tag, or ARP `parse_arp` does not read (K3)."""
    kind = frame[12:14]
    if kind in _TAGS:
        if len(frame) < 18 or not (frame[14] & 0x0F or frame[15]) or frame[16:18] in _TAGS:
            return None
        frame = frame[:12] + frame[16:]
        kind = frame[12:14]
    if kind == b"\x08\x06" and not is_readable_arp(frame):
        return None
    return frame


def icmpv6_type(frame: bytes) -> int | None:
    """The ICMPv6 type of an untagged IPv6 frame (after any extension headers), or None. A fragment is not read:
    the kernel ignores fragmented neighbour discovery (RFC 6980), and the guard drops it (`ND_TYPES`)."""
    found = icmpv6_at(frame)
    return None if found is None or found[2] else found[0]


def is_router_message(frame: bytes) -> bool:
    return icmpv6_type(frame) in ROUTER_TYPES


def icmpv4_type(frame: bytes) -> int | None:
    """The ICMP type of an untagged IPv4 frame, or None, as Open vSwitch's `icmp_type` reads it: in an unfragmented
    packet or a first fragment (a later one carries no ICMP header, and without its first the kernel takes none)."""
    if len(frame) < 35 or frame[23] != ICMP or frame[12:14] != b"\x08\x00" or frame[20] & 0x1F or frame[21]:
        return None  # not ICMP, or a later fragment (a fragment offset: 13 bits from byte 20)
    at = 14 + (frame[14] & 0x0F) * 4
    return frame[at] if len(frame) > at else None


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


def fails_owners_dad(certified: Mapping[IPAddress, str], own: Collection[IPAddress], msg: NeighborMessage,
                     root: int | None, mac_owners: Mapping[str, int]) -> bool:
    """Whether an IPv6 neighbour message from a tunnel port would fail its certified target's duplicate address
    detection at the owner (review21n N3): the owner's kernel, the address still tentative, takes any probe (an NS
    from ::, RFC 4862 5.4.2) for it or advertisement of it as a duplicate's and gives the address up (`dadfailed`,
    5.4.3). A probe for a certified address passes only as its owner's own: multicast, so flooded rooted at the
    owner (`root`; None: unicast), from the certified MAC. At the owner's node (`own`: this node's certified
    addresses) none passes, nor an advertisement: its own frames do not come back to it by a tunnel. Elsewhere
    another's advertisement is `spoofs_certified`'s (review21m M1)."""
    probe = msg.kind is Kind.REQUEST and msg.sender_ip is not None and msg.sender_ip.is_unspecified
    address = msg.target_ip if probe else msg.sender_ip if msg.kind is Kind.SPEAKS else None
    if address is None or address.version != 6:
        return False  # ARP: no kernel of ours detects IPv4 address conflicts
    if address in own:
        return True
    mac = certified.get(address) if probe else None
    if mac is None:
        return False
    mac = mac.lower()
    return root is None or mac_owners.get(mac) != root or msg.eth_src.lower() != mac


def fails_holders_dad(frame: bytes, at: int, root: int | None, mac_owners: Mapping[str, int],
                      own_macs: Callable[[], Collection[str]], here: int) -> bool:
    """Whether an untagged neighbour solicitation or advertisement from a tunnel port (its ICMPv6 header at `at`)
    would fail, by duplicate address detection, an address made from a MAC a member holds (review21s 1): a kernel
    makes its link-local address, and SLAAC its global ones, from its interface's MAC (modified EUI-64), and the MAC
    is in the member's signed host claims, so the address is the holder's as a certified one is its owner's
    (`fails_owners_dad`). Found by the target's interface identifier (ff:fe in its middle), whatever its prefix, and a
    dict lookup, read from the frame's bytes: every NS and NA from a tunnel comes this way, and one for an address
    made otherwise costs a slice compare. A probe (an NS from ::) passes only as the holder's own flood (rooted at
    it, `root`; None: unicast) from that MAC; an advertisement only from the holder's MACs (its source and target
    link-layer option, the first, as Linux reads it). At the holder's node (`here`; or, where no member is known to
    hold the MAC, one of the bridge's own, `own_macs()`, known without trust) none from a tunnel passes: its own frames
    do not come back to it. Without trust (`mac_owners` empty) another member's MAC has no known holder. A code other than 0 is not judged (the kernel
    drops the message, RFC 4861 7.1)."""
    kind = frame[at] if len(frame) >= at + 24 else None
    probe = kind == NEIGHBOR_SOLICITATION and frame[22:38] == _UNSPECIFIED
    if (not probe and kind != NEIGHBOR_ADVERTISEMENT) or frame[at + 1] != 0 or frame[at + 19 : at + 21] != b"\xff\xfe":
        return False
    iid = frame[at + 16 : at + 24]  # the target's interface identifier (`router_addresses.interface_mac`, from bytes)
    mac = (bytes([iid[0] ^ 0x02]) + iid[1:3] + iid[5:8]).hex(":")
    holder = mac_owners.get(mac)
    if holder is None:
        return mac in own_macs()  # (without trust, or a MAC of the bridge's own its claims left out)
    if holder == here:
        return True
    eth_src = frame[6:12].hex(":")
    if probe:
        return root != holder or eth_src != mac
    lladdr = link_layer_option(frame[at + 24 :], 2)
    return mac_owners.get(eth_src) != holder or (lladdr is not None and mac_owners.get(lladdr) != holder)


def holder_flows(own_macs: Iterable[str]) -> set[AddGuardFlow]:
    """Table-0 flows for `fails_holders_dad` (review21s 1) beside `DAD_PROBE_FLOW` (`guard_flows`): per MAC of the
    bridge's own (`own_macs`), every advertisement of an address made from it, whatever its prefix, by the target's
    interface identifier under a mask (a neighbour's unicast one rode 0072's flow to this node's interface and failed
    its DAD). One flow per own MAC, none per member or prefix."""
    mask = str(router_addresses.INTERFACE_ID_MASK)
    return {AddGuardFlow((("eth_type", ETH_TYPE_IPV6), ("ip_proto", ICMPV6), ("icmpv6_type", NEIGHBOR_ADVERTISEMENT),
                          ("ipv6_nd_target", (str(router_addresses.interface_id_of(mac)), mask))), to_switching=False)
            for mac in own_macs}


def certified_claim(frame: bytes, found: tuple[int, int, bool] | None) -> NeighborMessage | None:
    """What an untagged ARP, NS, NA or RS frame says of an address's MAC, for `spoofs_certified`, or None where it
    cannot be read. An RS speaks for its source with its source link-layer option: a kernel forwarding IPv6 creates
    or overrides its entry for that source with it (Linux `ndisc_recv_rs`), as it does for an NS's (review21m M3).
    Its code must be 0 (the kernel drops others); its hop limit is not read (judging a frame the kernel ignores
    harms nothing)."""
    if found is None or found[0] != ROUTER_SOLICITATION:
        return parse_neighbor(frame, found)
    said = router_addresses.claim(frame)
    if said is None:
        return None
    return NeighborMessage(Kind.REQUEST, said.eth_src, said.lladdr, said.address, None)


def guard_flows(certified: Mapping[IPAddress, str], tunnel_ports: Iterable[int] = (),
                own: Iterable[IPAddress] = ()) -> frozenset[AddGuardFlow]:
    """The table-0 flows of the guards for these certified addresses, tunnel ports and this node's own certified
    addresses (`own`: their probes and advertisements, `fails_owners_dad`)."""
    icmpv6 = (("eth_type", ETH_TYPE_IPV6), ("ip_proto", ICMPV6))
    flows = {AddGuardFlow((*icmpv6, ("icmpv6_type", kind)), to_switching=False) for kind in ROUTER_TYPES}
    flows.add(AddGuardFlow((("eth_type", ETH_TYPE_IPV4), ("ip_proto", ICMP), ("icmpv4_type", ICMP_REDIRECT)),
                           to_switching=False))  # review21l L5
    # An NA whose target Open vSwitch did not read: it reads none when a link-layer option comes twice (Linux takes
    # the first) or the code is not 0; `ipv6_nd_target` is then ::, and no flow by target would catch it (M1).
    flows.add(AddGuardFlow((*icmpv6, ("icmpv6_type", NEIGHBOR_ADVERTISEMENT), ("ipv6_nd_target", "::")),
                           to_switching=False))
    ipv4 = sorted((ip, mac.lower()) for ip, mac in certified.items() if isinstance(ip, ipaddress.IPv4Address))
    for ip, mac in ipv4[:MAX_GUARDED]:
        flows.add(AddGuardFlow((("eth_type", ETH_TYPE_ARP), ("arp_spa", str(ip))), to_switching=False))
        flows.add(AddGuardFlow((("eth_type", ETH_TYPE_ARP), ("eth_src", mac), ("arp_spa", str(ip)), ("arp_sha", mac)),
                               to_switching=True))
    # Certified IPv6 addresses: every RS, NS and NA naming one to the controller (review21m M1, M3), with no pass
    # flow for the owner's true pair (decision 0075: OVS and Linux read a doubled link-layer option differently).
    ipv6 = sorted(ip for ip in certified if isinstance(ip, ipaddress.IPv6Address))
    own_ipv6 = sorted(ip for ip in own if isinstance(ip, ipaddress.IPv6Address))
    for address in ipv6[:MAX_GUARDED]:
        flows |= {AddGuardFlow((*icmpv6, ("icmpv6_type", kind), ("ipv6_src", str(address))), to_switching=False)
                  for kind in (ROUTER_SOLICITATION, NEIGHBOR_SOLICITATION)}
        flows.add(AddGuardFlow((*icmpv6, ("icmpv6_type", NEIGHBOR_ADVERTISEMENT), ("ipv6_nd_target", str(address))),
                               to_switching=False))
    # A probe's source is ::, so the flows by source miss it, and a unicast one to the owner's MAC rode 0072's flow
    # ahead to its interface past `fails_owners_dad` (review21n N3): every probe, whatever its target, by one flow
    # (review21s 1: it was one per certified, own and router address, and addresses made from members' MACs would
    # have wanted one per member and prefix); at the owner's node, the advertisements of its own addresses too.
    flows.add(DAD_PROBE_FLOW)
    flows |= {AddGuardFlow((*icmpv6, ("icmpv6_type", NEIGHBOR_ADVERTISEMENT), ("ipv6_nd_target", str(address))),
                           to_switching=False) for address in own_ipv6}
    for port in tunnel_ports:
        flows |= tunnel_flows(port)
    return frozenset(flows)


def router_node_flows(leaf_ports: Iterable[int]) -> set[AddGuardFlow]:
    """At a named router's node: its hosts' router and neighbour solicitations and neighbour advertisements to the
    controller (RAs and redirects go there from every port already), which floods the unicast ones speaking for a
    link-local address rooted here (`BoundedFloodSwitch._floods_for_router`, decision 0068 amended for review21l):
    riding flows, they reach a node opposite by the way learning did not place the router's MAC on, and are dropped."""
    return {AddGuardFlow((("in_port", port), ("eth_type", ETH_TYPE_IPV6), ("ip_proto", ICMPV6), ("icmpv6_type", kind)),
                         to_switching=False)
            for port in leaf_ports for kind in (133, 135, 136)}


def tunnel_flows(port: int) -> set[AddGuardFlow]:
    """A tunnel port's frames `as_received` refuses, as Open vSwitch (vlan-limit 1) can match them, to the controller:
    a VLAN-0 tag; a second tag (its type is then the frame's `eth_type`); ARP whose fields OVS does not read (a
    hardware type other than 1, say: every ARP field 0) or whose op is none (0, or above 255)."""
    return {
        AddGuardFlow((("in_port", port), ("vlan_vid", (VLAN_PRESENT, 0x1FFF))), to_switching=False, unreadable=True),
        *(AddGuardFlow((("in_port", port), ("vlan_vid", (VLAN_PRESENT, VLAN_PRESENT)), ("eth_type", int(tag.hex(), 16))),
                       to_switching=False, unreadable=True) for tag in _TAGS),
        AddGuardFlow((("in_port", port), ("eth_type", ETH_TYPE_ARP), ("arp_op", 0)), to_switching=False, unreadable=True),
    }
