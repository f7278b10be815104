"""A member flooding at its full per-port rate, in real nodes: another member's ping loses nothing (issue 21).

A ring of 4 daemons (s = 1, k = 0, no on-demand links): h, n1, n2, n3 in ring order. h writes FRB broadcasts
into its tunnel TAP towards n1 (what its switch would send, but 1000 a second from invented sources, rooted
at h and at invented roots behind it), so n1's controller takes them at n1's per-port packet-in rate and
passes them on towards n2. Meanwhile n2, with its ARP cache flushed, pings n3: its ARP and echoes must all
get through. n1 counts the floods it did not pass on (FLOOD_LIMITED).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from evio.ids import parse_node_id
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

T = TypeVar("T")
RING_TIMEOUT = 60.0
RATE, SECONDS = 1000, 8.0
PINGS = 40

# Runs in h's namespace, evio not needed: FRB broadcasts (frb.py's wire format) out of the TAP, which hands
# them to h's tunnel towards n1 as if its bridge had sent them.
STORM = r"""
import os, socket, sys, time
tap, own, low, high, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
bound = int(sys.argv[7])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((tap, 0))
end = time.monotonic() + seconds
sent = 0
start = time.monotonic()
while time.monotonic() < end:
    src = bytes([(os.urandom(1)[0] & 0xFC) | 0x02]) + os.urandom(5)
    root = own if sent % 2 else low + 1 + int.from_bytes(os.urandom(15), "big") % max(1, high - low - 1)
    inner = b"\xff" * 6 + src + b"\x08\x06" + b"\x00\x01\x08\x00\x06\x04\x00\x01" + src + b"\x00" * 14
    header = root.to_bytes(16, "big") + bound.to_bytes(16, "big") + bytes([1, 0, 0])
    s.send(b"\xff" * 6 + src + b"\xc0\xc0" + header + inner)
    sent += 1
    lag = start + sent / rate - time.monotonic()
    if lag > 0:
        time.sleep(lag)
print(sent)
"""


def ring_closed(topo: Topology) -> bool:
    return len(topo.live) == 4 and not topo.ring_gaps() and all(
        link.tap and link.port is not None for link in topo.links if link.state == "up")


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str) -> T:
    return wait_for_value(get, good, timeout, what=what)


def node_id(lab: Lab, index: int) -> int:
    return parse_node_id(str(lab.daemon_status(index)["node_id"]))


def drops(lab: Lab, index: int) -> dict[str, int]:
    counts: dict[str, int] = lab.daemon_status(index)["overlays"][lab.plan.overlay].get("drops", {})
    return counts


def test_a_member_flooding_at_its_full_per_port_rate_leaves_another_members_ping_loss_at_zero(
    lab_factory: LabFactory,
) -> None:
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=4, nat="eim", topology=topology, daemons=True)
    topo = wait_for(lab.topology, ring_closed, RING_TIMEOUT, "a ring of 4 successor links")
    index = {n.name: n.index for n in lab.nodes}
    h, n1, n2, n3 = (index[name] for name in topo.live)  # ring (node id) order
    (tap,) = [link.tap for link in topo.links_of(lab.node(h).name) if link.peer == lab.node(n1).name and link.tap]
    ids = {i: node_id(lab, i) for i in (h, n1, n2, n3)}
    # Roots h may plausibly carry: itself and ids between n3 and h; the bound n3 (h's own bound for n1).
    argv = [sys.executable, "-c", STORM, tap, str(ids[h]), str(ids[n3]), str(ids[h]), str(RATE), str(SECONDS),
            str(ids[n3])]
    target = str(lab.node(n3).overlay_address.ip)
    bridge = lab.daemon_status(n2)["overlays"][lab.plan.overlay]["bridge"]
    assert "bytes from" in lab.exec(n2, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False).stdout
    sent: list[str] = []
    storm = threading.Thread(target=lambda: sent.append(lab.exec(h, argv, timeout=SECONDS + 30).stdout))
    storm.start()
    try:
        lab.exec(n2, ["ip", "neigh", "flush", "dev", bridge], check=False)
        out = lab.exec(n2, ["ping", "-c", str(PINGS), "-i", "0.1", "-W", "2", target], check=False, timeout=60).stdout
    finally:
        storm.join()
    replies = sum("bytes from" in line for line in out.splitlines())
    # Drop counters reach the status every 10 s (ofapp.ControllerConfig.drop_report_interval).
    counted = wait_for_value(lambda: drops(lab, n1), lambda d: "FLOOD_LIMITED" in d, 25, what="n1's flood drops",
                             interval=1.0)
    print(f"storm: {sent} frames from h in {SECONDS} s; n2 -> n3: {replies}/{PINGS} replies; n1 drops {counted}; "
          f"n2 drops {drops(lab, n2)}")
    assert sent and int(sent[0]) >= RATE * SECONDS * 0.8
    assert replies == PINGS
