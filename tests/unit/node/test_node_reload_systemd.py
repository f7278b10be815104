"""systemd notifications (to a real NOTIFY_SOCKET datagram listener) and config reloads, on fake parts."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from evio.cli.run_cmd import reload_config
from evio.config.model import (
    BridgeConfig,
    Config,
    NodeConfig,
    OnDemandConfig,
    OverlayConfig,
    SignalConfig,
    TopologyConfig,
)
from evio.node.node import Node
from evio.node.plan import NodePlan, plan_node
from evio.node.reload import ReloadRefused, plan_reload
from evio.node.systemd import Notifier, notify_address, watchdog_interval
from evio.sdn.boundary import SetOnDemand
from evio.testing.node_fleet import DOMAIN, Fleet, fleet_config, nid
from evio.testing.waiting import wait_until as until

# -- the datagram protocol ---------------------------------------------------------------------


class Listener:
    """What systemd does with NOTIFY_SOCKET: a datagram socket collecting messages."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.setblocking(False)
        self.messages: list[str] = []

    def drain(self) -> list[str]:
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.messages

    def lines(self) -> list[str]:
        return [line for message in self.drain() for line in message.split("\n")]


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    listening = Listener(str(tmp_path / "notify.sock"))
    yield listening
    listening.sock.close()


def test_notify_address_and_watchdog_interval() -> None:
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert notify_address("@abstract/name") == b"\0abstract/name"
    assert notify_address("") is None and notify_address("@") is None and notify_address("relative") is None
    assert watchdog_interval({"WATCHDOG_USEC": "20000000"}, pid=5) == 10.0
    assert watchdog_interval({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "5"}, pid=5) == 10.0
    assert watchdog_interval({"WATCHDOG_USEC": "20000000", "WATCHDOG_PID": "6"}, pid=5) is None  # for another process
    assert watchdog_interval({"WATCHDOG_USEC": "0"}, pid=5) is None
    assert watchdog_interval({}, pid=5) is None


def test_datagrams_reach_a_path_and_an_abstract_socket(listener: Listener, tmp_path: Path) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    assert notifier.ready("starting") and notifier.watchdog() and notifier.stopping()
    assert notifier.status("3 links") and not notifier.status("3 links")  # unchanged: not sent again
    assert listener.drain() == ["READY=1\nSTATUS=starting", "WATCHDOG=1", "STOPPING=1", "STATUS=3 links"]
    name = f"@evio-test-{os.getpid()}"
    abstract = Listener(notify_address(name) or b"")
    try:
        assert Notifier.from_environment({"NOTIFY_SOCKET": name}).reloading()
        (message,) = abstract.drain()
        assert message.startswith("RELOADING=1\nMONOTONIC_USEC=")
    finally:
        abstract.sock.close()


def test_without_notify_socket_nothing_is_sent_and_a_dead_socket_does_not_raise(tmp_path: Path) -> None:
    assert not Notifier.from_environment({}).ready()
    gone = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not gone.ready() and not gone.watchdog()


async def test_node_sends_ready_after_login_watchdog_status_and_stopping(listener: Listener, tmp_path: Path) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "100000"})
    fleet = Fleet(2)
    plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    fleet.nodes[1] = node = Node(plan, fleet.platforms[1], notifier=notifier)
    await fleet.start()
    try:
        await until(lambda: "READY=1" in listener.lines())
        assert node.notified_ready and all(client.connected for client in node.accounts.values())
        await until(lambda: listener.lines().count("WATCHDOG=1") >= 3)  # every 50 ms, from the loop
        await until(lambda: "STATUS=ov1: 1 links up, signaling up" in listener.lines())
    finally:
        await fleet.stop_all()
    assert listener.lines()[-1] == "STOPPING=1" or "STOPPING=1" in listener.lines()


# -- reload plans (pure) -------------------------------------------------------------------------


def two_overlay_config(index: int, second: bool = True, topology: TopologyConfig | None = None,
                       ov2_jid: str | None = None) -> Config:
    base = fleet_config(index)
    overlays = dict(base.overlays)
    if topology is not None:
        overlays["ov1"] = dataclasses.replace(overlays["ov1"], topology=topology)
    if second:
        overlays["ov2"] = OverlayConfig(
            id="ov2",
            signal=SignalConfig(jid=ov2_jid or f"b-node{index}@{DOMAIN}", server="127.0.0.1", password="pw"),
            bridge=BridgeConfig(name="evbr-ov2", address=ipaddress.IPv4Interface(f"10.200.0.{index}/16")),
        )
    return Config(overlays=overlays, node=NodeConfig(id=nid(index)))


def plan_of(config: Config, index: int = 1) -> NodePlan:
    return plan_node(config, nid(index), controller_port=6653, kernel_module_loaded=False)


