"""The lab plan: names, addresses and NAT kinds of every namespace and link.

Pure: from a lab name, the NAT kind of each node and a few service settings it
computes everything the lab will create, so the wiring can be checked without
root and `down` can recompute what an earlier `up` made.

Layout (node i, 1-based):

    node ns  {p}n{i}   {p}e{i} 10.10.i.2/24 ---veth--- {p}l{i} 10.10.i.1/24   router ns {p}r{i}
    router ns {p}r{i}  {p}w{i} 198.51.100.(10+i)/24 ---veth--- {p}p{i} (port of bridge {p}br)
    public ns {p}pub   bridge {p}br 198.51.100.1/24 + .2/24: prosody, coturn

`{p}` is the lab's prefix: "evl-" for the default lab "lab", "evl<name>-"
otherwise. Lab names contain no "-", so no lab's prefix is the start of
another's, and everything a lab owns is found by its prefix alone.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from evio.lab.errors import LabPlanError

NatKind = Literal["eim", "symmetric", "none"]
NAT_KINDS: tuple[NatKind, ...] = get_args(NatKind)
NAT_CHOICES = (*NAT_KINDS, "mixed")
# "mixed": node i gets MIXED_CYCLE[(i - 1) % 3], so any three consecutive nodes cover every kind.
MIXED_CYCLE: tuple[NatKind, ...] = ("eim", "symmetric", "none")

DEFAULT_LAB_NAME = "lab"
_LAB_NAME = re.compile(r"[a-z][a-z0-9]{0,4}")
_OVERLAY_ID = re.compile(r"[A-Za-z0-9_]{1,10}")  # "evbr-" + id must fit an interface name
_DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")
MAX_NAME_LENGTH = 15  # Linux IFNAMSIZ - 1; netns names follow the same limit here for readability
MAX_NODES = 200

PUBLIC_NETWORK = ipaddress.IPv4Network("198.51.100.0/24")  # TEST-NET-2, never routed on the internet
PUBLIC_ADDRESS = ipaddress.IPv4Address("198.51.100.1")  # prosody, coturn
PUBLIC_ALT_ADDRESS = ipaddress.IPv4Address("198.51.100.2")  # coturn's second address (NAT mapping tests)
_ROUTER_OFFSET = 10  # router i's WAN address is 198.51.100.(10 + i)
# The public namespace routes everything it does not know into a sink, so coturn
# never gets ENETUNREACH.
SINK_NETWORK = ipaddress.IPv4Network("192.0.2.0/30")  # TEST-NET-1
SINK_ADDRESS = ipaddress.IPv4Address("192.0.2.1")
SINK_GATEWAY = ipaddress.IPv4Address("192.0.2.2")
SINK_GATEWAY_MAC = "02:00:00:00:00:02"
OVERLAY_NETWORK = ipaddress.IPv4Network("10.254.0.0/16")

XMPP_PORT = 5222
STUN_PORT = 3478  # STUN and TURN, UDP and TCP
# coturn's relay range (its own default), inside the public namespace: a port per allocation, and every
# tunnel end gathers a relay candidate. 848 ports ran out at 128 nodes (1 339 "no available ports" in one
# run, failing relay gatherings and with them the pairs that need the relay).
RELAY_PORTS = (49152, 65535)


@dataclass(frozen=True)
class LabNodePlan:
    index: int  # 1-based
    nat: NatKind
    netns: str
    router_netns: str
    lan_interface: str  # in the node namespace
    router_lan_interface: str
    router_wan_interface: str
    public_port: str  # the public bridge's end of the router's WAN link
    lan_network: ipaddress.IPv4Network
    address: ipaddress.IPv4Address  # the node's LAN address
    gateway: ipaddress.IPv4Address  # the router's LAN address
    wan_address: ipaddress.IPv4Address  # the router's public address
    overlay_address: ipaddress.IPv4Interface  # suggested address on the overlay bridge
    localpart: str  # XMPP account name

    @property
    def name(self) -> str:
        return f"node{self.index}"


@dataclass(frozen=True)
class PublicPlan:
    netns: str
    bridge: str
    address: ipaddress.IPv4Address
    alt_address: ipaddress.IPv4Address
    sink_interface: str
    sink_peer: str
    domain: str
    muc_domain: str
    xmpp_port: int = XMPP_PORT
    stun_port: int = STUN_PORT
    relay_ports: tuple[int, int] = RELAY_PORTS


@dataclass(frozen=True)
class LabPlan:
    name: str
    prefix: str
    overlay: str
    public: PublicPlan
    nodes: tuple[LabNodePlan, ...]

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace, public first (creation order; deletion may go in any order)."""
        names = [self.public.netns]
        for node in self.nodes:
            names += [node.router_netns, node.netns]
        return tuple(names)

    def node(self, index: int) -> LabNodePlan:
        if not 1 <= index <= len(self.nodes):
            raise LabPlanError(f"no node {index} in lab {self.name!r} (nodes are 1..{len(self.nodes)})")
        return self.nodes[index - 1]

    @property
    def overlay_jids(self) -> tuple[str, ...]:
        return tuple(f"{n.localpart}@{self.public.domain}" for n in self.nodes)


