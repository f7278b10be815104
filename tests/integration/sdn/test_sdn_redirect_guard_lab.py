"""A member's ICMP (IPv4) redirect stopped by the switch whatever the host's sysctls say (review21l L5), in a real
overlay: daemons, OVS, os-ken, tunnels, NATs.

node1 routes a site (192.168.50.0/24) via node3, a gateway member, and takes redirects as a stock host without
forwarding does (`net.ipv4.conf.all.accept_redirects=1`; the bridge interface's own 1 too, so the switch is the
only defence here). node2 sends node1, over its tunnel to node1's MAC right after a ping between them (a flow
carries that pair's frames), a redirect "from node3: for 192.168.50.7, use node2". node1's switch drops it and
counts ROUTER_GUARD; node1's route stays via node3. Then the same bytes, handed to node1's interface by the
switch directly (an OpenFlow packet-out to LOCAL, past table 0), move the route to node2: the frame is one the
kernel takes, so the first half would fail if the guard's flow or check were gone.
"""

from __future__ import annotations

import functools
import sys

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.frames import icmp_redirect
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

BRIDGE = "evbr-ov1"
SITE, SITE_HOST = "192.168.50.0/24", "192.168.50.7"

_SEND = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
s.send(bytes.fromhex(sys.argv[2]))
"""


def _full_mesh(topo: Topology, n: int) -> bool:
    up = {frozenset((link.node, link.peer)) for link in topo.links if link.state == "up" and link.port is not None}
    return len(topo.live) == n and len(up) == n * (n - 1) // 2


def _mac(lab: Lab, index: int) -> str:
    return lab.exec(index, ["cat", f"/sys/class/net/{BRIDGE}/address"]).stdout.strip()


def _route(lab: Lab) -> str:
    return lab.exec(1, ["ip", "-4", "route", "get", SITE_HOST]).stdout


def _guard_drops(lab: Lab, index: int) -> int:
    return int(lab.daemon_status(index)["overlays"]["ov1"]["drops"].get("ROUTER_GUARD", 0))


def test_a_members_ipv4_redirect_is_dropped_by_the_switch_whatever_the_sysctls(lab_factory: LabFactory) -> None:
    lab = lab_factory(nodes=3, nat="mixed", topology={"successors": 2}, daemons=True)
    wait_for_value(lab.topology, lambda t: _full_mesh(t, 3), 90, what="every pair of the 3 nodes linked")
    ip1, ip2, ip3 = (str(lab.node(i).overlay_address.ip) for i in (1, 2, 3))
    for setting in ("all", BRIDGE):
        lab.exec(1, ["sysctl", "-q", "-w", f"net.ipv4.conf.{setting}.accept_redirects=1"])
    lab.exec(1, ["ip", "route", "add", SITE, "via", ip3, "dev", BRIDGE])
    assert f"via {ip3} " in _route(lab)
    # node2 reachable from node1: its address in node1's neighbour table (the kernel takes a redirect only to a
    # known neighbour), and a flow for node2's MAC to node1's in node1's table 1.
    pinged = lab.exec(1, ["ping", "-c", "2", "-i", "0.2", "-W", "2", ip2], check=False, timeout=20)
    assert pinged.returncode == 0, pinged.stdout + pinged.stderr
    frame = icmp_redirect(_mac(lab, 1), _mac(lab, 2), ip3, ip1, SITE_HOST, ip2, quoting="echo reply")
    assert "icmp_type=5" in lab.ovs(1).ofctl("dump-flows", BRIDGE, "table=0")

    before = _guard_drops(lab, 1)
    sent = lab.exec(2, [sys.executable, "-c", _SEND, BRIDGE, frame.hex()], check=False)
    assert sent.returncode == 0, sent.stderr
    wait_for_value(functools.partial(_guard_drops, lab, 1), lambda n: n > before, 15,
                   what="node1's ROUTER_GUARD drop of node2's redirect")  # fmt: skip
    route = _route(lab)
    print(f"after node2's redirect by its tunnel: {route.strip()}")
    assert f"via {ip3} " in route and "redirected" not in route, route

    # The control: the same frame given to node1's interface past table 0 is taken.
    lab.ovs(1).ofctl("packet-out", BRIDGE, f"in_port=controller packet={frame.hex()} actions=output:LOCAL")
    moved = wait_for_value(functools.partial(_route, lab), lambda r: f"via {ip2} " in r, 10,
                           what="node1's route moved by the redirect handed to its interface (the control)")  # fmt: skip
    print(f"after the same frame handed to node1's interface: {moved.strip()}")
    assert "redirected" in moved
