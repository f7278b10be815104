"""Where the node's parts come from: the real ones here, fakes in evio.testing.fake_node.

`Node` asks a `Platform` for each part, so the same wiring runs on a host
(XMPP, aioice/DTLS tunnels on TAPs, ovs-vsctl, os-ken) and in unit tests
(in-memory signaling, fake links, a fake OVSDB and SDN).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from evio.bridge.commands import SubprocessRunner
from evio.bridge.ovs_bridge import OvsBridge
from evio.node.overlay_parts import AdjacencyController, Bridge, LinkManager
from evio.node.plan import OverlayPlan
from evio.node.sdn import OskenController, SdnController
from evio.node.transit_wiring import transit_table
from evio.signal.client import SignalClient, SignalSettings
from evio.signal.interface import Signaling
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.offer_answer import RemoteActionSignaling
from evio.tunnel.session import TunnelEvent


class Runnable(Protocol):
    async def run(self) -> None: ...


class AddressAnnouncer(Runnable, Protocol):
    def announce_again(self, ifname: str) -> None:
        """Announce `ifname`'s addresses anew (callable from any thread)."""
        ...


class Platform(Protocol):
    def signal_client(self, settings: SignalSettings) -> Signaling: ...

    def sdn_controller(self) -> SdnController: ...

    def bridge(self, plan: OverlayPlan) -> Bridge: ...

    def links(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, on_event: Callable[[TunnelEvent], None]
    ) -> LinkManager: ...

    def overlay_controller(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager
    ) -> AdjacencyController: ...

    def address_announcer(self, interfaces: set[str]) -> AddressAnnouncer | None:
        """Sends gratuitous ARP for the bridges' addresses when they appear (None: not on this platform)."""
        ...


class SystemPlatform:
    """The real parts, for `evio run`."""

    def __init__(self, controller_socket: Path, rng: random.Random | None = None) -> None:
        # The overlays' own subnets are kept out of ICE gathering by evio.tunnel.path.ice (IceConfig.exclude_networks).
        self.controller_socket = controller_socket
        self.rng = rng or random.Random()
        # One DTLS identity per run: its fingerprint travels in the signed-in signaling exchange.
        self.certificate = TunnelCertificate.generate("evio", datetime.datetime.now(datetime.UTC))

    def signal_client(self, settings: SignalSettings) -> Signaling:
        return SignalClient(settings, rng=self.rng)

    def sdn_controller(self) -> SdnController:
        from evio.bridge.ovs_paths import ovs_run_dir

        # Only the ovs-vswitchd the bridges are made on may connect (OVS_RUNDIR, as ovs-vsctl finds it).
        return OskenController(self.controller_socket, switch_run_dir=ovs_run_dir())

    def bridge(self, plan: OverlayPlan) -> Bridge:
        return OvsBridge(plan.bridge, SubprocessRunner(), plan.datapath)

    def links(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, on_event: Callable[[TunnelEvent], None]
    ) -> LinkManager:
        manager: LinkManager = TunnelManager(
            node_id, plan.tunnel, plan.certificate or self.certificate, RemoteActionSignaling(signaling, plan.id),
            on_event=on_event, transit=transit_table(plan),
        )
        return manager

    def overlay_controller(
        self, plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager
    ) -> AdjacencyController:
        from evio.overlay.controller import OverlayController

        controller: AdjacencyController = OverlayController(
            plan.id, node_id, plan.config.topology, signaling, links,
            rng=random.Random(self.rng.getrandbits(64)), limits=plan.config.limits,
            load=links.setup_load if isinstance(links, TunnelManager) else None,
        )  # fmt: skip
        return controller

    def address_announcer(self, interfaces: set[str]) -> AddressAnnouncer | None:
        from evio.sdn.address_announcer import GarpAnnouncer

        return GarpAnnouncer(interfaces)
