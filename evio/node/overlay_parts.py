"""The parts an overlay stack (evio.node.overlay_stack) is built from, as the stack sees them.

Protocols of the bridge, the tunnel manager and the overlay controller, so the platform
(evio.node.platform) can give the real ones and the unit tests fakes; the factories that
make them; and the record of a host interface attached to the bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from evio.bridge.host_ports import HostInterface, InterfaceCounters
from evio.config.model import TopologyConfig
from evio.node.status import TunnelView
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.transit_table import TransitTable
from evio.tunnel.session import TunnelEvent, TunnelInfo


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Bridge(Protocol):
    """What the node needs of an OVS bridge (evio.bridge.OvsBridge)."""

    @property
    def name(self) -> str: ...

    async def create(self) -> None: ...

    async def add_port(self, port_name: str) -> None: ...

    async def remove_port(self, port_name: str) -> None: ...

    async def ports(self) -> list[str]: ...

    async def delete(self) -> None: ...

    async def attach_host_port(self, name: str) -> HostInterface:
        """Put a host interface on the bridge as a leaf port (AttachRefused, nothing changed, when it may not)."""
        ...


class TunnelLike(TunnelView, Protocol):
    async def probe(self, timeout: float) -> float:
        """RTT of one echo through the tunnel (raises TunnelError if not up, TimeoutError)."""
        ...


class LinkManager(Protocol):
    """What the node needs of the tunnel manager (evio.tunnel.manager.TunnelManager)."""

    def start(self) -> None: ...

    def admit_offers(self, policy: Callable[[int], bool]) -> None: ...

    async def connect(self, peer: int) -> TunnelInfo: ...

    async def disconnect(self, peer: int) -> None: ...

    async def close(self) -> None: ...

    def get(self, peer: int) -> TunnelLike | None: ...

    @property
    def transit(self) -> TransitTable | None:
        """The overlay's transit fast-path table (evio.node.transit_wiring), None without one."""
        ...

    def reconfigure(self, config: TunnelSettings) -> None:
        """Settings for the tunnels set up from now on (those up keep theirs)."""
        ...

    def doubt(self, peer: int) -> None: ...


class AdjacencyController(Protocol):
    """What the node needs of the overlay controller (evio.overlay.controller.OverlayController)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def on_tunnel_event(self, event: TunnelEvent) -> None: ...

    def expects_tunnel(self, peer: int) -> bool: ...

    def subscribe(self, callback: Callable[[Any], None]) -> Cancellable: ...

    def adjacency(self) -> Mapping[int, Any]: ...

    def request_on_demand(self, peer: int) -> None: ...

    def release_on_demand(self, peer: int) -> None: ...

    def set_topology(self, topology: TopologyConfig) -> None: ...


LinksFactory = Callable[[Callable[[TunnelEvent], None]], LinkManager]
ControllerFactory = Callable[[LinkManager], AdjacencyController]
CounterSource = Callable[[Iterable[str]], Mapping[str, InterfaceCounters]]


@dataclass(frozen=True)
class AttachedPort:
    """A host interface the config or `evio attach` put on this overlay's bridge (or tried to)."""

    name: str
    origin: str  # "config" (the overlay's `attach`) or "command" (`evio attach`, until a restart or `evio detach`)
    on_bridge: bool = False
    error: str | None = None  # why it is not on the bridge
    mtu: int | None = None  # the interface's, when attached
