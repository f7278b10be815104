"""Nodes with a real `TunnelManager` (aioice, DTLS, data path over loopback), fake TAPs and fake signaling.

`make_node` starts a manager for `node_id` on a `FakeTunnelSignalingHub`; its TAPs and tunnel events
are kept on the `Node`. aioice gathers host candidates from every interface but 127.0.0.1: tests
run it on 127.0.0.2 (the `loopback_only` fixture of tests/conftest.py), so they need neither root
nor a network. `FAST` liveness settings make a dead link show in a fraction of a second.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.tap import TapDevice
from evio.tunnel.liveness import LivenessConfig
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelUp

NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)  # the certificates' issue time
A = 0xAA << 120
B = 0xBB << 120
FRAME = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + b"payload" * 20
FAST = LivenessConfig(hello_interval=0.02, keepalive_interval=0.1, dead_after=0.4, establish_timeout=1.5)


@dataclass
class Node:
    manager: TunnelManager
    taps: list[FakeTapDevice] = field(default_factory=list)
    events: list[TunnelEvent] = field(default_factory=list)

    def ups(self) -> list[TunnelUp]:
        return [e for e in self.events if isinstance(e, TunnelUp)]

    def downs(self) -> list[TunnelDown]:
        return [e for e in self.events if isinstance(e, TunnelDown)]


def make_node(
    hub: FakeTunnelSignalingHub,
    node_id: int,
    config: TunnelSettings,
    certificate: TunnelCertificate | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> Node:
    """A started manager for `node_id`: its TAPs and events go to the returned Node."""
    node = Node(manager=None)  # type: ignore[arg-type]

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        tap = FakeTapDevice(name, mtu)
        node.taps.append(tap)
        return tap

    node.manager = TunnelManager(
        node_id,
        config,
        certificate or TunnelCertificate.generate(f"{node_id:032x}", NOW),
        hub.endpoint(node_id),
        node.events.append,
        tap_factory=tap_factory,
        wall_clock=wall_clock,
    )
    node.manager.start()
    return node
