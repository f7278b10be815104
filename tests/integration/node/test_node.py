"""The whole node in the lab: daemons (signaling, overlay controller, tunnels, OVS, os-ken) in NATed namespaces.

A 4-node overlay behind mixed NATs comes up; successor links close the ring;
every pair pings over the overlay addresses; SIGTERM to one daemon leaves its
namespace with no TAP or bridge, and the others repair around it.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

T = TypeVar("T")
RING_TIMEOUT = 60.0  # generous: the machine is shared and loaded
# Toward issue 25's 50 MB target: measured 54.8-55.1 MB at load 4.0-4.7 (2026-11-29), after the fifth pass at
# an idle daemon's memory (docs/performance.md); 66.5-66.7 MB at load 48 before the second (issues 12, 13).
IDLE_RSS_BOUND_MB = 60.0


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str) -> T:
    return wait_for_value(get, good, timeout, what=what)


def ring_closed(topo: Topology) -> bool:
    return len(topo.live) > 1 and not topo.ring_gaps()


def on_bridges(topo: Topology) -> bool:
    """Every link that is up is a TAP with an OpenFlow port on its node's bridge."""
    return all(link.tap and link.port is not None for link in topo.links if link.state == "up")


def pings(lab: Lab, a: int, b: int) -> bool:
    target = str(lab.node(b).overlay_address.ip)
    done = lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False, timeout=20)
    return done.returncode == 0


def overlay_interfaces(lab: Lab, index: int) -> list[str]:
    """TAPs and OVS devices left in a node's namespace (its LAN link and lo excluded)."""
    out = lab.exec(index, ["ip", "-o", "link", "show"]).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n != "lo" and n != lab.plan.node(index).lan_interface]


TRANSFER_BYTES = 32 * 1024 * 1024
_SERVER = """
import hashlib, socket, sys
s = socket.create_server((sys.argv[1], 5302))
print("listening", flush=True)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while chunk := c.recv(1 << 20):
    h.update(chunk); n += len(chunk)
print(n, h.hexdigest(), flush=True)
"""
_CLIENT = """
import hashlib, socket, sys
block = hashlib.sha256(b"evio").digest() * 2048  # 64 KiB, the same every run
c = socket.create_connection((sys.argv[1], 5302), timeout=30)
for i in range(int(sys.argv[2]) // len(block)):
    c.sendall(bytes([i & 0xFF]) + block[1:])
c.close()
"""


