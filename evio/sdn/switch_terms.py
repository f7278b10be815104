"""What the switch and its FRB receive side speak in: the bridge's ports, the reasons a frame is
dropped, an Ethernet header as the switch reads it, and the deletes that go with a MAC. Pure."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from evio.sdn.flow_actions import DeleteFlowsFromMac, DeleteFlowsToMac, FlowAction

ETH_HEADER_LEN = 14
# Host announcements (decision 0055, evio/node/host_claims.py): the switch hands the ones a flood brings to the daemon
# with the port they came in by, which the bridge's own interface, where the daemon reads the rest, does not tell.
HOST_CLAIMS_ETHERTYPE = 0x88B6
FLOODED_ANNOUNCEMENTS_KEPT = 64  # waiting for the adapter, which takes them after every packet-in
# The signed documents' flood (the revocation and member lists, evio/node/document_flood.py): a broadcast of it is
# delivered only under its source MAC's owner's root, since the daemon reading it off the bridge's interface knows
# a sender by its MAC alone (review21l L4; decision 0043, amended).
SIGNED_DOCUMENTS_ETHERTYPE = 0x88B5
# A unicast of it to one of the bridge's own MACs goes to the controller from table 0 (`document_flows`), which hands
# it to the daemon with the port it came in by (`DocumentUnicast`), since no switch on its way vouched for its source
# MAC (review21r finding 1's residual; decision 0043, amended). Waiting for the adapter, which takes them after every
# packet-in, as the announcements above.
DOCUMENT_UNICASTS_KEPT = 64


@dataclass(frozen=True, slots=True)
class FloodedAnnouncement:
    """A host announcement an FRB broadcast brought: its Ethernet frame, the peer it came from, the flood's root."""

    frame: bytes
    peer: int
    root: int


@dataclass(frozen=True, slots=True)
class DocumentUnicast:
    """A unicast frame of the signed documents' flood for the bridge's interface: its Ethernet frame; `peer`, the
    adjacent member whose tunnel it came in by (None: a leaf port); `sender`, the member the switch counts it as sent
    by (`BoundedFloodSwitch._unicast_sender`: the one holding its source MAC, if it came by that member's own link or
    by the port learning places the MAC on under it), else None."""

    frame: bytes
    peer: int | None
    sender: int | None


class PortKind(enum.Enum):
    LEAF = "leaf"
    PEER = "peer"


@dataclass(frozen=True, slots=True)
class SwitchPort:
    """One bridge port. `peer` is the adjacent node's id for a PEER port, None for a LEAF."""

    port_no: int
    name: str
    kind: PortKind
    peer: int | None = None
    hw_addr: str | None = None  # the port's own MAC, announced to peers if it is a leaf

    def __post_init__(self) -> None:
        if (self.kind is PortKind.PEER) != (self.peer is not None):
            raise ValueError(f"port {self.name}: a peer port needs a peer id, a leaf port has none")


