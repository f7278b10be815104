"""Several `evio.node.Node`s on shared fake infrastructure, for tests of the daemon's wiring.

    fleet = Fleet(4, controller_factory=...)   # node i has node id nid(i) and account node<i>@x.test
    await fleet.start(); ...; await fleet.stop_all()

With `clock=VirtualClock()` every part (signaling, links, nodes, the default
controllers) runs on it, and `start`, `stop` and `wait_until(..., clock=fleet.clock)`
move its time; a `controller_factory` must give its controllers the same clock.
Leave the real clock to fleets that do real I/O (the control socket).
"""

from __future__ import annotations

import asyncio
import ipaddress

from evio.clock import REAL_CLOCK, Clock
from evio.config.model import BridgeConfig, Config, NodeConfig, OverlayConfig, SignalConfig, Switching
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.overlay.orchestrator import Timings
from evio.testing.fake_node import ControllerFactory, FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

DOMAIN = "x.test"
# Overlay controller timings for fleets with real controllers: what takes seconds on a node takes tenths.
FLEET_TIMINGS = Timings(reevaluate_interval=0.5, membership_debounce=0.05, membership_max_delay=0.2, settle_after_login=0.1,
                        backoff_base=0.1, orphan_grace=1.0, refused_retry=0.2, stop_release_timeout=0.5)  # fmt: skip


def nid(index: int) -> int:
    """Node ids whose first hex digit is the index (1-15)."""
    return index << 124


def fleet_config(index: int, overlays: tuple[str, ...] = ("ov1",), jid: str | None = None,
                 address_pool: ipaddress.IPv4Network | None = None, switching: Switching = "bounded-flood") -> Config:
    """Node `index`'s config: one account, a bridge per overlay with 10.(254-n).0.index/16, or with an
    address derived from the node id in `address_pool`."""
    overlay_configs = {}
    for n, overlay in enumerate(overlays):
        address = None if address_pool else ipaddress.IPv4Interface(f"10.{254 - n}.0.{index}/16")
        overlay_configs[overlay] = OverlayConfig(
            id=overlay,
            signal=SignalConfig(jid=jid or f"node{index}@{DOMAIN}", server="127.0.0.1", password="pw"),
            bridge=BridgeConfig(name=f"evbr-{overlay}", address=address, address_pool=address_pool, switching=switching),
        )
    return Config(overlays=overlay_configs, node=NodeConfig(id=nid(index)))


class Fleet:
    def __init__(
        self,
        count: int,
        overlays: tuple[str, ...] = ("ov1",),
        controller_factory: ControllerFactory | None = None,
        clock: Clock = REAL_CLOCK,
        setup_delay: float = 0.0,
        address_pool: ipaddress.IPv4Network | None = None,
        switching: Switching = "bounded-flood",
    ) -> None:
        self.clock = clock
        self.signal_hub = FakeSignalHub(clock)
        for overlay in overlays:
            self.signal_hub.set_group(overlay, [f"node{i}@{DOMAIN}" for i in range(1, count + 1)])
        self.link_hub = FakeLinkHub(setup_delay=setup_delay, clock=clock)
        self.platforms: dict[int, FakePlatform] = {}
        self.nodes: dict[int, Node] = {}
        self.runs: dict[int, asyncio.Task[str | None]] = {}
        for i in range(1, count + 1):
            platform = FakePlatform(
                self.signal_hub, self.link_hub, controller_factory=controller_factory, seed=i, clock=clock
            )
            plan = plan_node(fleet_config(i, overlays, address_pool=address_pool, switching=switching), nid(i), controller_port=6653,
                             kernel_module_loaded=False)
            self.platforms[i] = platform
            # Freezing the collector's view is process-wide: not the business of one node among several.
            self.nodes[i] = Node(plan, platform, clock=clock, freeze_startup_objects=False)

    async def start(self) -> None:
        for i, node in self.nodes.items():
            self.runs[i] = asyncio.create_task(node.run())
        await wait_until(
            lambda: all(n.ready.is_set() or self.runs[i].done() for i, n in self.nodes.items()),
            what="every node ready", clock=self.clock,
        )

    async def stop(self, i: int) -> str | None:
        self.nodes[i].stop()
        return await self.ended(i)

    async def ended(self, i: int, timeout: float = 10.0) -> str | None:
        """What node i's `run()` returned, once it has (moving a virtual clock meanwhile)."""
        if isinstance(self.clock, VirtualClock):
            return await self.clock.run(self.runs[i], timeout, what=f"the end of node{i}'s run")
        return await asyncio.wait_for(self.runs[i], timeout)

    async def stop_all(self) -> None:
        for i in list(self.runs):
            if not self.runs[i].done():
                await self.stop(i)

    def bridge_ports(self, i: int, bridge: str = "evbr-ov1") -> set[str]:
        return set(self.platforms[i].ovsdb.ports(bridge))
