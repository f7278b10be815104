"""Host interfaces attached to an overlay's bridge as leaf ports: which may be, and their counters.

    facts (`ip -j -d link`, `ip -j route show default`, `ovs-vsctl port-to-br`)
        -> attach_refusal(): None, or why not (pure)
        -> OvsBridge.attach_host_port(): add-port, link up
    /proc/net/dev -> interface_counters(): each attached port's bytes, frames, drops (for the status)

An attached interface is a NIC, a veth whose other end is in a container, a
VM's tap, or a veth pair whose other end is a port of a Linux bridge (a LAN
segment). The SDN switch treats every port that is not a tunnel TAP as a
leaf, so the hosts behind it are learned and pinned here like the bridge's
own address. Refused, with nothing changed: an interface that does not
exist, is a port of another bridge (Linux or Open vSwitch), is a bridge
itself, is loopback, or carries a default route (the underlay's uplink: on
the bridge it would cut the node off from its peers).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evio.bridge.commands import BridgeError
from evio.config.model import reserved_tap_name

PROC_NET_DEV = Path("/proc/net/dev")  # per network namespace of the reading process, unlike /sys/class/net


class AttachRefused(BridgeError):
    """The interface may not be attached (the message says why, in one line); nothing was changed."""


@dataclass(frozen=True)
class HostInterface:
    """What the host says of one interface, as far as attaching it goes."""

    name: str
    exists: bool = True
    kind: str | None = None  # linkinfo's info_kind: "veth", "tun", "bridge", None for a plain NIC
    master: str | None = None  # the Linux device it is enslaved to: a Linux bridge, a bond, ovs-system
    ovs_bridge: str | None = None  # the Open vSwitch bridge it is a port of
    loopback: bool = False
    mtu: int | None = None
    uplink: bool = False  # carries a default route


def attach_refusal(interface: HostInterface, bridge: str) -> str | None:
    """Why `interface` may not go on `bridge` (one line, for the operator), or None when it may."""
    name = interface.name
    if not interface.exists:
        return f"no interface {name!r} on this host"
    if name == bridge:
        return f"{name!r} is the overlay's bridge itself"
    if reserved_tap_name(name):
        return f"{name!r} is named like evio's tunnel TAPs (evt..., ev<digit>...); rename it"
    if interface.loopback:
        return f"{name!r} is loopback"
    if interface.ovs_bridge is not None and interface.ovs_bridge != bridge:
        return f"{name!r} is already a port of Open vSwitch bridge {interface.ovs_bridge!r}"
    if interface.master is not None and interface.master != "ovs-system":
        return f"{name!r} is already a port of {interface.master!r}; detach it there first"
    if interface.kind in ("bridge", "openvswitch"):
        return (f"{name!r} is a bridge; attach a veth pair instead (one end a port of {name!r}, "
                "the other attached here)")
    if interface.uplink:
        return f"{name!r} carries a default route (the underlay's uplink); on the bridge it would cut this node off"
    return None


def parse_link(name: str, ip_json: str) -> HostInterface:
    """The facts in `ip -j -d link show dev NAME` (an empty answer: no such interface)."""
    links = json.loads(ip_json or "[]")
    if not links:
        return HostInterface(name, exists=False)
    link: Mapping[str, Any] = links[0]
    info = link.get("linkinfo") or {}
    return HostInterface(
        name=name,
        kind=info.get("info_kind"),
        master=link.get("master"),
        loopback="LOOPBACK" in (link.get("flags") or ()) or link.get("link_type") == "loopback",
        mtu=link.get("mtu"),
    )


def default_route_devices(*ip_json: str) -> set[str]:
    """Interfaces of the default routes in `ip -j route show default` answers (IPv4, IPv6; multipath too)."""
    devices: set[str] = set()
    for text in ip_json:
        for route in json.loads(text or "[]"):
            if route.get("dev"):
                devices.add(route["dev"])
            devices.update(hop["dev"] for hop in route.get("nexthops") or () if hop.get("dev"))
    return devices


# -- counters ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InterfaceCounters:
    """An attached port's kernel counters. rx is what its hosts sent into the bridge, tx what the bridge sent them."""

    rx_bytes: int
    rx_frames: int
    rx_dropped: int
    tx_bytes: int
    tx_frames: int
    tx_dropped: int

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"rx": {"bytes": self.rx_bytes, "frames": self.rx_frames, "dropped": self.rx_dropped},
                "tx": {"bytes": self.tx_bytes, "frames": self.tx_frames, "dropped": self.tx_dropped}}


def parse_proc_net_dev(text: str) -> dict[str, InterfaceCounters]:
    """/proc/net/dev: `name: rx bytes packets errs drop fifo frame compressed multicast, tx bytes packets errs drop ...`."""
    counters: dict[str, InterfaceCounters] = {}
    for line in text.splitlines()[2:]:
        name, _, numbers = line.partition(":")
        fields = numbers.split()
        if len(fields) < 16:
            continue
        values = [int(v) for v in fields]
        counters[name.strip()] = InterfaceCounters(values[0], values[1], values[3], values[8], values[9], values[11])
    return counters


def interface_counters(names: Iterable[str], path: Path = PROC_NET_DEV) -> dict[str, InterfaceCounters]:
    """Counters of `names` (those that exist) in this process's network namespace."""
    wanted = set(names)
    if not wanted:
        return {}
    try:
        text = path.read_text()
    except OSError:
        return {}
    return {name: c for name, c in parse_proc_net_dev(text).items() if name in wanted}
