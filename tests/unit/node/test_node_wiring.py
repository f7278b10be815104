"""`Node` wiring over fakes: signaling hub, links, OVSDB and SDN boundary (no root, no network).

The overlay controller here is a small stand-in (`MeshController`: link to
every peer) so the tests pin down the node's own job: what reaches the bridge
and the SDN controller, in which order, and that stopping leaves nothing.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evio.node.control import query
from evio.node.errors import StartupError
from evio.node.node import Node
from evio.node.overlay_parts import LinkManager
from evio.node.overlay_status import overlay_status
from evio.node.plan import OverlayPlan, plan_node
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import LinkDown, LinkInfo, LinkUp
from evio.sdn.boundary import (
    OnDemandIdle,
    OnDemandWanted,
    PeerPortDown,
    PeerPortUp,
    PortAdded,
    SetMembers,
    SwitchConnected,
)
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from evio.signal.interface import Signaling
from evio.signal.protocol import Body
from evio.testing.fake_node import FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.node_fleet import DOMAIN, Fleet, nid
from evio.testing.node_fleet import fleet_config as node_config
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.config import tap_name
from evio.tunnel.errors import SetupError
from evio.tunnel.session import TunnelDown, TunnelEvent, TunnelUp


class MeshController:
    """Links to every peer it learns of (the lower id dials); reports LinkUp/LinkDown like the real one."""

    instances: dict[tuple[str, int], MeshController] = {}

    def __init__(self, plan: OverlayPlan, node_id: int, signaling: Signaling, links: LinkManager) -> None:
        self.overlay = plan.id
        self.node_id = node_id
        self.signaling = signaling
        self.links = links
        self.subscribers: list[Callable[[Any], None]] = []
        self.up: dict[int, LinkInfo] = {}
        self.on_demand: list[tuple[str, int]] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopped = False
        MeshController.instances[(plan.id, node_id)] = self

    async def start(self) -> None:
        async def hello(overlay: str, peer: int, body: Body) -> Body:
            return {"overlay": overlay}

        self.signaling.register_handler("test.hello", hello)
        self.signaling.subscribe(PeerAdded, self._peer_added)
        self.signaling.subscribe(PeerRemoved, lambda e: None)

    def expects_tunnel(self, peer: int) -> bool:
        return True  # a full mesh: every peer may dial

    def _peer_added(self, event: PeerAdded) -> None:
        if event.overlay == self.overlay and self.node_id < event.node_id and not self.stopped:
            task = asyncio.get_running_loop().create_task(self._dial(event.node_id))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _dial(self, peer: int) -> None:
        try:
            await self.links.connect(peer)
        except SetupError:
            pass

    async def stop(self) -> None:
        self.stopped = True
        for task in list(self.tasks):
            task.cancel()
        for peer in list(self.up):
            await self.links.disconnect(peer)

    def on_tunnel_event(self, event: TunnelEvent) -> None:
        info = event.info
        if isinstance(event, TunnelUp) and info.tap:
            self.up[info.peer] = LinkInfo(info.peer, LinkType.SUCCESSOR, LinkState.UP, info.tap, 0.0)
            self._publish(LinkUp(info.peer, LinkType.SUCCESSOR, info.tap))
        elif isinstance(event, TunnelDown) and self.up.pop(info.peer, None) is not None:
            self._publish(LinkDown(info.peer, info.tap or "", info.reason or "down"))

    def _publish(self, event: Any) -> None:
        for callback in list(self.subscribers):
            callback(event)

    def subscribe(self, callback: Callable[[Any], None]) -> Any:
        self.subscribers.append(callback)
        owner = self

        class Sub:
            def cancel(self) -> None:
                if callback in owner.subscribers:
                    owner.subscribers.remove(callback)

        return Sub()

    def adjacency(self) -> dict[int, LinkInfo]:
        return dict(self.up)

    def request_on_demand(self, peer: int) -> None:
        self.on_demand.append(("wanted", peer))

    def release_on_demand(self, peer: int) -> None:
        self.on_demand.append(("idle", peer))


def mesh_fleet(count: int, overlays: tuple[str, ...] = ("ov1",)) -> Fleet:
    return Fleet(count, overlays, controller_factory=MeshController, clock=VirtualClock())


def bridge_ports(fleet: Fleet, i: int, bridge: str = "evbr-ov1") -> set[str]:
    return fleet.bridge_ports(i, bridge)


async def test_links_become_bridge_ports_and_sdn_peer_ports_in_that_order() -> None:
    fleet = mesh_fleet(4)
    await fleet.start()
    try:
        # Full mesh of 4: every node has 3 links, each a TAP on its bridge, and the SDN side knows the peer.
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 3 for i in fleet.nodes), clock=fleet.clock)
        for i, platform in fleet.platforms.items():
            platform.sdn.sync()
            stack = fleet.nodes[i].overlays["ov1"]
            taps = {info.tap: peer for peer, info in stack.controller.adjacency().items()}
            assert bridge_ports(fleet, i) == set(taps)
            assert {tap: peer for (ov, tap), peer in platform.sdn.peer_ports.items()} == taps
            assert set(platform.sdn.attached) == {"ov1"}
            ups = [c for c in platform.sdn.history if isinstance(c, PeerPortUp)]
            add_ports = [c for c in platform.ovsdb.calls if "add-port" in c]
            assert len(ups) == len(add_ports) == 3
            # The SDN side hears of a TAP before the bridge gets it (the port must come up as a peer port).
            first_add = platform.ovsdb.calls.index(add_ports[0])
            assert platform.ovsdb.calls[first_add][-1] == ups[0].port_name
            row = platform.ovsdb.bridges["evbr-ov1"]
            assert row.datapath_type == "netdev" and row.up and row.addresses == [f"10.254.0.{i}/16"]
            assert any(s.startswith("other_config:datapath-id=") for s in row.settings)
    finally:
        await fleet.stop_all()


async def test_an_stp_overlay_puts_the_same_taps_on_an_rstp_bridge_and_tells_the_sdn_controller_nothing() -> None:
    fleet = Fleet(3, controller_factory=MeshController, clock=VirtualClock(), switching="stp")
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        for i, platform in fleet.platforms.items():
            platform.sdn.sync()
            assert platform.sdn.history == []  # no attach, no peer ports: OVS switches on its own
            row = platform.ovsdb.bridges["evbr-ov1"]
            assert "rstp_enable=true" in row.settings and "fail_mode=standalone" in row.settings
            assert not any(c[:1] == ["set-controller"] for c in platform.ovsdb.calls)
            status = overlay_status(fleet.nodes[i].overlays["ov1"])
            assert (status["switching"], status["bridge_ready"], status["switch_connected"]) == ("stp", True, False)
        assert await fleet.stop(1) is None
        assert fleet.platforms[1].ovsdb.bridges == {}
    finally:
        await fleet.stop_all()


async def test_stop_leaves_no_bridge_port_or_sdn_state_and_peers_drop_their_ports() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        assert await fleet.stop(2) is None
        platform = fleet.platforms[2]
        platform.sdn.sync()
        assert platform.ovsdb.bridges == {}
        assert platform.sdn.attached == {} and platform.sdn.peer_ports == {}
        assert not platform.links_made["ov1"].tunnels() and not platform.links_made["ov1"].running
        assert all(not c.connected for c in platform.clients)
        downs = [c for c in platform.sdn.history if isinstance(c, PeerPortDown)]
        assert len(downs) == 2
        # The others lose their tunnel to node 2 and take its TAP off their bridges.
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 1 for i in (1, 3)), clock=fleet.clock)
        assert all(tap_name("evt", nid(2)) not in bridge_ports(fleet, i) for i in (1, 3))
    finally:
        await fleet.stop_all()


async def test_a_bridge_that_cannot_be_made_fails_the_start_and_leaves_nothing() -> None:
    fleet = mesh_fleet(1)
    platform = fleet.platforms[1]
    platform.ovsdb.fail("add-br")
    with pytest.raises(StartupError, match="overlay ov1"):
        await fleet.nodes[1].run()
    platform.sdn.sync()
    assert platform.ovsdb.bridges == {}
    assert any("del-br" in call for call in platform.ovsdb.calls)  # a half-made bridge is removed too
    assert platform.sdn.attached == {}
    assert all(not c.connected for c in platform.clients)


async def test_the_sdn_controller_dying_stops_the_node_with_a_reason_and_a_clean_teardown() -> None:
    fleet = mesh_fleet(2)
    await fleet.start()
    await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 1 for i in fleet.nodes), clock=fleet.clock)
    fleet.platforms[1].sdn.crash("os-ken stopped: boom")
    reason = await fleet.ended(1, 5)
    assert reason is not None and "boom" in reason
    assert fleet.platforms[1].ovsdb.bridges == {}
    await fleet.stop_all()


async def test_a_port_that_ovs_refuses_is_counted_and_the_node_goes_on() -> None:
    fleet = mesh_fleet(3)
    fleet.platforms[1].ovsdb.fail("add-port")
    await fleet.start()
    try:
        await wait_until(lambda: fleet.nodes[1].overlays["ov1"].port_errors == 1, clock=fleet.clock)
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in (2, 3)), clock=fleet.clock)
        # The refused port is put on the bridge once OVS takes changes again (a reconcile, not an operator).
        await wait_until(lambda: len(bridge_ports(fleet, 1)) == 2, 5, clock=fleet.clock)
        assert fleet.nodes[1].overlays["ov1"].port_errors == 1
    finally:
        await fleet.stop_all()


async def test_port_changes_refused_while_ovsdb_is_down_are_reconciled_when_it_is_back() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        fleet.platforms[1].ovsdb.fail("del-port", times=1)
        fleet.platforms[1].ovsdb.fail("list-ports", times=2)  # the first reconciles find ovsdb still gone
        assert await fleet.stop(3) is None
        await wait_until(lambda: fleet.nodes[1].overlays["ov1"].port_errors == 1, clock=fleet.clock)
        assert tap_name("evt", nid(3)) in bridge_ports(fleet, 1)  # left behind for now
        await wait_until(lambda: bridge_ports(fleet, 1) == {tap_name("evt", nid(2))}, 6, clock=fleet.clock)
    finally:
        await fleet.stop_all()


async def test_sdn_events_reach_the_overlay_controller_and_the_status() -> None:
    fleet = mesh_fleet(2)
    await fleet.start()
    try:
        await wait_until(lambda: len(bridge_ports(fleet, 1)) == 1, clock=fleet.clock)
        sdn = fleet.platforms[1].sdn
        tap = next(iter(bridge_ports(fleet, 1)))
        sdn.emit(SwitchConnected("ov1", 1))
        sdn.emit(PortAdded("ov1", 7, tap, "peer", nid(2)))
        sdn.emit(OnDemandWanted("ov1", nid(5), 2e6))
        sdn.emit(OnDemandIdle("ov1", nid(5)))
        sdn.emit(OnDemandWanted("other-overlay", nid(6), 2e6))  # not ours: ignored
        controller = MeshController.instances[("ov1", nid(1))]
        await wait_until(lambda: len(controller.on_demand) == 2, clock=fleet.clock)
        assert controller.on_demand == [("wanted", nid(5)), ("idle", nid(5))]
        status = fleet.nodes[1].status()
        ov = status["overlays"]["ov1"]
        assert status["node_id"] == f"{nid(1):032x}"
        assert ov["switch_connected"] is True
        (link,) = ov["links"]
        assert {key: link[key] for key in ("peer", "peer_name", "type", "state", "tap", "port", "on_bridge", "path",
                                           "setup_seconds", "mtu", "tx", "rx", "drops", "rtt_ms")} == {
            "peer": f"{nid(2):032x}", "peer_name": f"node2@{DOMAIN}", "type": "successor", "state": "up", "tap": tap,
            "port": 7, "on_bridge": True, "path": "direct", "setup_seconds": 0.0, "mtu": 1428,
            "tx": {"bytes": 0, "frames": 0, "tap_reads": 0, "super_frames": 0},
            "rx": {"bytes": 0, "frames": 0, "tap_writes": 0, "super_frames": 0, "transit_frames": 0}, "drops": {}, "rtt_ms": None,
        }
        assert ov["link_counts"] == {"successor": 1}
        assert ov["signal"]["connected"] is True and ov["signal"]["reconnects"] == 0
        assert ov["signal"]["connected_since"] is not None
        assert status["version"] == 1
        assert ov["link_events"]["up"] == 1 and ov["link_events"]["down"] == 0
        assert ov["peers"] == {f"{nid(2):032x}": f"node2@{DOMAIN}/evio-{nid(2):032x}"}
    finally:
        await fleet.stop_all()


async def test_two_overlays_on_one_account_get_their_own_bridges_handlers_and_taps() -> None:
    fleet = mesh_fleet(2, overlays=("ova", "ovb"))
    await fleet.start()
    try:
        for bridge in ("evbr-ova", "evbr-ovb"):
            await wait_until(
                lambda b=bridge: all(len(bridge_ports(fleet, i, b)) == 1 for i in fleet.nodes),  # type: ignore[misc]
                clock=fleet.clock,
            )
        node = fleet.nodes[1]
        assert len(node.accounts) == 1  # one login serves both overlays
        (port_a,), (port_b,) = bridge_ports(fleet, 1, "evbr-ova"), bridge_ports(fleet, 1, "evbr-ovb")
        assert port_a != port_b  # per-overlay TAP prefixes
        client = fleet.platforms[2].clients[0]
        for overlay in ("ova", "ovb"):
            assert await client.request(overlay, nid(1), "test.hello", {}) == {"overlay": overlay}
    finally:
        await fleet.stop_all()


async def test_control_api_answers_status_and_goes_away_with_the_node(tmp_path: Path) -> None:
    hub, links = FakeSignalHub(), FakeLinkHub()
    hub.set_group("ov1", [f"node1@{DOMAIN}"])
    plan = plan_node(node_config(1), nid(1), controller_port=6653, kernel_module_loaded=True)
    sock = tmp_path / "control.sock"
    node = Node(plan, FakePlatform(hub, links, controller_factory=MeshController), control_socket=sock)
    run = asyncio.create_task(node.run())
    await wait_until(lambda: node.ready.is_set())
    status = await asyncio.to_thread(query, sock, "status")
    assert status["node_id"] == f"{nid(1):032x}"
    assert status["overlays"]["ov1"]["datapath"] == "system"  # the kernel module "is loaded" here
    node.stop()
    assert await run is None
    assert not sock.exists()


async def test_tap_ports_left_by_a_killed_run_are_removed_at_start_and_other_ports_kept() -> None:
    fleet = mesh_fleet(1)
    ovsdb = fleet.platforms[1].ovsdb
    await ovsdb.run(["ovs-vsctl", "add-br", "evbr-ov1"])
    for port in (tap_name("evt", nid(2)), "evt0123456789ab", "vm-app0"):
        await ovsdb.run(["ovs-vsctl", "add-port", "evbr-ov1", port])
    await fleet.start()
    try:
        assert bridge_ports(fleet, 1) == {"vm-app0"}
    finally:
        await fleet.stop_all()


async def test_a_second_daemon_on_the_same_state_dir_touches_nothing(tmp_path: Path) -> None:
    hub, links = FakeSignalHub(), FakeLinkHub()
    hub.set_group("ov1", [f"node1@{DOMAIN}"])
    plan = plan_node(node_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    sock = tmp_path / "control.sock"
    first_platform = FakePlatform(hub, links, controller_factory=MeshController)
    first = Node(plan, first_platform, control_socket=sock)
    run = asyncio.create_task(first.run())
    await wait_until(lambda: first.ready.is_set())
    second_platform = FakePlatform(hub, links, controller_factory=MeshController)
    second_platform.ovsdb = first_platform.ovsdb  # the same OVS
    with pytest.raises(Exception, match="another daemon"):
        await Node(plan, second_platform, control_socket=sock).run()
    assert "evbr-ov1" in first_platform.ovsdb.bridges and sock.exists()
    first.stop()
    await run


async def test_startup_objects_are_frozen_while_the_node_runs_and_released_after() -> None:
    # Full collections over what startup made take 40-60 ms and stall the data path.
    gc.unfreeze()
    hub, links = FakeSignalHub(), FakeLinkHub()
    hub.set_group("ov1", [f"node1@{DOMAIN}"])
    plan = plan_node(node_config(1), nid(1), controller_port=6653, kernel_module_loaded=True)
    node = Node(plan, FakePlatform(hub, links, controller_factory=MeshController))
    run = asyncio.create_task(node.run())
    try:
        await wait_until(lambda: node.ready.is_set())
        assert gc.get_freeze_count() > 1000  # at least the node's own objects and the modules loaded
    finally:
        node.stop()
        assert await run is None
    assert gc.get_freeze_count() == 0


async def test_a_peer_whose_presence_goes_is_probed_and_a_dead_one_loses_its_port_at_once() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        # Node 3's XMPP session drops but its tunnels live: the probes leave them alone.
        await fleet.platforms[3].clients[0].stop()
        await wait_until(lambda: fleet.platforms[1].links_made["ov1"].probes >= 1, clock=fleet.clock)
        await fleet.clock.advance(0.05)  # type: ignore[attr-defined]
        assert len(bridge_ports(fleet, 1)) == 2
        # Node 2 dies (kill -9): its server session closes with it; its tunnels would time out only after 60 s.
        fleet.link_hub.network("ov1").vanish(nid(2), dead_after=60)
        await fleet.platforms[2].clients[0].stop()
        await wait_until(lambda: tap_name("evt", nid(2)) not in bridge_ports(fleet, 1), 2, clock=fleet.clock)
        assert tap_name("evt", nid(3)) in bridge_ports(fleet, 1)
    finally:
        await fleet.stop_all()


async def test_a_dead_link_leaves_the_sdn_side_at_once_even_while_another_port_is_still_being_added() -> None:
    """The port worker applies bridge changes one by one, and an add-port may take 0.1-0.3 s under load (a
    stand-in's, in E4): the SDN side must not wait for it to stop sending frames into a dead link's TAP."""
    fleet = mesh_fleet(3)
    gate = asyncio.Event()
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        platform = fleet.platforms[1]
        controller = MeshController.instances[("ov1", nid(1))]
        run = platform.ovsdb.run
        adding: list[str] = []

        async def slow_add_port(argv: Any) -> str:
            if "add-port" in argv:
                adding.append(argv[-1])
                await gate.wait()
            return await run(argv)

        platform.ovsdb.run = slow_add_port  # type: ignore[method-assign]
        dead, stand_in = tap_name("evt", nid(2)), tap_name("evt", nid(9))
        controller._publish(LinkUp(nid(9), LinkType.SUCCESSOR, stand_in))
        await wait_until(lambda: stand_in in adding, clock=fleet.clock)
        controller._publish(LinkDown(nid(2), dead, "peer-silent"))
        # One turn of the loop, and the stand-in's add-port still blocked: the dead port is out of the SDN side.
        await asyncio.sleep(0)
        platform.sdn.sync()
        assert PeerPortDown("ov1", dead) in platform.sdn.history and ("ov1", dead) not in platform.sdn.peer_ports
        assert dead in bridge_ports(fleet, 1)  # the bridge's own change waits its turn
        # A link that goes down while its own TAP is being added is left to the worker: told early, the SDN
        # side would see the port arrive with no peer behind it and take it for a host's.
        controller._publish(LinkDown(nid(9), stand_in, "peer-silent"))
        platform.sdn.sync()
        assert ("ov1", stand_in) in platform.sdn.peer_ports
        gate.set()
        await wait_until(lambda: bridge_ports(fleet, 1) == {tap_name("evt", nid(3))}, clock=fleet.clock)
        platform.sdn.sync()
        assert {tap for (_, tap) in platform.sdn.peer_ports} == {tap_name("evt", nid(3))}
    finally:
        gate.set()
        await fleet.stop_all()


async def test_the_sdn_side_is_told_the_overlays_members_and_a_revoked_one_leaves_them() -> None:
    fleet = mesh_fleet(3)
    await fleet.start()
    try:
        await wait_until(lambda: all(len(bridge_ports(fleet, i)) == 2 for i in fleet.nodes), clock=fleet.clock)
        ids = {i: fleet.nodes[i].node_id for i in fleet.nodes}

        def told(i: int) -> frozenset[int] | None:
            platform = fleet.platforms[i]
            platform.sdn.sync()
            sets = [c.members for c in platform.sdn.history if isinstance(c, SetMembers)]
            return sets[-1] if sets else None

        await wait_until(lambda: all(told(i) == frozenset(ids.values()) for i in fleet.nodes), clock=fleet.clock)
        first, gone, other = sorted(fleet.nodes)
        stack = fleet.nodes[first].overlays["ov1"]
        stack._peer_removed(PeerRemoved("ov1", ids[gone], "gone@x", RemovalCause.MEMBERSHIP_REVOKED))
        await wait_until(lambda: told(first) == frozenset(ids.values()) - {ids[gone]}, clock=fleet.clock)
        # Our own session lost: the members stay what they were (the overlay still carries their floods).
        stack._peer_removed(PeerRemoved("ov1", ids[other], "lost@x", RemovalCause.SIGNAL_LOST))
        await fleet.clock.advance(0.1)
        assert ids[other] in (told(first) or ())
    finally:
        await fleet.stop_all()
