"""Attached host ports (issue 23): the config's `attach`, `evio attach`/`detach` through the control socket,
reload and stop, on a node over fakes (FakeOvsdb plays `ip` and `ovs-vsctl`); the checks and parsers alone."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from evio.bridge.host_ports import (
    HostInterface,
    attach_refusal,
    default_route_devices,
    interface_counters,
    parse_link,
    parse_proc_net_dev,
)
from evio.cli import main
from evio.config.loader import ConfigError, loads_config
from evio.node.control import ControlError, query
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.testing.fake_node import FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.node_fleet import DOMAIN, fleet_config, nid
from evio.testing.waiting import wait_until

# -- the checks, pure ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (HostInterface("vethc1"), None),
        (HostInterface("vethc1", ovs_bridge="evbr-ov1"), None),  # left on our bridge by a killed daemon
        (HostInterface("vethc1", master="ovs-system", ovs_bridge="evbr-ov1"), None),  # the kernel datapath's
        (HostInterface("nope", exists=False), "no interface 'nope' on this host"),
        (HostInterface("vethc1", ovs_bridge="br-int"), "already a port of Open vSwitch bridge 'br-int'"),
        (HostInterface("vethc1", master="br0"), "already a port of 'br0'"),
        (HostInterface("br0", kind="bridge"), "is a bridge; attach a veth pair instead"),
        (HostInterface("eth0", uplink=True), "carries a default route"),
        (HostInterface("lo", loopback=True), "is loopback"),
        (HostInterface("evt0011"), "named like evio's tunnel TAPs"),
        (HostInterface("evbr-ov1"), "the overlay's bridge itself"),
    ],
)
def test_attach_refusal_says_why_in_one_line(facts: HostInterface, why: str | None) -> None:
    refusal = attach_refusal(facts, "evbr-ov1")
    if why is None:
        assert refusal is None
    else:
        assert refusal is not None and why in refusal and "\n" not in refusal


def test_facts_from_ip_json() -> None:
    link = parse_link("v1", '[{"ifname": "v1", "flags": ["UP"], "mtu": 1400, "master": "br0", '
                            '"linkinfo": {"info_kind": "veth", "info_slave_kind": "bridge"}}]')
    assert (link.exists, link.kind, link.master, link.mtu, link.loopback) == (True, "veth", "br0", 1400, False)
    assert parse_link("lo", '[{"ifname": "lo", "flags": ["LOOPBACK", "UP"]}]').loopback
    assert not parse_link("x", "[]").exists
    routes = default_route_devices('[{"dst": "default", "dev": "eth0"}]',
                                   '[{"dst": "default", "nexthops": [{"dev": "eth1"}, {"dev": "eth2"}]}]')
    assert routes == {"eth0", "eth1", "eth2"}


PROC_NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
vethc1: 5000 40 0 3 0 0 0 1 7000 50 0 4 0 0 0 0
"""


def test_counters_from_proc_net_dev(tmp_path: Path) -> None:
    counters = parse_proc_net_dev(PROC_NET_DEV)["vethc1"]
    assert counters.as_dict() == {"rx": {"bytes": 5000, "frames": 40, "dropped": 3},
                                  "tx": {"bytes": 7000, "frames": 50, "dropped": 4}}
    (tmp_path / "dev").write_text(PROC_NET_DEV)
    assert set(interface_counters(["vethc1", "gone"], tmp_path / "dev")) == {"vethc1"}


# -- the config ------------------------------------------------------------------------------------------------


def _config(attach: dict[str, Any]) -> str:
    import json

    overlays = {ov: {"signal": {"jid": f"n@{DOMAIN}", "password": "pw"}, "attach": names} for ov, names in attach.items()}
    return json.dumps({"overlays": overlays})


def test_the_config_takes_a_list_of_interfaces() -> None:
    config = loads_config(_config({"ov1": ["vethc1", "tap-vm1"]}))
    assert config.overlays["ov1"].attach == ("vethc1", "tap-vm1")
    assert loads_config(_config({"ov1": []})).overlays["ov1"].attach == ()


