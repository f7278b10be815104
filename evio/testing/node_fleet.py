"""Several `evio.node.Node`s on shared fake infrastructure, for tests of the daemon's wiring.

    fleet = Fleet(4, controller_factory=...)   # node i has node id nid(i) and account node<i>@x.test
    await fleet.start(); ...; await fleet.stop_all()
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

from evio.config.model import BridgeConfig, Config, NodeConfig, OverlayConfig, SignalConfig
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.testing.fake_node import ControllerFactory, FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub

DOMAIN = "x.test"


def nid(index: int) -> int:
    """Node ids whose first hex digit is the index (1-15)."""
    return index << 124


def fleet_config(index: int, overlays: tuple[str, ...] = ("ov1",), jid: str | None = None,
                 address_pool: ipaddress.IPv4Network | None = None) -> Config:
    """Node `index`'s config: one account, a bridge per overlay with 10.(254-n).0.index/16, or with an
    address derived from the node id in `address_pool`."""
    overlay_configs = {}
    for n, overlay in enumerate(overlays):
        address = None if address_pool else ipaddress.IPv4Interface(f"10.{254 - n}.0.{index}/16")
        overlay_configs[overlay] = OverlayConfig(
            id=overlay,
            signal=SignalConfig(jid=jid or f"node{index}@{DOMAIN}", server="127.0.0.1", password="pw"),
            bridge=BridgeConfig(name=f"evbr-{overlay}", address=address, address_pool=address_pool),
        )
    return Config(overlays=overlay_configs, node=NodeConfig(id=nid(index)))


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until `cond()` holds, polling; AssertionError after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.002)


class Fleet:
    def __init__(
        self, count: int, overlays: tuple[str, ...] = ("ov1",), controller_factory: ControllerFactory | None = None,
        address_pool: ipaddress.IPv4Network | None = None,
    ) -> None:
        self.signal_hub = FakeSignalHub()
        for overlay in overlays:
            self.signal_hub.set_group(overlay, [f"node{i}@{DOMAIN}" for i in range(1, count + 1)])
        self.link_hub = FakeLinkHub()
        self.platforms: dict[int, FakePlatform] = {}
        self.nodes: dict[int, Node] = {}
        self.runs: dict[int, asyncio.Task[str | None]] = {}
        for i in range(1, count + 1):
            platform = FakePlatform(self.signal_hub, self.link_hub, controller_factory=controller_factory, seed=i)
            plan = plan_node(fleet_config(i, overlays, address_pool=address_pool), nid(i), controller_port=6653,
                             kernel_module_loaded=False)
            self.platforms[i] = platform
            self.nodes[i] = Node(plan, platform)

    async def start(self) -> None:
        for i, node in self.nodes.items():
            self.runs[i] = asyncio.create_task(node.run())
        await until(lambda: all(n.ready.is_set() or self.runs[i].done() for i, n in self.nodes.items()))

    async def stop(self, i: int) -> str | None:
        self.nodes[i].stop()
        return await asyncio.wait_for(self.runs[i], 10)

    async def stop_all(self) -> None:
        for i in list(self.runs):
            if not self.runs[i].done():
                await self.stop(i)

    def bridge_ports(self, i: int, bridge: str = "evbr-ov1") -> set[str]:
        return set(self.platforms[i].ovsdb.ports(bridge))
