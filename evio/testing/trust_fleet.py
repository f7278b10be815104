"""A fleet of nodes with real overlay controllers in trust mode under one overlay CA, on a virtual clock.

For the removal tests of issue 21 (M2): each node's signaling holds the CA, its certificate and key
(or, `trust` False, nothing: fingerprint-only, where node ids are bound to accounts). `revocation`
signs a list as the operator's `evio member remove` does; `closed_within` times how long every
tunnel to a removed member took to close. Every removal case must close them within
`REMOVAL_BOUND` seconds.
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from evio.node.overlay_parts import AdjacencyController, LinkManager
from evio.node.plan import OverlayPlan
from evio.overlay.controller import OverlayController
from evio.signal import identity
from evio.signal.client import SignalSettings
from evio.signal.endpoint import OverlayIdentity
from evio.signal.interface import Signaling
from evio.testing.fake_signal import FakeSignalClient
from evio.testing.node_fleet import DOMAIN, FLEET_TIMINGS, Fleet, nid
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

REMOVAL_BOUND = 5.0  # seconds: issue 21's target for every removal case


class TrustFleet:
    """A `Fleet` with real controllers whose nodes all run ov1 in trust mode under one CA (or, `trust` False,
    fingerprint-only, where node ids are bound to accounts)."""

    def __init__(self, count: int, trust: bool = True) -> None:
        self.clock = VirtualClock()
        now = datetime.datetime.now(datetime.UTC)
        self.ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
        self.anchor = TrustAnchor("ov1", (ca_cert,))
        self.serial = 0
        clock = self.clock

        def controller(plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager) -> AdjacencyController:
            return OverlayController(plan.id, node_id, plan.config.topology, signaling, links,
                                     rng=random.Random(node_id), clock=clock, timings=FLEET_TIMINGS)  # fmt: skip

        self.fleet = Fleet(count, controller_factory=controller, clock=clock)
        for i, platform in self.fleet.platforms.items():
            key, cert = issue_node_certificate(self.ca_key, ca_cert, ["ov1"], nid(i), now, 30)
            ident = OverlayIdentity(self.anchor, cert, key)
            make = platform.signal_client

            def with_trust(settings: SignalSettings, make: Callable = make, ident: OverlayIdentity = ident) -> Signaling:
                return make(replace(settings, identities={"ov1": ident}))

            if trust:
                platform.signal_client = with_trust  # type: ignore[method-assign]

    def client(self, i: int) -> FakeSignalClient:
        """Node i's signaling client."""
        return cast(FakeSignalClient, self.fleet.platforms[i].clients[0])

    def tunnels_to(self, victim: int) -> set[frozenset[int]]:
        network = self.fleet.link_hub.network("ov1")
        return {pair for pair in network.up_pairs() if nid(victim) in pair}

    def links_to(self, victim: int) -> list[int]:
        """Nodes whose controller still has a link (any state) to the victim."""
        return [i for i, node in self.fleet.nodes.items() if i != victim and node.overlays
                and nid(victim) in node.overlays["ov1"].controller.adjacency()]  # fmt: skip

    def revocation(self, *victims: int) -> str:
        self.serial += 1
        until = int(time.time()) + 30 * 86400
        return identity.list_to_text(
            identity.sign_list(self.ca_key, "ov1", self.serial, int(time.time()), {nid(v): until for v in victims}))

    async def linked(self, victim: int) -> None:
        others = [i for i in self.fleet.nodes if i != victim]
        await wait_until(lambda: all(nid(victim) in self.client(i).peers("ov1") for i in others)
                         and len(self.tunnels_to(victim)) >= 2, 30.0, what="victim linked", clock=self.clock)  # fmt: skip

    async def closed_within(self, victim: int, case: str) -> float:
        start = self.clock.now()
        await wait_until(lambda: not self.tunnels_to(victim) and not self.links_to(victim), 30.0,
                         what=f"{case}: every tunnel to node{victim} closed", clock=self.clock)  # fmt: skip
        took = self.clock.now() - start
        print(f"removal by {case}: every tunnel to the removed member closed in {took:.3f} s (virtual clock)")
        return took


def members(count: int, *without: int) -> list[str]:
    """The accounts of nodes 1..count but `without`: an overlay's group."""
    return [f"node{i}@{DOMAIN}" for i in range(1, count + 1) if i not in without]