def test_reload_plan_of_an_unchanged_config_changes_nothing() -> None:
    plan = plan_of(two_overlay_config(1))
    change = plan_reload(plan, plan_of(two_overlay_config(1)))
    assert change.changes_nothing and change.summary() == "nothing changed"


def test_reload_plan_adds_removes_and_keeps_tap_prefixes() -> None:
    one = plan_of(two_overlay_config(1, second=False))
    two = plan_of(two_overlay_config(1))
    added = plan_reload(one, two)
    assert (added.added, added.removed, added.restarted) == (("ov2",), (), ())
    assert added.accounts_started == (f"b-node1@{DOMAIN}",) and added.accounts_stopped == ()
    removed = plan_reload(two, one)
    assert removed.removed == ("ov2",) and removed.accounts_stopped == (f"b-node1@{DOMAIN}",)
    # ov1 removed while ov2 stays: ov2 keeps its TAP prefix though it is now first in the file.
    only_second = Config(overlays={"ov2": two_overlay_config(1).overlays["ov2"]}, node=NodeConfig(id=nid(1)))
    change = plan_reload(two, plan_of(only_second))
    (kept,) = change.plan.overlays
    assert change.removed == ("ov1",) and kept.tunnel.tap_prefix == two.overlays[1].tunnel.tap_prefix == "ev1"


def test_reload_plan_applies_topology_to_a_kept_overlay_and_restarts_for_a_shared_account() -> None:
    plan = plan_of(two_overlay_config(1))
    change = plan_reload(plan, plan_of(two_overlay_config(1, topology=TopologyConfig(successors=1))))
    assert change.topology == {"ov1": TopologyConfig(successors=1)} and not change.restarted
    # ov2 moves onto ov1's account: that login's memberships change, so both overlays restart.
    shared = plan_reload(plan, plan_of(two_overlay_config(1, ov2_jid=f"node1@{DOMAIN}")))
    assert set(shared.restarted) == {"ov1", "ov2"}
    with pytest.raises(ReloadRefused, match="node id"):
        plan_reload(plan, plan_of(two_overlay_config(2), index=2))


# -- reloads of a running node (fakes) ---------------------------------------------------------------


def two_overlay_fleet(count: int) -> Fleet:
    fleet = Fleet(count)
    fleet.signal_hub.set_group("ov2", [f"b-node{i}@{DOMAIN}" for i in range(1, count + 1)])
    return fleet


def links_up(node: Node, overlay: str) -> set[int]:
    stack = node.overlays.get(overlay)
    if stack is None:
        return set()
    return {peer for peer, info in stack.controller.adjacency().items() if info.state.value == "up"}


async def test_reload_adds_an_overlay_without_touching_the_first_and_removes_it_again() -> None:
    fleet = two_overlay_fleet(3)
    await fleet.start()
    try:
        await until(lambda: all(len(links_up(n, "ov1")) == 2 for n in fleet.nodes.values()), 10)
        first = fleet.nodes[1].overlays["ov1"]
        tunnels_before = dict(fleet.platforms[1].links_made["ov1"].tunnels())
        ups_before = first.link_ups
        unchanged = await fleet.nodes[1].reload(plan_of(fleet_config(1)))
        assert unchanged.changes_nothing and fleet.nodes[1].reloads == 1
        for i, node in fleet.nodes.items():
            change = await node.reload(plan_of(two_overlay_config(i), i))
            assert change.added == ("ov2",) and change.restarted == ()
        await until(lambda: all(len(links_up(n, "ov2")) == 2 for n in fleet.nodes.values()), 10)
        assert fleet.nodes[1].overlays["ov1"] is first  # the same stack, never restarted
        assert fleet.platforms[1].links_made["ov1"].tunnels() == tunnels_before and first.link_ups == ups_before
        assert list(fleet.nodes[1].overlays) == ["ov1", "ov2"]
        assert "evbr-ov2" in fleet.platforms[1].ovsdb.bridges
        change = await fleet.nodes[1].reload(plan_of(fleet_config(1)))
        assert change.removed == ("ov2",)
        assert "evbr-ov2" not in fleet.platforms[1].ovsdb.bridges and list(fleet.nodes[1].accounts) == [f"node1@{DOMAIN}"]
        assert fleet.platforms[1].links_made["ov1"].tunnels() == tunnels_before
    finally:
        await fleet.stop_all()


