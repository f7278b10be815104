"""A real OVS netdev bridge in a namespace, driven by the real os-ken Bounded Flood app.

1. One namespace: private ovsdb-server + ovs-vswitchd, the controller in a
   subprocess, a bridge with two TAP ports; the controller sees the switch and
   classifies the ports (the tunnel TAP as a peer, the other as a leaf).
2. Two namespaces, each a full node (OVS + os-ken + bridge), joined by a
   plain Python TAP<->TAP forwarder standing in for a tunnel: ping across,
   carried by an FRB for the ARP and then by the unicast flows installed.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pytest

from evio.bridge import BridgeConfig, OvsBridge, OvsInstance, SubprocessRunner

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CONTROLLER_PORT = 16653  # each namespace has its own loopback, so every node can use it


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class Node:
    """One namespace with OVS, the controller and a bridge; everything it made is undone by `down`."""

    netns: str
    node_id: int
    base: Path
    peers: dict[str, int] = field(default_factory=dict)  # TAP name -> peer node id
    ovs: OvsInstance | None = None
    controller: subprocess.Popen[bytes] | None = None
    taps: list[str] = field(default_factory=list)
    controller_log: BinaryIO | None = None

    @property
    def bridge_name(self) -> str:
        return self.netns + "br"

    @property
    def events_path(self) -> Path:
        return self.base / "events.jsonl"

    def events(self) -> list[dict]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]

    def up(self, address: str) -> OvsBridge:
        _sh("ip", "netns", "add", self.netns)
        _sh("ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
        self.ovs = OvsInstance(self.base / "ovs", netns=self.netns)
        self.ovs.start()
        argv = ["ip", "netns", "exec", self.netns, sys.executable, "-m", "evio.sdn.ofapp",
                "--node-id", f"{self.node_id:032x}", "--listen-port", str(CONTROLLER_PORT),
                "--events", str(self.events_path)]
        for tap, peer in self.peers.items():
            argv += ["--peer", f"{tap}={peer:032x}"]
        # `ip netns exec` execs the command, so this PID is the controller's own.
        self.controller_log = open(self.base / "controller.log", "wb")  # noqa: SIM115 - closed in down()
        self.controller = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.controller_log)
        bridge = OvsBridge(BridgeConfig(self.bridge_name, CONTROLLER_PORT, address),
                           SubprocessRunner(prefix=["ip", "netns", "exec", self.netns]), "netdev",
                           str(self.ovs.db_socket))
        asyncio.run(bridge.create())
        return bridge

    def add_tap(self, bridge: OvsBridge, name: str) -> None:
        _sh("ip", "netns", "exec", self.netns, "ip", "tuntap", "add", "dev", name, "mode", "tap")
        self.taps.append(name)
        _sh("ip", "netns", "exec", self.netns, "ip", "link", "set", name, "up")
        asyncio.run(bridge.add_port(name))

    def down(self) -> None:
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            try:
                self.controller.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.controller.kill()
                self.controller.wait(timeout=5)
        if self.controller_log is not None:
            self.controller_log.close()
        if self.ovs is not None:
            try:
                self.ovs.vsctl("--if-exists", "del-br", self.bridge_name)
            except Exception:  # noqa: BLE001 - teardown goes on whatever broke
                pass
            self.ovs.stop()
        for tap in self.taps:
            _sh("ip", "netns", "exec", self.netns, "ip", "link", "del", tap, check=False)
        _sh("ip", "netns", "del", self.netns, check=False)


@pytest.fixture
def workdir() -> Iterator[Path]:
    if shutil.which("ovs-vswitchd") is None:
        pytest.skip("Open vSwitch (ovs-vswitchd) is not installed")
    path = Path(tempfile.mkdtemp(prefix="evo", dir="/tmp"))  # short: Unix socket paths live under it
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def nodes(workdir: Path) -> Iterator[list[Node]]:
    made: list[Node] = []
    try:
        yield made
    finally:
        for node in made:
            node.down()
        leftover = _sh("ip", "netns", "list").stdout
        assert not any(n.netns in leftover.split() for n in made), leftover


def unique_prefix() -> str:
    """"evo" and 4 random characters: never another helper's or an earlier run's names."""
    return "evo" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(4))


def test_controller_sees_the_switch_and_classifies_its_ports(workdir: Path, nodes: list[Node]) -> None:
    ns = unique_prefix() + "s"
    peer_id = 0xB0B0 << 100
    node = Node(ns, node_id=0xA0A0 << 100, base=workdir / "a", peers={f"{ns}t1": peer_id})
    node.base.mkdir()
    nodes.append(node)
    bridge = node.up("10.77.0.1/24")
    wait_for(lambda: any(e["event"] == "switch_features" for e in node.events()), 15, "switch features")

    node.add_tap(bridge, f"{ns}t1")  # a tunnel TAP: the controller was told its peer
    node.add_tap(bridge, f"{ns}t2")  # an app TAP: a leaf

    def port_events() -> dict[str, dict]:
        return {e["name"]: e for e in node.events() if e["event"] == "port_added"}

    wait_for(lambda: {f"{ns}t1", f"{ns}t2", node.bridge_name} <= set(port_events()), 15, "port events")
    ports = port_events()
    assert ports[f"{ns}t1"]["kind"] == "peer" and ports[f"{ns}t1"]["peer"] == f"{peer_id:032x}"
    assert ports[f"{ns}t2"]["kind"] == "leaf"
    assert ports[node.bridge_name]["kind"] == "leaf"

    assert node.ovs is not None
    flows = node.ovs.ofctl("dump-flows", node.bridge_name)
    assert "dl_type=0xc0c0" in flows and "actions=CONTROLLER:65535" in flows, flows
    assert "priority=0 actions=CONTROLLER:65535" in flows, flows

    asyncio.run(bridge.remove_port(f"{ns}t2"))
    wait_for(lambda: any(e["event"] == "port_removed" and e["name"] == f"{ns}t2" for e in node.events()),
             15, "port removed event")


# A stand-in for tunnels: copy frames between pairs of TAPs that live in different namespaces.
# TUNSETIFF must run inside the TAP's namespace, so each one is opened after setns into it.
# argv: NS_A TAP_A NS_B TAP_B [NS_C TAP_C NS_D TAP_D ...], joined pairwise.
FORWARDER = r"""
import fcntl, os, select, struct, sys
from pyroute2.netns import setns
root = os.open("/proc/self/ns/net", os.O_RDONLY)
fds = []
for ns, tap in zip(sys.argv[1::2], sys.argv[2::2]):
    setns(ns)
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH", tap.encode(), 0x0002 | 0x1000))  # IFF_TAP|IFF_NO_PI
    fds.append(fd)
    setns(root)