@pytest.mark.parametrize(
    ("attach", "path", "why"),
    [
        ({"ov1": ["ok0", "bad/name"]}, "$.overlays.ov1.attach[1]", "is not an interface name"),
        ({"ov1": ["x" * 16]}, "$.overlays.ov1.attach[0]", "is not an interface name"),
        ({"ov1": ["v0", "v0"]}, "$.overlays.ov1.attach", "unique"),
        ({"ov1": ["v0"], "ov2": ["v1", "v0"]}, "$.overlays.ov2.attach[1]", "already attached to overlay 'ov1'"),
        ({"ov1": ["evbr-ov2"], "ov2": []}, "$.overlays.ov1.attach[0]", "the bridge of overlay 'ov2'"),
        ({"ov1": ["evt1234"]}, "$.overlays.ov1.attach[0]", "evio's tunnel TAPs"),
        ({"ov1": "v0"}, "$.overlays.ov1.attach", "expected array"),
    ],
)
def test_a_bad_entry_is_named_by_its_json_path(attach: dict[str, Any], path: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        loads_config(_config(attach))
    assert any(p.path == path and why in p.reason for p in caught.value.problems), caught.value.problems


# -- a node over fakes -----------------------------------------------------------------------------------------


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[Node, FakePlatform, Path]]:
    hub, links = FakeSignalHub(), FakeLinkHub()
    hub.set_group("ov1", [f"node1@{DOMAIN}"])
    config = fleet_config(1)
    config = dataclasses.replace(config, overlays={"ov1": dataclasses.replace(config.overlays["ov1"],
                                                                              attach=("vethc1", "tapvm1"))})
    plan = plan_node(config, nid(1), controller_port=6653, kernel_module_loaded=True)
    platform = FakePlatform(hub, links)
    ovsdb = platform.ovsdb
    ovsdb.add_host_link("vethc1", linkinfo={"info_kind": "veth"}, mtu=1400)  # tapvm1: the VM is not up yet
    ovsdb.add_host_link("eth0")
    ovsdb.default_routes = {"eth0"}
    ovsdb.add_host_link("vethlan", master="br-lan", linkinfo={"info_kind": "veth"})
    ovsdb.add_host_link("vethfree", linkinfo={"info_kind": "veth"})
    ovsdb.add_host_link("br-lan", linkinfo={"info_kind": "bridge"})
    await ovsdb.run(["ovs-vsctl", "add-br", "br-other"])
    await ovsdb.run(["ovs-vsctl", "add-port", "br-other", "vethovs"])
    ovsdb.add_host_link("vethovs")
    sock = tmp_path / "control.sock"
    node = Node(plan, platform, control_socket=sock, freeze_startup_objects=False)
    run = asyncio.create_task(node.run())
    await wait_until(lambda: node.ready.is_set() or run.done())
    try:
        yield node, platform, sock
    finally:
        node.stop()
        await run


def ask(sock: Path, request: str, interface: str, overlay: str = "ov1") -> Any:
    return asyncio.to_thread(query, sock, request, 5.0, {"overlay": overlay, "interface": interface})


async def test_configured_ports_go_on_the_bridge_and_a_missing_one_is_reported(node: Any) -> None:
    n, platform, sock = node
    assert platform.ovsdb.ports("evbr-ov1") == ["vethc1"]
    assert "UP" in platform.ovsdb.host_links["vethc1"]["flags"]
    ports = (await asyncio.to_thread(query, sock, "status"))["overlays"]["ov1"]["attached_ports"]
    assert ports["vethc1"]["on_bridge"] and ports["vethc1"]["origin"] == "config" and ports["vethc1"]["mtu"] == 1400
    assert not ports["tapvm1"]["on_bridge"] and "no interface 'tapvm1'" in ports["tapvm1"]["error"]
    # The VM starts, its tap appears: a reload of the same config puts it on.
    platform.ovsdb.add_host_link("tapvm1", linkinfo={"info_kind": "tun"})
    await n.reload(n.plan)
    assert platform.ovsdb.ports("evbr-ov1") == ["vethc1", "tapvm1"]


@pytest.mark.parametrize(
    ("interface", "why"),
    [
        ("nope0", "no interface 'nope0' on this host"),
        ("vethlan", "already a port of 'br-lan'"),
        ("vethovs", "already a port of Open vSwitch bridge 'br-other'"),
        ("eth0", "carries a default route"),
        ("br-lan", "is a bridge"),
        ("vethc1", "already attached to overlay 'ov1'"),
    ],
)
async def test_attach_refuses_bad_input_with_one_line_and_changes_nothing(node: Any, interface: str, why: str) -> None:
    _, platform, sock = node
    calls = len(platform.ovsdb.calls)
    with pytest.raises(ControlError, match=why):
        await ask(sock, "attach", interface)
    assert platform.ovsdb.ports("evbr-ov1") == ["vethc1"]
    assert not any("add-port" in c or "up" in c for c in platform.ovsdb.calls[calls:])