def transfer_intact(lab: Lab, a: int, b: int) -> tuple[int, str]:
    """Bytes and SHA-256 that node b received over one TCP connection from node a (bulk: TSO super-frames)."""
    target = str(lab.node(b).overlay_address.ip)
    server = subprocess.Popen(["ip", "netns", "exec", lab.netns(b), sys.executable, "-c", _SERVER, target],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        lab.exec(a, [sys.executable, "-c", _CLIENT, target, str(TRANSFER_BYTES)], timeout=120)
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    size, digest = out.split()
    return int(size), digest


def expected_transfer() -> tuple[int, str]:
    block = hashlib.sha256(b"evio").digest() * 2048
    h = hashlib.sha256()
    for i in range(TRANSFER_BYTES // len(block)):
        h.update(bytes([i & 0xFF]) + block[1:])
    return TRANSFER_BYTES, h.hexdigest()


@pytest.fixture
def keep_logs(request: pytest.FixtureRequest) -> Iterator[list[Lab]]:
    """Labs appended here have their daemons' logs printed if the test fails (the lab is removed after)."""
    labs: list[Lab] = []
    failed_before = request.session.testsfailed
    yield labs
    if request.session.testsfailed > failed_before:  # the call phase failed (it is counted before teardown)
        for lab in labs:
            for node in lab.nodes:
                try:
                    text = lab.daemon_log(node.index).read_text(errors="replace")
                except OSError:
                    continue
                print(f"===== {node.name} ({node.nat}) daemon log, last 60 lines")
                print("\n".join(text.splitlines()[-60:]))


# With offloads, TSO on the TAPs too: every super-frame from Open vSwitch then reaches the daemon, which
# makes the count below certain (records joined on the way in depend on how they arrive).
@pytest.mark.parametrize("offload", [True, False], ids=["offload-tso", "no-offload"])
def test_four_nodes_form_a_ring_ping_and_repair_after_a_sigterm(
    lab_factory: LabFactory, keep_logs: list[Lab], offload: bool
) -> None:
    tunnel = {"offload": offload, "tso": offload}
    lab = lab_factory(nodes=4, nat="mixed", topology={"successors": 2}, tunnel=tunnel, daemons=True)
    keep_logs.append(lab)

    topo = wait_for(lab.topology, lambda t: ring_closed(t) and on_bridges(t), RING_TIMEOUT, "a ring of successor links")
    assert set(topo.live) == {n.name for n in lab.nodes}

    failed = [(a.index, b.index) for a in lab.nodes for b in lab.nodes if a != b and not pings(lab, a.index, b.index)]
    assert failed == [], f"pairs without an answer over the overlay: {failed}"

    # Resident memory of each daemon (its SDN controller included) with its ring up: issue 25's
    # target is 50 MB; 60 MB is asserted, some 5 MB over what the daemons hold since os-ken runs
    # without oslo_config and netaddr (docs/design.md, "What a daemon imports"): room for allocator
    # noise on a busy machine, and a regression of one of the passes' few MB with anything more shows.
    usage = [lab.daemon_usage(n.index) for n in lab.nodes]
    rss_mb = [u.rss_bytes / 1e6 for u in usage if u is not None]
    print(f"\n[idle RSS] daemons: {' '.join(f'{r:.1f}' for r in rss_mb)} MB (bound {IDLE_RSS_BOUND_MB} MB, target 50 MB)")
    assert len(rss_mb) == len(lab.nodes) and max(rss_mb) <= IDLE_RSS_BOUND_MB

    # Bulk TCP through both bridges and the tunnel arrives whole, with offloads as without.
    assert transfer_intact(lab, 1, 3) == expected_transfer()
    links = [link for n, peer in ((1, 3), (3, 1)) for link in lab.daemon_status(n)["overlays"][lab.plan.overlay]["links"]
             if link["peer"] == lab.node(peer).node_id]  # fmt: skip
    assert links and all(not link["drops"].get("bad-offload") for link in links), links
    sent_super_frames = sum(link["tx"]["super_frames"] for link in links)
    assert (sent_super_frames > 0) == offload, links
    if not offload:
        assert sum(link["rx"]["super_frames"] for link in links) == 0, links

    # Tunnel TAPs are bare bridge ports: no address, so no IPv6 chatter of their own onto the overlay.
    for link in topo.links:
        if link.state == "up":
            assert link.tap is not None, f"{link.node}'s up link to {link.peer} reports no TAP"
            addresses = lab.exec(int(link.node.removeprefix("node")), ["ip", "-o", "addr", "show", "dev", link.tap]).stdout
            assert addresses.strip() == "", f"{link.node}'s TAP {link.tap} has addresses: {addresses}"
    # The bridges' internal ports keep their IPv6 link-local, as any Ethernet interface (issue 23; what it
    # sends is bounded per port in the switch).
    for node in lab.nodes:
        addresses = lab.exec(node.index, ["ip", "-6", "-o", "addr", "show", "dev", "evbr-ov1", "scope", "link"]).stdout
        assert "fe80::" in addresses, f"{node.name}'s bridge has no IPv6 link-local: {addresses}"

    victim = 2
    victim_taps = {link.tap for link in topo.links if link.peer == f"node{victim}"}
    assert overlay_interfaces(lab, victim)  # it had its bridge and TAPs
    lab.stop_daemon(victim)
    assert lab.daemon(victim) is None
    assert overlay_interfaces(lab, victim) == []  # no TAP, no bridge port device, no ovs-netdev left
    assert lab.ovs(victim).vsctl("list-br").strip() == ""

    others = [n.index for n in lab.nodes if n.index != victim]
    topo = wait_for(
        lab.topology, lambda t: ring_closed(t) and on_bridges(t) and set(t.live) == {f"node{i}" for i in others},
        RING_TIMEOUT, "the ring repaired without node2",
    )
    for index in others:
        ports = set(lab.ovs(index).vsctl("list-ports", "evbr-ov1").split())
        assert not ports & victim_taps, f"node{index} still has a port towards node{victim}"
    failed = [(a, b) for a in others for b in others if a != b and not pings(lab, a, b)]
    assert failed == [], f"pairs without an answer after the repair: {failed}"
