"""Link-local multicast as on any Ethernet (issue 23), in a real overlay: daemons, OVS, os-ken, tunnels, NATs.

Three nodes, every pair linked, so each frame has two ways to every member and Bounded Flood must still
deliver it once. node1 sends one mDNS query over IPv4 (224.0.0.251) and one over IPv6 (ff02::fb), and one
router advertisement with a SLAAC prefix: listeners on the other two bridges count each marked frame (once
each, no more), and both configure an address from the prefix that the others reach over the overlay. The RA
makes node1 their default router: they reach an address node1 alone holds through it, resolving node1's
link-local address by neighbour discovery past the guard of its bound address (review21k K7: table 0 sends
those solicitations and advertisements to the controller, which lets node1's own by).

node1 is the overlay's named IPv6 router (`ipv6_routers`, the RA guard of decision 0068); node2 is not: its
router advertisement (a default router of preference high, a prefix with autoconf) reaches no other bridge, and
neither kernel takes a default route or an address or route of its prefix (review21i I7).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import queue
import signal
import subprocess
import sys
import threading

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

BRIDGE = "evbr-ov1"
PREFIX = ipaddress.IPv6Network("fd5e:e510:1::/64")
ROGUE_PREFIX = ipaddress.IPv6Network("fd5e:e510:66::/64")
BEHIND_ROUTER = "fd5e:e510:2::1"  # node1's alone: reached by the default route the RA gives
LINK_LOCAL = ipaddress.IPv6Network("fe80::/10")
MARKS = {"mdns4": b"evio-mdns4-mark", "mdns6": b"evio-mdns6-mark", "after_rogue": b"evio-after-rogue-ra"}

# Counts incoming frames (not our own sends) that carry a mark, or are a router advertisement with PREFIX;
# prints each hearing as it happens and the totals on SIGINT.
_LISTEN = """
import json, signal, socket, sys
marks = json.loads(sys.argv[2])
prefix, rogue = bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
heard = {name: 0 for name in [*marks, "ra", "rogue_ra"]}
signal.signal(signal.SIGINT, lambda *_: (print(json.dumps(heard), flush=True), sys.exit(0)))
print("listening", flush=True)
while True:
    frame, address = s.recvfrom(65536)
    if address[2] == socket.PACKET_OUTGOING:
        continue
    for name, mark in marks.items():
        if mark.encode() in frame:
            heard[name] += 1
            print(name, flush=True)
    # IPv6, ICMPv6 (next header 58), type 134, and our prefix in its option
    if frame[12:14] == b"\\x86\\xdd" and frame[20] == 58 and frame[54] == 134:
        for name, wanted in (("ra", prefix), ("rogue_ra", rogue)):
            if wanted in frame:
                heard[name] += 1
                print(name, flush=True)
"""

# node1's part: one mDNS query per family and one router advertisement, all from its bridge.
_SEND = """
import socket, struct, sys
ifname, mark4, mark6, prefix = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode(), bytes.fromhex(sys.argv[4])
index = socket.if_nametoindex(ifname)
v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
v4.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
v4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
v4.sendto(mark4, ("224.0.0.251", 5353))
v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
v6.sendto(mark6, ("ff02::fb", 5353, 0, index))
# RFC 4861 4.2: router lifetime 1800 s (a default router), a source link-layer option (as radvd sends),
# one prefix information option with L and A set.
mac = bytes.fromhex(open(f"/sys/class/net/{ifname}/address").read().strip().replace(":", ""))
ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0) + bytes([1, 1]) + mac
ra += struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + prefix
icmp = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)  # the kernel sums it
icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
icmp.sendto(ra, ("ff02::1", 0, 0, index))
"""

# node2's part, a member not named as router: an RA as review21i I7's (router lifetime 1800 s, preference high, a
# prefix with autoconf), then one marked mDNS query by the same way, which tells a listener the RA had its chance.
_SEND_ROGUE = """
import socket, struct, sys
ifname, mark, prefix = sys.argv[1], sys.argv[2].encode(), bytes.fromhex(sys.argv[3])
index = socket.if_nametoindex(ifname)
ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0x08, 1800, 0, 0)
ra += struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + prefix
icmp = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
icmp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
icmp.sendto(ra, ("ff02::1", 0, 0, index))
v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
v4.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
v4.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
v4.sendto(mark, ("224.0.0.251", 5353))
"""


def _full_mesh(topo: Topology, n: int) -> bool:
    up = {frozenset((link.node, link.peer)) for link in topo.links if link.state == "up" and link.port is not None}
    return len(topo.live) == n and len(up) == n * (n - 1) // 2


def _address(lab: Lab, index: int, scope: str, network: ipaddress.IPv6Network) -> str | None:
    """A usable (not tentative) IPv6 address of `scope` in `network` on the node's bridge."""
    out = lab.exec(index, ["ip", "-j", "-6", "address", "show", "dev", BRIDGE, "scope", scope], check=False).stdout
    for link in json.loads(out or "[]"):
        for info in link.get("addr_info", []):
            # (`ip -j` lists an address's lifetimes as entries of their own, without "local")
            if "local" in info and not info.get("tentative") and ipaddress.IPv6Address(info["local"]) in network:
                return str(info["local"])
    return None