async def test_attach_and_detach_at_run_time(node: Any) -> None:
    _, platform, sock = node
    answer = await ask(sock, "attach", "vethfree")
    assert answer["on_bridge"] and answer["origin"] == "command"
    assert platform.ovsdb.ports("evbr-ov1") == ["vethc1", "vethfree"]
    await ask(sock, "detach", "vethfree")
    assert platform.ovsdb.ports("evbr-ov1") == ["vethc1"]
    assert "vethfree" in platform.ovsdb.host_links  # off the bridge, not removed from the host
    with pytest.raises(ControlError, match="'vethfree' is not attached to overlay 'ov1'"):
        await ask(sock, "detach", "vethfree")
    with pytest.raises(ControlError, match="no overlay 'ov9'"):
        await ask(sock, "attach", "vethfree", overlay="ov9")
    with pytest.raises(ControlError, match="not an interface name"):
        await ask(sock, "attach", "../../etc")


async def test_a_reload_applies_the_new_list_and_keeps_ports_attached_by_command(node: Any) -> None:
    n, platform, sock = node
    await ask(sock, "attach", "vethfree")
    platform.ovsdb.add_host_link("vethc2", linkinfo={"info_kind": "veth"})
    ov1 = n.plan.overlays[0]
    new = dataclasses.replace(n.plan, overlays=(dataclasses.replace(
        ov1, config=dataclasses.replace(ov1.config, attach=("vethc2",))),))
    change = await n.reload(new)
    assert change.attach == {"ov1": ("vethc2",)} and "new attached ports for ov1" in change.summary()
    assert change.restarted == ()  # the tunnels and the bridge stay
    assert sorted(platform.ovsdb.ports("evbr-ov1")) == ["vethc2", "vethfree"]


async def test_stop_takes_attached_ports_off_and_leaves_the_interfaces(node: Any) -> None:
    n, platform, _ = node
    n.stop()
    await wait_until(lambda: not platform.ovsdb.bridges.get("evbr-ov1"))
    assert any(c[-2:] == ["evbr-ov1", "vethc1"] and "del-port" in c for c in platform.ovsdb.calls)
    assert "vethc1" in platform.ovsdb.host_links


def test_the_cli_says_why_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attach", "ov1", "veth0", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evio attach: no daemon control socket")


ATTACHED_STATUS = {"node_id": "ab" * 16, "pid": 1, "uptime": 5, "overlays": {"ov1": {
    "signal": {"jid": "n@x", "server": "x:5222", "connected": True, "reconnects": 0}, "links": [],
    "attached_ports": {
        "vethc1": {"origin": "config", "on_bridge": True, "error": None, "mtu": 1400, "port": 3,
                   "rx": {"bytes": 5000, "frames": 40, "dropped": 3}, "tx": {"bytes": 7000, "frames": 50, "dropped": 4}},
        "tapvm1": {"origin": "config", "on_bridge": False, "error": "no interface 'tapvm1' on this host", "mtu": None,
                   "port": None, "rx": None, "tx": None},
    },
}}}


def test_attached_ports_in_the_metrics_and_the_status_text() -> None:
    from evio.cli.status_cmd import render_status
    from evio.node.metrics import families

    by_name = {family.name: family for family in families(ATTACHED_STATUS)}
    assert [(s.labels["port"], s.value) for s in by_name["evio_attached_port_up"].samples] == [
        ("tapvm1", 0), ("vethc1", 1)]
    assert [(s.labels["port"], s.value) for s in by_name["evio_attached_port_receive_bytes"].samples] == [
        ("vethc1", 5000)]
    assert [(s.labels["direction"], s.value) for s in by_name["evio_attached_port_dropped_frames"].samples] == [
        ("receive", 3), ("transmit", 4)]
    text = render_status(ATTACHED_STATUS, now=0.0)
    assert "attached ports: 2" in text
    assert any(line.split()[:3] == ["vethc1", "config", "on"] and "5.0kB/40f" in line for line in text.splitlines())
    assert "NOT attached: no interface 'tapvm1' on this host" in text