other = {}
for a, b in zip(fds[0::2], fds[1::2]):
    other[a], other[b] = b, a
print("ready", flush=True)
while True:
    for fd in select.select(list(other), [], [])[0]:
        os.write(other[fd], os.read(fd, 65535))
"""


@dataclass
class Ring:
    nodes: list[Node]
    forwarder: subprocess.Popen[bytes]


def bring_up_ring(workdir: Path, made: list[Node], size: int) -> Ring:
    """`size` nodes, ids increasing, each joined to its ring successor by a forwarded TAP pair."""
    prefix = unique_prefix()
    ids = [(i + 1) << 120 for i in range(size)]
    nodes = [Node(f"{prefix}{i}", nid, workdir / str(i)) for i, nid in enumerate(ids)]
    links = []
    for i, node in enumerate(nodes):
        succ = nodes[(i + 1) % size]
        tap_here, tap_there = f"{node.netns}s", f"{succ.netns}p"  # towards successor / predecessor
        node.peers[tap_here], succ.peers[tap_there] = succ.node_id, node.node_id
        links.append((node, tap_here, succ, tap_there))
    bridges = []
    for i, node in enumerate(nodes):
        node.base.mkdir()
        made.append(node)
        bridges.append(node.up(f"10.77.0.{i + 1}/24"))
    for node, bridge in zip(nodes, bridges):
        for tap in node.peers:
            node.add_tap(bridge, tap)
    argv = [sys.executable, "-c", FORWARDER]
    for a, tap_a, b, tap_b in links:
        argv += [a.netns, tap_a, b.netns, tap_b]
    forwarder = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert forwarder.stdout is not None
    line = forwarder.stdout.readline().strip()
    if line != b"ready":
        forwarder.kill()
        raise AssertionError(f"forwarder failed: {forwarder.stderr.read() if forwarder.stderr else b''!r}")
    for node in nodes:
        for tap in node.peers:
            wait_for(lambda: any(e.get("name") == tap and e.get("kind") == "peer" for e in node.events()),  # noqa: B023
                     15, f"{tap} as a peer port")
    return Ring(nodes, forwarder)


@pytest.fixture
def ring_factory(workdir: Path, nodes: list[Node]) -> Iterator[Callable[[int], Ring]]:
    rings: list[Ring] = []

    def make(size: int) -> Ring:
        ring = bring_up_ring(workdir, nodes, size)
        rings.append(ring)
        return ring

    try:
        yield make
    finally:
        for ring in rings:
            ring.forwarder.kill()
            ring.forwarder.wait(timeout=5)


def ping(node: Node, address: str, count: int = 5) -> subprocess.CompletedProcess[str]:
    return _sh("ip", "netns", "exec", node.netns, "ping", "-c", str(count), "-i", "0.2", "-W", "3", address,
               check=False)


def unicast_flows(node: Node) -> list[str]:
    assert node.ovs is not None
    return [f for f in node.ovs.ofctl("dump-flows", node.bridge_name).splitlines() if "dl_dst=" in f]


def test_two_nodes_ping_across_a_forwarded_tunnel(ring_factory: Callable[[int], Ring]) -> None:
    a, b = ring_factory(2).nodes
    result = ping(a, "10.77.0.2")
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    for node in (a, b):
        assert unicast_flows(node), f"no unicast flows on {node.netns}"
    print("\n2 nodes: " + result.stdout.strip().splitlines()[-1])


def test_four_node_ring_pings_across_an_intermediate_node(ring_factory: Callable[[int], Ring]) -> None:
    """Ids increase round the ring a-b-c-d-a, so a and c are not adjacent: the ARP reaches c through
    b or d within its bounds, and the echoes follow unicast flows through an intermediate node.

    Which intermediate carries which direction depends on the last broadcast each side saw (a's ARP
    goes a-b-c; an ARP from c goes c-d-a), so the test asks only that both directions were switched
    by flows on b or d."""
    a, b, c, d = ring_factory(4).nodes
    result = ping(a, "10.77.0.3")
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    mac_a, mac_c = (_sh("ip", "netns", "exec", n.netns, "cat", f"/sys/class/net/{n.bridge_name}/address")
                    .stdout.strip() for n in (a, c))
    directions = set()
    for flow in unicast_flows(b) + unicast_flows(d):
        if f"dl_src={mac_a},dl_dst={mac_c}" in flow:
            directions.add("a->c")
        if f"dl_src={mac_c},dl_dst={mac_a}" in flow:
            directions.add("c->a")
    assert directions == {"a->c", "c->a"}, unicast_flows(b) + unicast_flows(d)
    print("\n4-node ring, 1 intermediate: " + result.stdout.strip().splitlines()[-1])