class _Listener:
    def __init__(self, netns: str) -> None:
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", _LISTEN, BRIDGE,
             json.dumps({k: v.decode() for k, v in MARKS.items()}), PREFIX.network_address.packed.hex(),
             ROGUE_PREFIX.network_address.packed.hex()],
            stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout.readline().strip() == "listening"
        self.heard: set[str] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def has_heard(self, names: set[str]) -> bool:
        while not self.lines.empty():
            self.heard.add(self.lines.get())
        return names <= self.heard

    def totals(self) -> dict[str, int]:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=10)
        while not self.lines.empty():
            line = self.lines.get()
            if line.startswith("{"):
                return dict(json.loads(line))
        raise AssertionError("the listener printed no totals")


def _members_known(lab: Lab, index: int) -> bool:
    """Trust mode: the node holds both other members' signed host claims (the router's MAC and key among them)."""
    claims = lab.daemon_status(index)["overlays"]["ov1"]["trust"].get("host_claims", {})
    return int(claims.get("members", 0)) >= 2 and int(claims.get("owned", 0)) >= 2


@pytest.mark.parametrize("trust", [False, True], ids=["learning", "trust"])
def test_mdns_and_a_router_advertisement_reach_every_member_once_and_slaac_works(lab_factory: LabFactory,
                                                                                  trust: bool) -> None:
    # In trust mode node1's RA goes on only as its statement, signed by node1 and flooded first, names it (0081).
    lab = lab_factory(nodes=3, nat="mixed", topology={"successors": 2}, daemons=True, trust=trust)
    wait_for_value(lab.topology, lambda t: _full_mesh(t, 3), 90, what="every pair of the 3 nodes linked")
    # node1 is named the overlay's IPv6 router on every node (a new list restarts the overlay: linked again).
    router = json.loads(lab.node(1).config_path.read_text())["node"]["id"]
    lab.reload_configs(lambda doc: doc["overlays"]["ov1"].update(ipv6_routers=[router]), timeout=60)
    wait_for_value(lab.topology, lambda t: _full_mesh(t, 3), 120, what="every pair linked again after the reload")
    for i in (1, 2, 3):  # the bridges' link-local addresses, past their DAD: IPv6 is up on each
        wait_for_value(functools.partial(_address, lab, i, "link", LINK_LOCAL), lambda a: a is not None, 30,
                       what=f"node{i}'s link-local address")
    for i in (2, 3) if trust else ():
        wait_for_value(functools.partial(_members_known, lab, i), bool, 60, what=f"node{i} holds the others' claims")
    listeners = [_Listener(lab.netns(i)) for i in (2, 3)]
    try:
        prefix = PREFIX.network_address.packed.hex()
        sent = lab.exec(1, [sys.executable, "-c", _SEND, BRIDGE, MARKS["mdns4"].decode(), MARKS["mdns6"].decode(),
                            prefix], check=False)
        assert sent.returncode == 0, sent.stderr
        everything = {"mdns4", "mdns6", "ra"}
        for listener in listeners:
            wait_for_value(functools.partial(listener.has_heard, everything), bool, 15, what=f"{sorted(everything)} heard")
        # Both members configure an address from the advertised prefix (after their DAD, a second or more:
        # time in which a second copy of any frame would have arrived too).
        addresses = [wait_for_value(functools.partial(_address, lab, i, "global", PREFIX), lambda a: a is not None, 30,
                                    what=f"node{i}'s SLAAC address") for i in (2, 3)]
    finally:
        totals = [listener.totals() for listener in listeners]
    assert totals == [{"mdns4": 1, "mdns6": 1, "after_rogue": 0, "ra": 1, "rogue_ra": 0}] * 2, totals
    # The "router" holds an address of the prefix too; every member reaches the others' SLAAC addresses.
    lab.exec(1, ["ip", "-6", "address", "add", f"{PREFIX.network_address + 1}/64", "dev", BRIDGE, "nodad"])
    pairs = [(1, addresses[0]), (1, addresses[1]), (2, addresses[1]), (3, addresses[0])]
    failed = [(i, a) for i, a in pairs
              if lab.exec(i, ["ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", str(a)], check=False,
                          timeout=20).returncode != 0]
    assert failed == [], f"no answer from node -> SLAAC address: {failed}"
    # An address node1 alone holds (off the prefix): nodes 2 and 3 reach it by their default route via node1's
    # link-local address, resolved past the guard flows of that bound address (review21k K7).
    router_ll = _address(lab, 1, "link", LINK_LOCAL)
    lab.exec(1, ["ip", "-6", "address", "add", f"{BEHIND_ROUTER}/128", "dev", "lo"])
    for i in (2, 3):
        routes = lab.exec(i, ["ip", "-6", "route", "show", "default", "dev", BRIDGE], check=False).stdout
        assert f"via {router_ll}" in routes, f"node{i}: {routes}"
        assert f"nd_target={router_ll}" in lab.ovs(i).ofctl("dump-flows", BRIDGE, "table=0")
    unreached = [i for i in (2, 3)
                 if lab.exec(i, ["ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", BEHIND_ROUTER], check=False,
                             timeout=20).returncode != 0]
    assert unreached == [], f"no answer from node -> an address behind the router: {unreached}"
    drops = [lab.daemon_status(i)["overlays"]["ov1"]["drops"] for i in (2, 3)]
    statements = [lab.daemon_status(i)["overlays"]["ov1"]["switch"]["router_adverts"] for i in (1, 2, 3)]
    print(f"trust={trust}: drops at nodes 2 and 3: {drops}; RA statements at nodes 1-3: {statements}")
    if trust:  # node1 signed its RA's statement, and each other node checked it and vouched for the RA by it
        assert statements[0].get("signed", 0) >= 1
        assert all(s.get("taken", 0) >= 1 and s.get("vouched", 0) >= 1 for s in statements[1:]), statements
    assert all(int(d.get("ROUTER_ADDRESS_SPOOFED", 0)) == 0 and int(d.get("ROUTER_ADVERT_UNVOUCHED", 0)) == 0
               and int(d.get("ROUTER_STATEMENT_REFUSED", 0)) == 0 for d in drops)


