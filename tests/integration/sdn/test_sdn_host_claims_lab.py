"""A hostile member claims a receiving-only host's MAC, in real nodes: refused, the host still reached (decision 0055).

A ring of 5 daemons in trust mode (s = 1, k = 0, no on-demand links): u, n1, v, n3, a in ring order, a adjacent
to u, v two hops from u by n1 and three by a (so u's honest way to v never leads through a).
Every node announces the MACs it hosts, signed with its overlay certificate, over the overlay. u streams UDP to
v's host (v's bridge interface), which only receives. Then a writes FRB broadcasts into its tunnel TAP towards u,
rooted at itself, whose inner frame is an ARP "from" v's host's MAC: before decision 0055 u moved the MAC to a's
port at once (tests/unit/sdn/test_review21b_receiving_host.py) and u's stream went to a. Now u refuses the claim
(NOT_ANNOUNCER), its flows to v's host keep leading away from a, and v's host receives the whole stream.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any

import pytest

from evio.ids import parse_node_id
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.sdn import frb
from evio.testing.frames import arp_request
from evio.testing.labs import LabFactory
from evio.testing.waiting import holds_within, wait_for_value

pytestmark = pytest.mark.integration

RING_TIMEOUT = 90.0
PORT, RATE, SECONDS = 5399, 20, 24.0
WATCH = 8.0  # seconds: past the move hold (5 s), when a contested claim would have settled

# In v's namespace: count the datagrams that arrive within the window.
LISTEN = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.5)
end, got = time.monotonic() + float(sys.argv[3]), 0
print("ready", flush=True)
while time.monotonic() < end:
    try:
        s.recv(2048)
        got += 1
    except socket.timeout:
        pass
print(got)
"""

# In u's namespace: a steady one-way stream to v's host.
STREAM = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
target, rate, seconds = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4])
start, sent = time.monotonic(), 0
while time.monotonic() < start + seconds:
    s.sendto(b"x" * 100, target)
    sent += 1
    lag = start + sent / rate - time.monotonic()
    if lag > 0:
        time.sleep(lag)
print(sent)
"""

# In a's namespace: the forged FRBs, as a's switch would send them, into its TAP towards u, twice a second
# (a claim made once and contested while the MAC's place spoke would settle after the move hold anyway).
FORGE = r"""
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
start = time.monotonic()
for i in range(int(sys.argv[3])):
    s.send(bytes.fromhex(sys.argv[2]))
    lag = start + (i + 1) * 0.5 - time.monotonic()
    if lag > 0:
        time.sleep(lag)