async def test_reload_applies_topology_and_tunnel_settings_to_the_running_overlay() -> None:
    fleet = Fleet(2)
    await fleet.start()
    try:
        await until(lambda: len(links_up(fleet.nodes[1], "ov1")) == 1, 10)
        base = fleet_config(1)
        ov1 = dataclasses.replace(base.overlays["ov1"], topology=TopologyConfig(successors=3),
                                  tunnel=dataclasses.replace(base.overlays["ov1"].tunnel, keepalive=1.0))
        change = await fleet.nodes[1].reload(plan_of(dataclasses.replace(base, overlays={"ov1": ov1})))
        assert set(change.topology) == {"ov1"} and set(change.tunnel) == {"ov1"}
        stack = fleet.nodes[1].overlays["ov1"]
        assert stack.controller.topology == TopologyConfig(successors=3)  # type: ignore[attr-defined]
        assert fleet.platforms[1].links_made["ov1"].reconfigured == [change.tunnel["ov1"]]
        assert len(links_up(fleet.nodes[1], "ov1")) == 1
        # New on-demand settings reach the SDN side too: it is the one that asks for on-demand links.
        sdn = fleet.platforms[1].sdn
        sdn.sync()
        assert sdn.attached["ov1"].on_demand == OnDemandConfig()
        on_demand = OnDemandConfig(threshold_bytes_per_s=5e5, idle_timeout=7.0)
        ov1 = dataclasses.replace(ov1, topology=TopologyConfig(successors=3, on_demand=on_demand))
        await fleet.nodes[1].reload(plan_of(dataclasses.replace(base, overlays={"ov1": ov1})))
        sdn.sync()
        assert sdn.attached["ov1"].on_demand == on_demand
        assert [c for c in sdn.history if isinstance(c, SetOnDemand)] == [SetOnDemand("ov1", on_demand)]
    finally:
        await fleet.stop_all()


async def test_sighup_with_an_invalid_config_logs_its_json_path_and_keeps_the_running_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fleet = Fleet(1)
    await fleet.start()
    node = fleet.nodes[1]
    try:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"overlays": {"ov1": {"signal": {"jid": "node1@x.test", "password": "pw"},
                                                          "bridge": {"name": "evbr-ov1", "mtu": 99999}}}}))
        running = fleet_config(1)
        with caplog.at_level(logging.ERROR):
            await reload_config(node, str(path), running, 6653, False)
        assert "$.overlays.ov1.bridge.mtu" in caplog.text and "the running config stays" in caplog.text
        assert node.reloads == 0 and list(node.overlays) == ["ov1"]
        path.write_text("{ not json")
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            await reload_config(node, str(path), running, 6653, False)
        assert "reload refused" in caplog.text and node.reloads == 0
    finally:
        await fleet.stop_all()
    await asyncio.sleep(0)


async def test_reload_restarts_an_overlay_whose_bridge_changed_on_the_same_account() -> None:
    fleet = Fleet(2)
    await fleet.start()
    try:
        await until(lambda: all(len(links_up(n, "ov1")) == 1 for n in fleet.nodes.values()), 10)
        first = fleet.nodes[1].overlays["ov1"]
        base = fleet_config(1)
        bridge = dataclasses.replace(base.overlays["ov1"].bridge, mtu=1300)
        ov1 = dataclasses.replace(base.overlays["ov1"], bridge=bridge)
        change = await fleet.nodes[1].reload(plan_of(dataclasses.replace(base, overlays={"ov1": ov1})))
        assert change.restarted == ("ov1",) and change.accounts_stopped == ()
        assert fleet.nodes[1].overlays["ov1"] is not first
        await until(lambda: len(links_up(fleet.nodes[1], "ov1")) == 1, 10)  # handlers registered again, ring back
    finally:
        await fleet.stop_all()


async def test_every_reload_is_framed_by_reloading_and_ready(listener: Listener, tmp_path: Path) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    fleet = Fleet(1)
    plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    fleet.nodes[1] = node = Node(plan, fleet.platforms[1], notifier=notifier)
    await fleet.start()
    try:
        await until(lambda: "READY=1" in listener.lines())
        count = len(listener.drain())
        assert (await node.reload(plan_of(fleet_config(1)))).changes_nothing
        after = listener.drain()[count:]
        assert after[0].startswith("RELOADING=1\nMONOTONIC_USEC=") and after[1].startswith("READY=1")
    finally:
        await fleet.stop_all()


async def test_watchdog_runs_while_logging_in_and_ready_waits_for_the_login(listener: Listener, tmp_path: Path) -> None:
    notifier = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "100000"})
    fleet = Fleet(1)
    fleet.signal_hub.stop_server()  # the XMPP server is down: no login yet
    plan = plan_node(fleet_config(1), nid(1), controller_port=6653, kernel_module_loaded=False)
    fleet.nodes[1] = node = Node(plan, fleet.platforms[1], notifier=notifier)
    await fleet.start()
    try:
        await until(lambda: listener.lines().count("WATCHDOG=1") >= 3)
        assert "READY=1" not in listener.lines() and not node.notified_ready
        fleet.signal_hub.start_server()
        await until(lambda: "READY=1" in listener.lines())
    finally:
        await fleet.stop_all()