class Drop(enum.Enum):
    """Counted reasons for dropping a frame the controller was given."""

    RUNT = "shorter than an Ethernet header"
    UNKNOWN_PORT = "arrived on a port the switch does not know"
    MALFORMED_FRB = "FRB that does not parse"
    UNKNOWN_FRB_TYPE = "FRB of a type this release does not know (a newer node's; frb.py, Compatibility)"
    FRB_ON_LEAF = "FRB from a leaf port"
    OWN_BROADCAST = "FRB rooted at this node came back"
    FORWARD_TYPE = "BROADCAST_FORWARD FRB (the original's receivers drop it too)"
    HOP_LIMIT = "FRB hop count at its maximum"
    GROUP_FROM_PEER = "broadcast or multicast from a peer port without an FRB"
    HAIRPIN = "destination learned on the ingress port (from a peer: flooded on instead)"
    GROUP_SOURCE = "source MAC is multicast"
    TOO_MANY_LEAVES = "more leaf MACs than a leaf announcement holds"
    LOCAL_MAC_CLAIMED = "a peer sent from (or announced) one of this node's local MACs"
    FOREIGN_ANNOUNCE = "leaf announcement for a root other than the announcing peer"
    RATE_LIMITED = "more packet-ins from the port than its rate allows"
    UNICAST_LIMITED = ("a unicast from a tunnel port over its sender's share of the port's unicast packet-ins (flows "
                       "ahead's copies, table 0's checks: review21u; the sender as the switch vouches for it, or "
                       "nobody's share)")
    TABLE_FULL = "learning table full of local MACs; a remote one was not learned"
    OWN_FRAME = "flooded frame from one of our own leaf MACs came back (forwarded, not delivered or learned)"
    OVERSIZED = "larger than a tunnel carries and not TCP that can be segmented (why: segment_errors)"
    FLOOD_LIMITED = ("a flood not passed on: its ingress port had used its total, or its root its share of it "
                     "(delivered here)")
    MOVE_REFUSED = "a claim that a live MAC moved, not taken: its place spoke lately (the frame itself went on)"
    IMPLAUSIBLE_FRB = "FRB broadcast from a peer that no flood from its root could have reached us through"
    CONTESTED_ROOT = ("a flood from a MAC new here, under a root whose floods come here by another peer, over that "
                      "port's rate for such MACs: delivered here, neither learned nor passed on (0033, F6 residual)")
    LINK_LOCAL_LIMITED = ("link-local multicast (router solicitation, MLD, mDNS) over its port's rate: delivered to "
                          "the other local ports, not flooded")
    NOT_ANNOUNCER = ("a frame placing a MAC under a member (or by a way) other than the one whose signed announcement "
                     "holds it (evio.sdn.host_claims): not learned, the frame itself went on (not if it is neighbour "
                     "discovery for a named router's address that came by none of the router's ways: decision 0068)")
    DOCUMENT_NOT_ITS_OWNERS = ("a broadcast of the signed documents' flood (0x88B5) whose source MAC a member other "
                               "than the flood's root announced: neither delivered nor passed on (0043 amended)")
    DOCUMENT_TAGGED = ("a unicast of the signed documents' flood (0x88B5) to this node's interface behind a VLAN tag: "
                       "no member's flood sends one (0043 amended)")
    POLICY = "FRB broadcast whose inner frame an L2 policy rule drops (evio.sdn.l2policy; by rule in the status)"
    ROUTER_GUARD = ("router advertisement from a member the config does not name in ipv6_routers, or a unicast one "
                    "that came by neither the router's link nor its MAC's place, or a redirect (ICMPv6 or IPv4) from "
                    "any member (evio.sdn.neighbor_guard, decisions 0068, 0075)")
    CERTIFIED_ADDRESS_SPOOFED = ("ARP or neighbour discovery from a tunnel port speaking for a member's certified "
                                 "address with another MAC, or a duplicate address detection probe for one that is "
                                 "not its owner's; likewise a probe for, or advertisement of, an address made from a "
                                 "MAC a member's signed claims hold (its link-local or SLAAC address) not by its "
                                 "holder (evio.sdn.neighbor_guard, decisions 0068, 0076)")
    UNREADABLE_FRAME = ("a frame from a tunnel port the guards cannot read as the receiving kernel will: a VLAN-0 "
                        "(priority) tag or a second tag, ARP other than Ethernet/IPv4 request or reply, neighbour "
                        "discovery in a fragment or malformed (evio.sdn.neighbor_guard, decision 0068 amended)")
    ROUTER_ADDRESS_SPOOFED = ("neighbour discovery from a tunnel port speaking for a named router's link-local "
                              "address (an RA's source) with a MAC the router does not hold, or an RA that cannot "
                              "bind its source to its router: not link-local, another router's, or another member's "
                              "(evio.sdn.router_addresses, decision 0068 amended)")
    ROUTER_ADVERT_UNVOUCHED = ("a named router's RA from a tunnel port that no fresh statement signed by the router's "
                               "node names (held for its statement, then dropped: a relay's forgery, or the "
                               "statement lost; evio.sdn.router_adverts, decision 0081)")
    ROUTER_STATEMENT_REFUSED = ("a flooded statement vouching for a router's RA that was refused: malformed, not its "
                                "router's flood, stale, older than one held, or badly signed (decision 0081)")


@dataclass(frozen=True, slots=True)
class EthernetHeader:
    """An Ethernet header as the switch reads it: MACs as lowercase text."""

    dst: str
    src: str
    ethertype: int

    @property
    def is_group(self) -> bool:
        return is_group_mac(self.dst)

    @property
    def has_group_source(self) -> bool:
        return is_group_mac(self.src)


def is_group_mac(mac: str) -> bool:
    return int(mac[:2], 16) & 0x01 == 1  # I/G bit: multicast or broadcast


def parse_ethernet(data: bytes) -> EthernetHeader | None:
    if len(data) < ETH_HEADER_LEN:
        return None
    return EthernetHeader(data[0:6].hex(":"), data[6:12].hex(":"), int.from_bytes(data[12:14], "big"))


def flows_of_macs(macs: Iterable[str]) -> list[FlowAction]:
    """Deletes of every flow towards and from `macs` (evicted, expired or moved: neither end may keep a flow)."""
    actions: list[FlowAction] = []
    for mac in macs:
        actions += [DeleteFlowsToMac(mac), DeleteFlowsFromMac(mac)]
    return actions