def validate_lab_name(name: str) -> str:
    if not isinstance(name, str) or not _LAB_NAME.fullmatch(name):
        raise LabPlanError(
            f"bad lab name {name!r}: 1 to 5 of a-z 0-9, starting with a letter (it becomes part of interface names)"
        )
    return name


def lab_prefix(name: str) -> str:
    """The prefix of every namespace and interface of lab `name`."""
    validate_lab_name(name)
    return "evl-" if name == DEFAULT_LAB_NAME else f"evl{name}-"


def owned_by(name: str, object_name: str) -> bool:
    """True if a namespace or interface called `object_name` belongs to lab `name`."""
    return object_name.startswith(lab_prefix(name))


def nat_kinds(nat: str | Sequence[str], count: int) -> tuple[NatKind, ...]:
    """The NAT kind of each of `count` nodes: one kind for all, "mixed", or one per node."""
    if count < 1 or count > MAX_NODES:
        raise LabPlanError(f"a lab has 1 to {MAX_NODES} nodes, not {count}")
    if isinstance(nat, str):
        if nat == "mixed":
            return tuple(MIXED_CYCLE[i % len(MIXED_CYCLE)] for i in range(count))
        return (_nat_kind(nat),) * count
    kinds = tuple(_nat_kind(k) for k in nat)
    if len(kinds) != count:
        raise LabPlanError(f"{len(kinds)} NAT kinds given for {count} nodes")
    return kinds


def _nat_kind(kind: str) -> NatKind:
    for known in NAT_KINDS:
        if kind == known:
            return known
    raise LabPlanError(f"unknown NAT kind {kind!r} (choose from {', '.join(NAT_CHOICES)})")


def plan_lab(
    name: str,
    nat: Sequence[NatKind],
    *,
    overlay: str = "ov1",
    domain: str = "overlay.test",
) -> LabPlan:
    """Plan a lab with one node per entry of `nat` (see `nat_kinds`)."""
    prefix = lab_prefix(name)
    if not 1 <= len(nat) <= MAX_NODES:
        raise LabPlanError(f"a lab has 1 to {MAX_NODES} nodes, not {len(nat)}")
    if not _OVERLAY_ID.fullmatch(overlay):
        raise LabPlanError(f"bad overlay id {overlay!r}: 1 to 10 of A-Z a-z 0-9 _")
    if not _DOMAIN.fullmatch(domain):
        raise LabPlanError(f"bad XMPP domain {domain!r}")
    public = PublicPlan(
        netns=f"{prefix}pub",
        bridge=f"{prefix}br",
        address=PUBLIC_ADDRESS,
        alt_address=PUBLIC_ALT_ADDRESS,
        sink_interface=f"{prefix}sk0",
        sink_peer=f"{prefix}sk1",
        domain=domain,
        muc_domain=f"conference.{domain}",
    )
    nodes = tuple(_plan_node(prefix, i, _nat_kind(kind)) for i, kind in enumerate(nat, start=1))
    plan = LabPlan(name=name, prefix=prefix, overlay=overlay, public=public, nodes=nodes)
    _check_names(plan)
    return plan


def _plan_node(prefix: str, i: int, nat: NatKind) -> LabNodePlan:
    lan = ipaddress.IPv4Network(f"10.10.{i}.0/24")
    overlay_host = OVERLAY_NETWORK.network_address + i
    return LabNodePlan(
        index=i,
        nat=nat,
        netns=f"{prefix}n{i}",
        router_netns=f"{prefix}r{i}",
        lan_interface=f"{prefix}e{i}",
        router_lan_interface=f"{prefix}l{i}",
        router_wan_interface=f"{prefix}w{i}",
        public_port=f"{prefix}p{i}",
        lan_network=lan,
        address=lan.network_address + 2,
        gateway=lan.network_address + 1,
        wan_address=PUBLIC_NETWORK.network_address + _ROUTER_OFFSET + i,
        overlay_address=ipaddress.IPv4Interface(f"{overlay_host}/{OVERLAY_NETWORK.prefixlen}"),
        localpart=f"node{i}",
    )


def _check_names(plan: LabPlan) -> None:
    """Every name fits Linux's limit (holds by construction; checked because a miss is silent truncation)."""
    names = list(plan.namespaces) + [plan.public.bridge, plan.public.sink_interface, plan.public.sink_peer]
    for node in plan.nodes:
        names += [node.lan_interface, node.router_lan_interface, node.router_wan_interface, node.public_port]
    too_long = [n for n in names if len(n) > MAX_NAME_LENGTH]
    if too_long:
        raise LabPlanError(f"names longer than {MAX_NAME_LENGTH} characters: {too_long}")


_TARGET = re.compile(r"(?P<kind>node|n|router|r)?(?P<index>[0-9]+)")


def target_netns(plan: LabPlan, target: int | str) -> str:
    """The namespace a user means by `target`: 3, "3", "node3", "n3" (node), "router3", "r3", "pub"."""
    if isinstance(target, int):
        return plan.node(target).netns
    if target in ("pub", "public"):
        return plan.public.netns
    match = _TARGET.fullmatch(target)
    if match is None:
        raise LabPlanError(f"unknown lab target {target!r}: use a node number, nodeN, routerN or pub")
    node = plan.node(int(match["index"]))
    return node.router_netns if match["kind"] in ("router", "r") else node.netns
