"""From a lab plan to the `ip -batch` lines and sysctls that build it. Pure.

Veth pairs are created with both ends directly in their namespaces
(`link add A netns X type veth peer name B netns Y`), so no lab interface ever
appears in the root namespace, even for a moment, and deleting the namespaces
removes every link.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evio.lab.topology import (
    PUBLIC_NETWORK,
    SINK_ADDRESS,
    SINK_GATEWAY,
    SINK_GATEWAY_MAC,
    SINK_NETWORK,
    LabNodePlan,
    LabPlan,
)


@dataclass(frozen=True)
class IpBatch:
    """Lines for `ip [-n NETNS] -batch -`; netns None is the root namespace."""

    netns: str | None
    lines: tuple[str, ...]


_FORWARDING = {"net/ipv4/ip_forward": "1"}
# The underlay is IPv4 only; IPv6 link-local chatter would only add noise to captures.
_NO_IPV6 = {"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1"}


def create_namespaces(plan: LabPlan) -> IpBatch:
    return IpBatch(None, tuple(f"netns add {ns}" for ns in plan.namespaces))


def create_links(plan: LabPlan) -> IpBatch:
    """All veth pairs between namespaces, created in place."""
    lines = []
    for node in plan.nodes:
        lines.append(
            f"link add {node.lan_interface} netns {node.netns} type veth"
            f" peer name {node.router_lan_interface} netns {node.router_netns}"
        )
        lines.append(
            f"link add {node.router_wan_interface} netns {node.router_netns} type veth"
            f" peer name {node.public_port} netns {plan.public.netns}"
        )
    return IpBatch(None, tuple(lines))


def sysctls(plan: LabPlan) -> dict[str, Mapping[str, str]]:
    """Per namespace, /proc/sys paths (relative) and values; applied after the links exist."""
    settings: dict[str, Mapping[str, str]] = {plan.public.netns: {**_FORWARDING, **_NO_IPV6}}
    for node in plan.nodes:
        settings[node.router_netns] = {**_FORWARDING, **_NO_IPV6}
        # Only the underlay link: IPv6 stays available to overlay bridges and TAPs in the node.
        settings[node.netns] = {f"net/ipv6/conf/{node.lan_interface}/disable_ipv6": "1"}
    return settings


# The kernel's neighbour tables (ARP, and NDP for IPv6) are one per host, shared by every namespace,
# with limits for one host: past gc_thresh2 entries a forced collection every 5 s evicts any entry
# not confirmed in the last 5 s (in every namespace), and at gc_thresh3 (1024 by default) no entry
# can be made at all ("neighbor table overflow!"). An all-pairs ping in a lab of 32 nodes needs
# 32 * 31 overlay entries besides the underlay's: at the defaults some 30-90 of its 992 pairs were
# lost, each at a host whose kernel could not make the entry for its answer (IpOutDiscards), and the
# tunnels' own datagrams lost their routers' entries (decision 0058).
_NEIGHBOUR_TABLES = ("net/ipv4/neigh/default", "net/ipv6/neigh/default")
_NEIGHBOUR_HEADROOM = 256  # the host's other entries (a small lab then stays within the defaults)


def neighbour_table_floors(plan: LabPlan) -> dict[str, int]:
    """Root-namespace /proc/sys paths and the least value each must have for this lab (raise, never lower).

    A lab's entries: every node with every other on the overlay, and on the underlay each node with
    its router, each router with the public namespace (both ways) and the servers there. Room is
    left for the host and for one more lab of the same size: gc_thresh2 stays above what is in use,
    so the forced collection never runs, and gc_thresh3 is twice that.
    """
    count = len(plan.nodes)
    entries = count * (count - 1) + 6 * count
    soft = _NEIGHBOUR_HEADROOM + 2 * entries
    floors: dict[str, int] = {}
    for table in _NEIGHBOUR_TABLES:
        floors[f"{table}/gc_thresh2"] = soft
        floors[f"{table}/gc_thresh3"] = 2 * soft
    return floors


def configure_public(plan: LabPlan) -> IpBatch:
    pub = plan.public
    prefixlen = PUBLIC_NETWORK.prefixlen
    lines = [
        "link set lo up",
        f"link add {pub.bridge} type bridge",
        f"addr add {pub.address}/{prefixlen} dev {pub.bridge}",
        f"addr add {pub.alt_address}/{prefixlen} dev {pub.bridge}",
        f"link set {pub.bridge} up",
        # The sink: a default route to a neighbour that never answers, so coturn never gets ENETUNREACH.
        f"link add {pub.sink_interface} type veth peer name {pub.sink_peer}",
        f"addr add {SINK_ADDRESS}/{SINK_NETWORK.prefixlen} dev {pub.sink_interface}",
        f"link set {pub.sink_interface} up",
        f"link set {pub.sink_peer} up",
        f"neigh add {SINK_GATEWAY} lladdr {SINK_GATEWAY_MAC} dev {pub.sink_interface} nud permanent",
        f"route add default via {SINK_GATEWAY} dev {pub.sink_interface}",
    ]
    for node in plan.nodes:
        lines += [f"link set {node.public_port} master {pub.bridge}", f"link set {node.public_port} up"]
        if node.nat == "none":
            # Un-NATed LANs are routed: reachable from every router through the public namespace.
            lines.append(f"route add {node.lan_network} via {node.wan_address}")
    return IpBatch(pub.netns, tuple(lines))


def configure_router(plan: LabPlan, node: LabNodePlan) -> IpBatch:
    lan_prefix = node.lan_network.prefixlen
    return IpBatch(
        node.router_netns,
        (
            "link set lo up",
            f"addr add {node.gateway}/{lan_prefix} dev {node.router_lan_interface}",
            f"link set {node.router_lan_interface} up",
            f"addr add {node.wan_address}/{PUBLIC_NETWORK.prefixlen} dev {node.router_wan_interface}",
            f"link set {node.router_wan_interface} up",
            f"route add default via {plan.public.address}",
        ),
    )


def configure_node(node: LabNodePlan) -> IpBatch:
    return IpBatch(
        node.netns,
        (
            "link set lo up",
            f"addr add {node.address}/{node.lan_network.prefixlen} dev {node.lan_interface}",
            f"link set {node.lan_interface} up",
            f"route add default via {node.gateway}",
        ),
    )


def delete_namespaces(names: list[str]) -> IpBatch:
    return IpBatch(None, tuple(f"netns del {ns}" for ns in names))
