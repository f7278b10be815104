"""Nodes with the real overlay controller over fake signaling, links, OVSDB and SDN (no root, no network).

What the daemon must get right with the real controller: successor links
close the ring and each link that is up is exactly one TAP on the bridge and
one peer port on the SDN side; a node that stops takes everything down, and
the rest repair the ring around it. The fleet runs on a `VirtualClock`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from collections.abc import Callable

from evio.ids import format_node_id
from evio.node.overlay_parts import AdjacencyController, LinkManager
from evio.node.plan import OverlayPlan
from evio.overlay.adjacency import LinkState
from evio.overlay.controller import OverlayController
from evio.signal.interface import Signaling
from evio.testing.node_fleet import FLEET_TIMINGS, Fleet, nid
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until


def fleet_with_real_controllers(
    count: int, setup_delay: float = 0.0, address_pool: ipaddress.IPv4Network | None = None
) -> Fleet:
    clock = VirtualClock()

    def real_controller(plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager) -> AdjacencyController:
        controller: AdjacencyController = OverlayController(
            plan.id, node_id, plan.config.topology, signaling, links, rng=random.Random(node_id), clock=clock,
            timings=FLEET_TIMINGS,
        )
        return controller

    return Fleet(count, controller_factory=real_controller, clock=clock, setup_delay=setup_delay,
                 address_pool=address_pool)


async def until(fleet: Fleet, condition: Callable[[], bool], timeout: float, what: str) -> None:
    await wait_until(condition, timeout, what=what, clock=fleet.clock)


def up_links(fleet: Fleet, i: int) -> dict[int, str]:
    """peer -> TAP of node i's links that are up, as its controller reports them."""
    stack = fleet.nodes[i].overlays["ov1"]
    return {peer: info.tap for peer, info in stack.controller.adjacency().items() if info.state is LinkState.UP}


def ring_closed(fleet: Fleet, members: list[int]) -> bool:
    order = sorted(members, key=nid)
    for a, b in zip(order, order[1:] + order[:1]):
        if nid(b) not in up_links(fleet, a) or nid(a) not in up_links(fleet, b):
            return False
    return True


def bridge_matches_adjacency(fleet: Fleet, i: int) -> bool:
    platform = fleet.platforms[i]
    platform.sdn.sync()
    taps = set(up_links(fleet, i).values())
    sdn_taps = {tap for (_, tap) in platform.sdn.peer_ports}
    return set(platform.ovsdb.ports("evbr-ov1")) == taps == sdn_taps


async def test_a_ring_forms_and_each_up_link_is_one_bridge_port() -> None:
    fleet = fleet_with_real_controllers(5)
    await fleet.start()
    try:
        await until(fleet, lambda: ring_closed(fleet, list(fleet.nodes)), 20, "ring")
        await until(fleet, lambda: all(bridge_matches_adjacency(fleet, i) for i in fleet.nodes), 10, "bridges")
    finally:
        await fleet.stop_all()
    for platform in fleet.platforms.values():
        platform.sdn.sync()
        assert platform.ovsdb.bridges == {} and platform.sdn.peer_ports == {} and platform.sdn.attached == {}
    assert fleet.link_hub.attached() == set()


async def test_a_stopped_node_leaves_nothing_and_the_others_repair_the_ring() -> None:
    fleet = fleet_with_real_controllers(5)
    await fleet.start()
    try:
        await until(fleet, lambda: ring_closed(fleet, list(fleet.nodes)), 20, "ring")
        assert await fleet.stop(3) is None
        assert fleet.platforms[3].ovsdb.bridges == {}
        others = [i for i in fleet.nodes if i != 3]
        await until(fleet, lambda: ring_closed(fleet, others), 20, "ring without node 3")
        await until(fleet, lambda: all(bridge_matches_adjacency(fleet, i) for i in others), 10, "bridges")
        assert all(nid(3) not in up_links(fleet, i) for i in others)
    finally:
        await fleet.stop_all()


async def test_stop_while_links_are_being_negotiated_leaves_nothing() -> None:
    fleet = fleet_with_real_controllers(4, setup_delay=0.05)
    await fleet.start()
    network = fleet.link_hub.network("ov1")
    await until(fleet, lambda: network.open_tunnels() > len(network.up_pairs()), 20, "a tunnel being set up")
    await fleet.stop_all()
    for i, platform in fleet.platforms.items():
        platform.sdn.sync()
        assert platform.ovsdb.bridges == {}, f"node{i} left a bridge"
        assert platform.sdn.peer_ports == {} and platform.links_made["ov1"].tunnels() == {}


async def test_addresses_from_a_pool_are_set_and_a_collision_is_reported_at_both_nodes() -> None:
    # nid(i) = i << 124, and 2**124 = 4 (mod 6): in a /29 (6 hosts) nodes 1 and 4 both get .5.
    pool = ipaddress.IPv4Network("10.9.0.0/29")
    fleet = fleet_with_real_controllers(4, address_pool=pool)
    await fleet.start()
    try:
        await until(fleet, lambda: ring_closed(fleet, list(fleet.nodes)), 20, "ring")
        status = {i: fleet.nodes[i].status()["overlays"]["ov1"] for i in fleet.nodes}
        on_bridges = {i: fleet.platforms[i].ovsdb.bridges["evbr-ov1"].addresses for i in fleet.nodes}
    finally:
        await fleet.stop_all()
    assert {i: s["address"] for i, s in status.items()} == {
        1: "10.9.0.5/29", 2: "10.9.0.3/29", 3: "10.9.0.1/29", 4: "10.9.0.5/29"}
    assert on_bridges == {i: [s["address"]] for i, s in status.items()}
    assert status[1]["address_conflicts"] == [format_node_id(nid(4))]
    assert status[4]["address_conflicts"] == [format_node_id(nid(1))]
    assert status[2]["address_conflicts"] == [] and status[3]["address_conflicts"] == []


class RecordingAnnouncer:
    """Stands in for the gratuitous-ARP announcer: records each `announce_again` with the bridge's ports then."""

    def __init__(self, ports: Callable[[str], list[str]]) -> None:
        self.ports = ports
        self.again: list[tuple[str, list[str]]] = []

    async def run(self) -> None:
        await asyncio.Event().wait()  # until cancelled, as the real one

    def announce_again(self, ifname: str) -> None:
        self.again.append((ifname, sorted(self.ports(ifname))))


async def test_a_bridge_getting_its_first_tunnel_port_has_its_addresses_announced_again() -> None:
    fleet = fleet_with_real_controllers(3)
    announcers = {}
    for i, platform in fleet.platforms.items():
        announcers[i] = RecordingAnnouncer(platform.ovsdb.ports)
        platform.address_announcer = lambda interfaces, a=announcers[i]: a  # type: ignore[method-assign]
    await fleet.start()
    try:
        await until(fleet, lambda: ring_closed(fleet, list(fleet.nodes)), 20, "ring")
        await until(fleet, lambda: all(bridge_matches_adjacency(fleet, i) for i in fleet.nodes), 10, "bridges")
        for i, announcer in announcers.items():
            # Once the bridge had a tunnel port (the first), not for the ports after it.
            assert [name for name, _ in announcer.again] == ["evbr-ov1"], (i, announcer.again)
            assert len(announcer.again[0][1]) == 1, announcer.again
    finally:
        await fleet.stop_all()
