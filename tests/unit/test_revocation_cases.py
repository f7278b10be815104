"""Every way a member is removed closes every tunnel to it within 5 s, on every node (issue 21, M2).

Nodes with the real overlay controller over fake signaling and links, on a virtual clock, in trust mode (each
node's signaling holds the overlay CA, its certificate and key). The time each case took is printed.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from evio.config.model import TrustConfig
from evio.node.node import Node
from evio.node.overlay_stack import AdjacencyController, LinkManager
from evio.node.plan import OverlayPlan, plan_node
from evio.overlay.controller import OverlayController
from evio.overlay.orchestrator import Timings
from evio.signal import identity
from evio.signal.client import SignalSettings
from evio.signal.endpoint import OverlayIdentity
from evio.signal.interface import Signaling
from evio.testing.fake_node import FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.node_fleet import DOMAIN, Fleet, fleet_config, nid
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca, write_certificate, write_private_key
from evio.tunnel.path.trust import TrustAnchor

FAST = Timings(reevaluate_interval=0.5, membership_debounce=0.05, membership_max_delay=0.2, settle_after_login=0.1,
               backoff_base=0.1, orphan_grace=1.0, refused_retry=0.2, stop_release_timeout=0.5)
BOUND = 5.0  # seconds: issue 21's target for every removal case


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
                                     rng=random.Random(node_id), clock=clock, timings=FAST)  # fmt: skip

        self.fleet = Fleet(count, controller_factory=controller, clock=clock)
        for i, platform in self.fleet.platforms.items():
            key, cert = issue_node_certificate(self.ca_key, ca_cert, ["ov1"], nid(i), now, 30)
            ident = OverlayIdentity(self.anchor, cert, key)
            make = platform.signal_client

            def with_trust(settings: SignalSettings, make: Callable = make, ident: OverlayIdentity = ident) -> Signaling:
                return make(replace(settings, identities={"ov1": ident}))

            if trust:
                platform.signal_client = with_trust  # type: ignore[method-assign]

    def client(self, i: int):  # the FakeSignalClient of node i
        return self.fleet.platforms[i].clients[0]

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
    return [f"node{i}@{DOMAIN}" for i in range(1, count + 1) if i not in without]


@pytest.mark.parametrize("case", ["account delete", "group edit", "relogin status", "revocation list"])
async def test_each_removal_closes_every_tunnel_within_5_s(case: str) -> None:
    tf = TrustFleet(4)
    hub = tf.fleet.signal_hub
    await tf.fleet.start()
    try:
        await tf.linked(4)
        if case == "account delete":
            hub.delete_account(f"node4@{DOMAIN}")
        elif case == "group edit":
            hub.set_group("ov1", members(4, 4))
        elif case == "relogin status":
            # Its session ends saying it logs in again (peers give it 30-300 s) and it is removed meanwhile.
            hub.kick(tf.client(4).full_jid, relogin=False, status_relogin=True)
            await tf.clock.advance(0.5)
            hub.set_group("ov1", members(4, 4))
        else:
            # The server does not tell anyone (it withholds the group edit): the CA's list, dropped at one
            # member, reaches the others in its presence.
            hub.set_group("ov1", members(4, 4), push=False)
            assert tf.client(1).receive_revocation_list(tf.revocation(4), "operator")
        took = await tf.closed_within(4, case)
        assert took <= BOUND
        if case == "revocation list":
            assert all(nid(4) in tf.client(i).revoked_nodes("ov1") for i in (1, 2, 3))
    finally:
        await tf.fleet.stop_all()


async def test_nodes_configured_with_trust_files_prove_their_claims_and_read_the_list(tmp_path: Path) -> None:
    """The real wiring: config `trust` -> plan -> signaling identities -> proofs in presence, the list file watched."""
    clock = VirtualClock()
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca("ov1 CA", now, 3650)
    hub = FakeSignalHub(clock)
    hub.set_group("ov1", members(3))
    link_hub = FakeLinkHub(clock=clock)
    nodes, runs, platforms = {}, {}, {}
    for i in (1, 2, 3):
        d = tmp_path / f"n{i}"
        d.mkdir()
        key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], nid(i), now, 30)
        write_certificate(d / "ca.crt", ca_cert)
        write_certificate(d / "node.crt", cert)
        write_private_key(d / "node.key", key)
        config = fleet_config(i)
        ov = replace(config.overlays["ov1"], trust=TrustConfig(d / "ca.crt", d / "node.crt", d / "node.key"))
        config = replace(config, overlays={"ov1": ov})
        plan = plan_node(config, nid(i), controller_port=6653, kernel_module_loaded=False)
        platform = platforms[i] = FakePlatform(hub, link_hub, seed=i, clock=clock)
        nodes[i] = Node(plan, platform, clock=clock, freeze_startup_objects=False)
        runs[i] = asyncio.create_task(nodes[i].run())
    try:
        await wait_until(lambda: all(len(p.clients[0].peers("ov1")) == 2 for p in platforms.values()),
                         30.0, what="members see each other", clock=clock)  # fmt: skip
        status = nodes[1].status()["overlays"]["ov1"]
        assert status["trust"]["mode"] == "ca" and status["trust"]["revoked_nodes"] == 0
        client = platforms[1].clients[0]
        assert client._table._claims[f"node2@{DOMAIN}/evio-{nid(2):032x}"]["ov1"].proven
        # the operator drops the server host's list at node 3 only: every node honours it within 5 s
        until = int(time.time()) + 30 * 86400
        text = identity.list_to_text(identity.sign_list(ca_key, "ov1", 1, int(time.time()), {nid(2): until}))
        start = clock.now()
        (tmp_path / "n3" / "revoked.json").write_text(text)
        await wait_until(lambda: all(nid(2) not in p.clients[0].peers("ov1") for i, p in platforms.items() if i != 2),
                         BOUND, what="the list honoured everywhere", clock=clock)  # fmt: skip
        print(f"revocation file at one member -> honoured by every member in {clock.now() - start:.3f} s (virtual)")
        assert nodes[1].status()["overlays"]["ov1"]["trust"]["revoked_nodes"] == 1
    finally:
        for i, node in nodes.items():
            node.stop()
            await clock.run(runs[i], 10.0, what=f"node{i} stopped")