"""


def ring_closed(topo: Topology) -> bool:
    return len(topo.live) == 5 and not topo.ring_gaps() and all(
        link.tap and link.port is not None for link in topo.links if link.state == "up")


def overlay(lab: Lab, index: int) -> dict[str, Any]:
    document: dict[str, Any] = lab.daemon_status(index)["overlays"][lab.plan.overlay]
    return document


def flows_to(lab: Lab, index: int, bridge: str, mac: str, field: str = "dl_dst") -> list[str]:
    return [line for line in lab.ovs(index).ofctl("dump-flows", bridge).splitlines() if f"{field}={mac}" in line]


def flows_from(lab: Lab, index: int, bridge: str, mac: str) -> list[str]:
    return flows_to(lab, index, bridge, mac, "dl_src")


def outputs_to(lab: Lab, index: int, bridge: str, mac: str) -> list[str]:
    return [port for line in flows_to(lab, index, bridge, mac) for port in re.findall(r"output:(\d+)", line)]


def test_a_hostile_members_claim_of_a_receiving_hosts_mac_is_refused_and_the_host_still_receives(
    lab_factory: LabFactory,
) -> None:
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=5, nat="eim", topology=topology, daemons=True, trust=True)
    topo = wait_for_value(lab.topology, ring_closed, RING_TIMEOUT, what="a ring of 5 successor links")
    index = {n.name: n.index for n in lab.nodes}
    u, _n1, v, _n3, a = (index[name] for name in topo.live)  # ring (node id) order: a and u are adjacent
    ids = {i: parse_node_id(str(lab.daemon_status(i)["node_id"])) for i in (u, v, a)}
    (tap,) = [link.tap for link in topo.links_of(lab.node(a).name) if link.peer == lab.node(u).name and link.tap]
    (a_port,) = [link.port for link in topo.links_of(lab.node(u).name) if link.peer == lab.node(a).name]
    bridge = overlay(lab, v)["bridge"]
    v_mac = lab.exec(v, ["cat", f"/sys/class/net/{bridge}/address"]).stdout.strip()
    # Every other node's announcement reached u (each hosts at least its bridge's own MAC).
    claims = wait_for_value(lambda: overlay(lab, u)["trust"]["host_claims"], lambda c: c.get("members", 0) >= 4,
                            30, what="u holding the other four nodes' announcements", interval=0.5)
    print(f"u's host claims before: {claims}")

    target = str(lab.node(v).overlay_address.ip)
    results: dict[str, str] = {}
    listener = threading.Thread(target=lambda: results.update(
        got=lab.exec(v, [sys.executable, "-c", LISTEN, target, str(PORT), str(SECONDS + 4)], timeout=90).stdout))
    listener.start()
    wait_for_value(lambda: lab.exec(v, ["ss", "-uln"]).stdout, lambda out: f":{PORT}" in out, 10,
                   what="v's listener bound", interval=0.2)
    stream = threading.Thread(target=lambda: results.update(
        sent=lab.exec(u, [sys.executable, "-c", STREAM, target, str(PORT), str(RATE), str(SECONDS)],
                      timeout=90).stdout))
    stream.start()
    try:
        # The stream rides a flow at u by now (v's host answered u's ARP once, and then only receives); the
        # flow from v's host that the answer made idles out within the move hold: v's place is silent at u.
        wait_for_value(lambda: flows_to(lab, u, bridge, v_mac), bool, 10, what="u's flow to v's host", interval=0.2)
        # The flow installed ahead to u's interface from v's (decision 0066: no idle timeout) vouches for nothing;
        # the learned one, which would, is what must go.
        wait_for_value(lambda: [f for f in flows_from(lab, u, bridge, v_mac) if "idle_timeout=" in f], lambda f: not f,
                       15, what="u's learned flow from v's host idled out", interval=0.2)
        inner = arp_request(v_mac)
        forged = frb.pack(frb.broadcast(inner, ids[a], ids[a], hop_count=1))  # rooted at a, bound round the ring
        forger = threading.Thread(target=lambda: lab.exec(a, [sys.executable, "-c", FORGE, tap, forged.hex(),
                                                              str(int(WATCH * 2))], timeout=60))
        forger.start()
        # Before decision 0055 a packet-in of the stream put a flow to a's port once the claim was taken: watch.
        seen: set[str] = set()

        def taken_by_a() -> bool:
            seen.update(outputs_to(lab, u, bridge, v_mac))
            return str(a_port) in seen

        taken = holds_within(taken_by_a, WATCH, interval=0.2)
        outputs = sorted(seen)
        forger.join()
    finally:
        stream.join()
        listener.join()
    sent, got = int(results["sent"].split()[-1]), int(results["got"].split()[-1])
    drops = wait_for_value(lambda: overlay(lab, u).get("drops", {}), lambda d: "NOT_ANNOUNCER" in d, 25,
                           what="u's NOT_ANNOUNCER count", interval=1.0)  # drop counts come every 10 s
    print(f"stream u -> v: {got}/{sent} datagrams; u's flows to v's host output to {outputs} (a's port {a_port});"
          f" u's drops {drops}; u's host claims after: {overlay(lab, u)['trust']['host_claims']}")
    assert not taken and str(a_port) not in outputs
    assert drops["NOT_ANNOUNCER"] >= 1
    assert got >= sent - 1  # the one in flight when the window closed may be lost
