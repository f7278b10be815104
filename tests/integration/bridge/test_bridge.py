"""A real OVS netdev bridge in a namespace, driven by the real os-ken Bounded Flood controller.

Each node is a namespace with a private ovsdb-server + ovs-vswitchd, one bridge per overlay and ONE
standalone controller process (`python -m evio.lab.sdn_controller`: asyncio + os-ken thread, the daemon's
layout) serving all of them; nodes are joined by a plain Python TAP<->TAP forwarder standing in
for tunnels.

1. One node: the controller sees the switch and classifies the ports (tunnel TAP peer, other leaf).
2. Two and four nodes in a ring: ping across, carried by an FRB for the ARP, then by unicast flows.
3. Two overlays per node on one controller: both ping, neither's MACs appear on the other's bridge.
4. E2 in small: an IP moves from one node to another; the gratuitous ARP the new node's
   controller process sends brings the ping back; the time is printed.
5. IPv6 put on the bridges by hand crosses a ring (DAD, ND); the bridges make no link-local of their own.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pytest

from evio.bridge import BridgeSpec, OvsBridge, OvsInstance, SubprocessRunner, datapath_id_for
from evio.bridge.ovs_bridge import CONTROLLER_INACTIVITY_PROBE_MS
from evio.bridge.packet_buffers import PORT_RECEIVE_BUFFER
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
CONTROLLER_PORT = 16653  # each namespace has its own loopback, so every node can use it


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=check)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    wait_until_blocking(condition, timeout, what=what, interval=0.05)


@dataclass
class Node:
    """One namespace with OVS, one controller process and a bridge per overlay; `down` undoes it all.

    Overlay names are one letter: the bridge of overlay "r" in namespace "evoab120" is "evoab120r".
    """

    netns: str
    node_id: int
    base: Path
    addresses: dict[str, str] = field(default_factory=lambda: {"o": "10.77.0.1/24"})  # overlay -> address
    peers: dict[str, tuple[str, int]] = field(default_factory=dict)  # TAP name -> (overlay, peer node id)
    ovs: OvsInstance | None = None
    bridges: dict[str, OvsBridge] = field(default_factory=dict)
    controller: subprocess.Popen[bytes] | None = None
    taps: list[str] = field(default_factory=list)
    controller_log: BinaryIO | None = None
    controller_args: list[str] = field(default_factory=list)

    def bridge_name(self, overlay: str = "o") -> str:
        return self.netns + overlay

    @property
    def events_path(self) -> Path:
        return self.base / "events.jsonl"

    def events(self, kind: str | None = None) -> list[dict]:
        if not self.events_path.exists():
            return []
        events = [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]
        return [e for e in events if kind is None or e["event"] == kind]

    def up(self) -> None:
        _sh("ip", "netns", "add", self.netns)
        _sh("ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
        self.ovs = OvsInstance(self.base / "ovs", netns=self.netns)
        self.ovs.start()
        argv = ["ip", "netns", "exec", self.netns, sys.executable, "-m", "evio.lab.sdn_controller",
                "--node-id", f"{self.node_id:032x}", "--listen-port", str(CONTROLLER_PORT),
                "--events", str(self.events_path)]
        for overlay in self.addresses:
            argv += ["--overlay", f"{overlay}={datapath_id_for(overlay):016x}", "--announce", self.bridge_name(overlay)]
        for tap, (overlay, peer) in self.peers.items():
            argv += ["--peer", f"{overlay}:{tap}={peer:032x}"]
        argv += self.controller_args
        # `ip netns exec` execs the command, so this PID is the controller's own.
        self.controller_log = open(self.base / "controller.log", "wb")  # noqa: SIM115 - closed in down()
        self.controller = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.controller_log)
        for overlay, address in self.addresses.items():
            config = BridgeSpec(self.bridge_name(overlay), CONTROLLER_PORT, address,
                                  datapath_id=datapath_id_for(overlay))
            bridge = OvsBridge(config, SubprocessRunner(prefix=["ip", "netns", "exec", self.netns]), "netdev",
                               str(self.ovs.db_socket))
            asyncio.run(bridge.create())
            self.bridges[overlay] = bridge

    def add_tap(self, name: str, overlay: str = "o") -> None:
        _sh("ip", "netns", "exec", self.netns, "ip", "tuntap", "add", "dev", name, "mode", "tap")
        self.taps.append(name)
        _sh("ip", "netns", "exec", self.netns, "ip", "link", "set", name, "up")
        asyncio.run(self.bridges[overlay].add_port(name))

    def mac(self, overlay: str = "o") -> str:
        return _sh("ip", "netns", "exec", self.netns, "cat", f"/sys/class/net/{self.bridge_name(overlay)}/address"
                   ).stdout.strip()

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
            for overlay in self.addresses:
                try:
                    self.ovs.vsctl("--if-exists", "del-br", self.bridge_name(overlay))
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


def packet_socket_receive_buffer(node: Node, port: str) -> int:
    """The receive buffer (ss's `rb`) of vswitchd's packet socket bound to `port`."""
    out = _sh("ip", "netns", "exec", node.netns, "ss", "-0", "-a", "-m", "-p").stdout
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if f"*:{port} " in line and "ovs-vswitchd" in line:
            found = re.search(r"\brb(\d+)", line + (lines[i + 1] if i + 1 < len(lines) else ""))
            assert found, line
            return int(found.group(1))
    raise AssertionError(f"no packet socket of ovs-vswitchd on {port}:\n{out}")


def unique_prefix() -> str:
    """"evo" and 4 random characters: never another helper's or an earlier run's names."""
    return "evo" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(4))


def test_controller_sees_the_switch_and_classifies_its_ports(workdir: Path, nodes: list[Node]) -> None:
    ns = unique_prefix() + "s"
    peer_id = 0xB0B0 << 100
    node = Node(ns, node_id=0xA0A0 << 100, base=workdir / "a", peers={f"{ns}t1": ("o", peer_id)})
    node.base.mkdir()
    nodes.append(node)
    node.up()
    wait_for(lambda: bool(node.events("SwitchConnected")), 15, "switch connected")
    (connected,) = node.events("SwitchConnected")
    assert connected == {"event": "SwitchConnected", "overlay": "o", "datapath_id": f"{datapath_id_for('o'):016x}"}

    node.add_tap(f"{ns}t1")  # a tunnel TAP: the controller was told its peer
    node.add_tap(f"{ns}t2")  # an app TAP: a leaf

    def port_events() -> dict[str, dict]:
        return {e["name"]: e for e in node.events("PortAdded")}

    wait_for(lambda: {f"{ns}t1", f"{ns}t2", node.bridge_name()} <= set(port_events()), 15, "port events")
    ports = port_events()
    assert ports[f"{ns}t1"]["kind"] == "peer" and ports[f"{ns}t1"]["peer"] == f"{peer_id:032x}"
    assert ports[f"{ns}t2"]["kind"] == "leaf"
    assert ports[node.bridge_name()]["kind"] == "leaf"

    assert node.ovs is not None
    flows = node.ovs.ofctl("dump-flows", node.bridge_name())
    assert "dl_type=0xc0c0" in flows and "actions=CONTROLLER:65535" in flows, flows
    # vswitchd reads each TAP through a packet socket; its default 208 KiB buffer drops bursts.
    for tap in (f"{ns}t1", f"{ns}t2"):
        assert packet_socket_receive_buffer(node, tap) >= PORT_RECEIVE_BUFFER
    assert "priority=0 actions=CONTROLLER:65535" in flows, flows
    # vswitchd echoes an idle controller once a minute, not every 5 s (OVS's default).
    probe = node.ovs.vsctl("get", "Controller", node.bridge_name(), "inactivity_probe").strip()
    assert probe == str(CONTROLLER_INACTIVITY_PROBE_MS)

    asyncio.run(node.bridges["o"].remove_port(f"{ns}t2"))
    wait_for(lambda: any(e["name"] == f"{ns}t2" for e in node.events("PortRemoved")), 15, "port removed event")


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


def start_forwarder(pairs: list[tuple[str, str, str, str]]) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", FORWARDER]
    for pair in pairs:
        argv += list(pair)
    forwarder = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert forwarder.stdout is not None
    line = forwarder.stdout.readline().strip()
    if line != b"ready":
        forwarder.kill()
        forwarder.wait(timeout=5)
        raise AssertionError(f"forwarder failed: {forwarder.stderr.read() if forwarder.stderr else b''!r}")
    return forwarder


def wait_for_peer_ports(node: Node) -> None:
    for tap in node.peers:
        wait_for(lambda: any(e["name"] == tap and e["kind"] == "peer" for e in node.events("PortAdded")),  # noqa: B023
                 15, f"{tap} as a peer port")


def bring_up_ring(
    workdir: Path, made: list[Node], size: int, overlays: str = "o", controller_args: Sequence[str] = ()
) -> Ring:
    """`size` nodes, ids increasing, each joined to its ring successor by a forwarded TAP pair per overlay.

    Overlay number j (a letter in `overlays`) uses 10.77.(j).(i+1)/24 on node i.
    """
    prefix = unique_prefix()
    ids = [(i + 1) << 120 for i in range(size)]
    nodes = [Node(f"{prefix}{i}", nid, workdir / str(i),
                  addresses={o: f"10.77.{j}.{i + 1}/24" for j, o in enumerate(overlays)},
                  controller_args=list(controller_args))
             for i, nid in enumerate(ids)]
    links = []
    for i, node in enumerate(nodes):
        succ = nodes[(i + 1) % size]
        for o in overlays:
            tap_here, tap_there = f"{node.netns}{o}s", f"{succ.netns}{o}p"  # towards successor / predecessor
            node.peers[tap_here], succ.peers[tap_there] = (o, succ.node_id), (o, node.node_id)
            links.append((node.netns, tap_here, succ.netns, tap_there))
    for node in nodes:
        node.base.mkdir()
        made.append(node)
        node.up()
    for node in nodes:
        for tap, (overlay, _) in node.peers.items():
            node.add_tap(tap, overlay)
    forwarder = start_forwarder(links)
    for node in nodes:
        wait_for_peer_ports(node)
    return Ring(nodes, forwarder)


@pytest.fixture
def ring_factory(workdir: Path, nodes: list[Node]) -> Iterator[Callable[..., Ring]]:
    rings: list[Ring] = []

    def make(size: int, overlays: str = "o", controller_args: Sequence[str] = ()) -> Ring:
        ring = bring_up_ring(workdir, nodes, size, overlays, controller_args)
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


def unicast_flows(node: Node, overlay: str = "o") -> list[str]:
    assert node.ovs is not None
    return [f for f in node.ovs.ofctl("dump-flows", node.bridge_name(overlay)).splitlines() if "dl_dst=" in f]


def test_two_nodes_ping_across_a_forwarded_tunnel(ring_factory: Callable[..., Ring]) -> None:
    a, b = ring_factory(2).nodes
    result = ping(a, "10.77.0.2")
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    for node in (a, b):
        assert unicast_flows(node), f"no unicast flows on {node.netns}"
    print("\n2 nodes: " + result.stdout.strip().splitlines()[-1])


def test_four_node_ring_pings_across_an_intermediate_node(ring_factory: Callable[..., Ring]) -> None:
    """Ids increase round the ring a-b-c-d-a, so a and c are not adjacent: the ARP reaches c through
    b or d within its bounds, and the echoes follow unicast flows through an intermediate node.

    Which intermediate carries which direction depends on the last broadcast each side saw (a's ARP
    goes a-b-c; an ARP from c goes c-d-a), so the test asks only that both directions were switched
    by flows on b or d."""
    a, b, c, d = ring_factory(4).nodes
    result = ping(a, "10.77.0.3")
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    mac_a, mac_c = a.mac(), c.mac()
    directions = set()
    for flow in unicast_flows(b) + unicast_flows(d):
        if f"dl_src={mac_a},dl_dst={mac_c}" in flow:
            directions.add("a->c")
        if f"dl_src={mac_c},dl_dst={mac_a}" in flow:
            directions.add("c->a")
    assert directions == {"a->c", "c->a"}, unicast_flows(b) + unicast_flows(d)
    print("\n4-node ring, 1 intermediate: " + result.stdout.strip().splitlines()[-1])


def ipv6_addresses(node: Node, *selector: str) -> str:
    return _sh("ip", "netns", "exec", node.netns, "ip", "-6", "-o", "address", "show", "dev", node.bridge_name(),
               *selector).stdout.strip()


def test_ipv6_put_on_the_bridges_crosses_the_overlay_beside_their_link_local(
    ring_factory: Callable[..., Ring],
) -> None:
    """Bridges with an IPv4 overlay address keep their IPv6 link-local, as any Ethernet interface (issue
    23; their link-local chatter is bounded per port in the switch); IPv6 put on them by hand works across
    the overlay: its DAD and neighbour solicitations are multicast that Bounded Flood carries (a and c are
    not adjacent)."""
    a, b, c, d = ring_factory(4).nodes
    for node in (a, b, c, d):
        addresses = ipv6_addresses(node)
        assert addresses.count("inet6") == 1 and "fe80::" in addresses, f"{node.bridge_name()}: {addresses}"
    for node, address in ((a, "fd77::1/64"), (c, "fd77::3/64")):
        _sh("ip", "netns", "exec", node.netns, "ip", "-6", "address", "add", address, "dev", node.bridge_name())
    for node in (a, c):  # DAD done: the probe crossed the overlay and nobody claimed the address
        wait_for(lambda: ipv6_addresses(node, "tentative") == "", 15, f"DAD on {node.bridge_name()}")  # noqa: B023
        assert "dadfailed" not in ipv6_addresses(node)
    result = ping(a, "fd77::3")
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    print("\n4-node ring, IPv6 across 1 intermediate: " + result.stdout.strip().splitlines()[-1])


def test_two_overlays_on_one_controller_per_node(ring_factory: Callable[..., Ring]) -> None:
    """Each node: one OVS, two bridges (overlays r and b), ONE controller process for both."""
    a, b = ring_factory(2, overlays="rb").nodes
    for node in (a, b):
        connected = {e["overlay"]: e["datapath_id"] for e in node.events("SwitchConnected")}
        assert connected == {o: f"{datapath_id_for(o):016x}" for o in "rb"}, node.events()
    red = ping(a, "10.77.0.2")
    blue = ping(a, "10.77.1.2")
    for result in (red, blue):
        assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout + result.stderr
    # Each overlay's flows stay on its own bridge: no red MAC is ever switched on blue, nor the reverse.
    for node in (a, b):
        red_macs, blue_macs = {a.mac("r"), b.mac("r")}, {a.mac("b"), b.mac("b")}
        assert unicast_flows(node, "r") and unicast_flows(node, "b")
        assert not any(m in f for f in unicast_flows(node, "b") for m in red_macs)
        assert not any(m in f for f in unicast_flows(node, "r") for m in blue_macs)
    print("\n2 overlays, red: " + red.stdout.strip().splitlines()[-1])
    print("2 overlays, blue: " + blue.stdout.strip().splitlines()[-1])


def test_sustained_traffic_between_distant_nodes_asks_for_an_on_demand_link(
    ring_factory: Callable[..., Ring],
) -> None:
    """a and c are not adjacent in a 4-ring; traffic between them above the threshold makes the
    controller that knows the other's root (from its FRB) report OnDemandWanted for it. This runs the
    real flow stats request and reply against OVS."""
    a, b, c, d = ring_factory(4, controller_args=["--stats-interval", "0.5", "--on-demand-threshold", "20000"]).nodes
    result = _sh("ip", "netns", "exec", a.netns, "ping", "-c", "150", "-i", "0.01", "-s", "1400", "-W", "2",
                 "10.77.0.3", check=False)
    assert result.returncode == 0, result.stdout + result.stderr

    def wanted() -> list[tuple[str, str]]:
        return [(n.netns, e["peer"]) for n in (a, c) for e in n.events("OnDemandWanted")]

    wait_for(lambda: bool(wanted()), 10, "an OnDemandWanted event")
    assert set(wanted()) <= {(a.netns, f"{c.node_id:032x}"), (c.netns, f"{a.node_id:032x}")}, wanted()
    assert not any(n.events("OnDemandWanted") for n in (b, d))  # they only carried it
    print(f"\non-demand wanted: {wanted()} ({result.stdout.strip().splitlines()[-1]})")


_REPLY = re.compile(r"^\[(?P<ts>[0-9.]+)\] \d+ bytes from (?P<src>[0-9.]+): icmp_seq=(?P<seq>\d+)")


def test_ip_moved_to_another_node_is_reached_again_well_under_a_second(ring_factory: Callable[..., Ring]) -> None:
    """E2 in small: 10.77.0.2 moves from b's bridge to c's (another MAC); a keeps pinging it.

    c's controller process sees the address appear and sends a gratuitous ARP; flooded as an FRB,
    it updates a's ARP cache (and every switch's learning), so a's next echo goes to c."""
    a, b, c = ring_factory(3).nodes
    moving = "10.77.0.2"
    warmup = ping(a, moving, count=3)
    assert warmup.returncode == 0, warmup.stdout + warmup.stderr
    interval = 0.02
    pinger = subprocess.Popen(
        ["ip", "netns", "exec", a.netns, "ping", "-D", "-n", "-i", str(interval), "-W", "1", moving],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    replies: list[float] = []
    reader = threading.Thread(target=_collect_replies, args=(pinger, replies), daemon=True)
    reader.start()
    try:
        wait_for(lambda: len(replies) >= 5, 10, "pings before the move")
        _sh("ip", "netns", "exec", b.netns, "ip", "address", "del", f"{moving}/24", "dev", b.bridge_name())
        moved_at = time.time()
        _sh("ip", "netns", "exec", c.netns, "ip", "address", "add", f"{moving}/24", "dev", c.bridge_name())
        wait_for(lambda: any(t > moved_at for t in replies), 10, "a reply after the move")
    finally:
        pinger.send_signal(signal.SIGINT)
        pinger.wait(timeout=5)
        reader.join(timeout=5)
    last_before = max(t for t in replies if t <= moved_at)
    first_after = min(t for t in replies if t > moved_at)
    resumed = first_after - moved_at
    gap = first_after - last_before
    assert f"address appeared interface={c.bridge_name()} address={moving}" in (c.base / "controller.log").read_text()
    print(f"\nE2 (3 nodes, IP moved b -> c): ping resumed {resumed * 1000:.0f} ms after the address was added "
          f"(gap between replies {gap * 1000:.0f} ms, ping interval {interval * 1000:.0f} ms); paper: 6.15 s, "
          f"target <= 1 s")
    assert resumed < 1.0
    # The echo now goes to c's bridge MAC, on flows a's switch installed towards it.
    assert any(f"dl_dst={c.mac()}" in f for f in unicast_flows(a)), unicast_flows(a)


def _collect_replies(pinger: subprocess.Popen[str], replies: list[float]) -> None:
    assert pinger.stdout is not None
    for line in pinger.stdout:
        match = _REPLY.match(line)
        if match:
            replies.append(float(match["ts"]))


_IMPOSTOR = r"""
import json, socket, struct, sys, time
dpid = int(sys.argv[2], 16)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(struct.pack("!BBHI", 4, 0, 8, 1))  # OFPT_HELLO, OpenFlow 1.3
types, closed, buf = [], False, b""
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    try:
        chunk = s.recv(65536)
    except socket.timeout:
        break
    except ConnectionResetError:
        closed = True
        break
    if not chunk:
        closed = True
        break
    buf += chunk
    while len(buf) >= 8:
        version, kind, length, xid = struct.unpack("!BBHI", buf[:8])
        buf = buf[length:]
        types.append(kind)
        if kind == 5:  # FEATURES_REQUEST: claim the bridge's datapath id
            s.sendall(struct.pack("!BBHIQIBB2xII", 4, 6, 32, xid, dpid, 256, 254, 0, 0, 0))
            deadline = time.monotonic() + 2
        elif kind == 2:  # ECHO_REQUEST
            s.sendall(struct.pack("!BBHI", 4, 3, 8, xid))
print(json.dumps({"types": types, "closed": closed}))
"""


def test_a_second_openflow_connection_with_the_bridges_datapath_id_cannot_take_the_bridge(
    workdir: Path, nodes: list[Node]
) -> None:
    """issue 9: any local process could connect with the bridge's predictable datapath id and replace it."""
    ns = unique_prefix() + "i"
    base = workdir / "a"
    node = Node(ns, node_id=0xA1A1 << 100, base=base, controller_args=["--switch-run-dir", str(base / "ovs" / "run")])
    base.mkdir()
    nodes.append(node)
    node.up()
    wait_for(lambda: bool(node.events("SwitchConnected")), 15, "switch connected")

    out = _sh("ip", "netns", "exec", ns, sys.executable, "-c", _IMPOSTOR, str(CONTROLLER_PORT),
              f"{datapath_id_for('o'):016x}").stdout
    impostor = json.loads(out)
    assert impostor["closed"], impostor
    assert 14 not in impostor["types"], impostor  # never sent a FLOW_MOD: it controls nothing
    assert "switch connection refused" in (node.base / "controller.log").read_text()
    assert len(node.events("SwitchConnected")) == 1

    # The real bridge still has the controller: a port added to it now is seen and classified.
    node.add_tap(f"{ns}t9")
    wait_for(lambda: any(e.get("name") == f"{ns}t9" for e in node.events("PortAdded")), 10, "the new port seen")