def test_a_member_not_named_as_router_advertises_to_no_node(lab_factory: LabFactory) -> None:
    lab = lab_factory(nodes=3, nat="mixed", topology={"successors": 2}, daemons=True)
    wait_for_value(lab.topology, lambda t: _full_mesh(t, 3), 90, what="every pair of the 3 nodes linked")
    # node2 too: until its link-local address is past DAD, its RA has no source address (EADDRNOTAVAIL)
    for i in (1, 2, 3):
        wait_for_value(functools.partial(_address, lab, i, "link", LINK_LOCAL), lambda a: a is not None, 30,
                       what=f"node{i}'s link-local address")
    listeners = [_Listener(lab.netns(i)) for i in (1, 3)]
    try:
        sent = lab.exec(2, [sys.executable, "-c", _SEND_ROGUE, BRIDGE, MARKS["after_rogue"].decode(),
                            ROGUE_PREFIX.network_address.packed.hex()], check=False)
        assert sent.returncode == 0, sent.stderr
        for listener in listeners:  # the query sent after the RA came: the RA would have come before it
            wait_for_value(functools.partial(listener.has_heard, {"after_rogue"}), bool, 15, what="node2's query heard")
    finally:
        totals = [listener.totals() for listener in listeners]
    assert [t["rogue_ra"] for t in totals] == [0, 0], totals
    for i in (1, 3):
        routes = lab.exec(i, ["ip", "-6", "route", "show", "dev", BRIDGE], check=False).stdout
        assert "default" not in routes and str(ROGUE_PREFIX) not in routes, f"node{i}: {routes}"
        assert _address(lab, i, "global", ROGUE_PREFIX) is None
    # Each of node2's two neighbours dropped it and counted (full mesh: both are).
    for i in (1, 3):  # (the controller reports its counters as they change, a moment later)
        wait_for_value(functools.partial(_guard_drops, lab, i), lambda n: n >= 1, 15,
                       what=f"node{i}'s ROUTER_GUARD drop counted")


def _guard_drops(lab: Lab, index: int) -> int:
    return int(lab.daemon_status(index)["overlays"]["ov1"]["drops"].get("ROUTER_GUARD", 0))
