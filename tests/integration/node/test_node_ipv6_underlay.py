"""IPv6 and dual-stack underlays on hosts of the simulated internet (issue 22, item 1; decision 0048).

Three members joined by token as an operator joins them (`evio join`, `evio run`), on a dual-stack
server (prosody, coturn) named "server" (A and AAAA):

    node1  IPv6 only: 2001:db8::101 on the public segment, its own stateful firewall, no IPv4 at all
    node2  dual stack: IPv4 behind an endpoint-independent NAT, IPv6 2001:db8:2::2 behind the router's
           stateful firewall (no NAT), as home routers do
    node3  IPv4 only, behind an endpoint-independent NAT

node1 and node2 link over IPv6 (host candidates through the firewall, both sides checking at once).
node1 and node3 have no address family in common: coturn allocates relays in the family its client
came by (allocation-default-address-family=keep), so their relays differ too, and they reach each other
over the overlay through node2, whose switch carries their frames between its two tunnels (Bounded
Flood). Printed with -s: each link's path and MTU, and the TCP transfer between node3 and node1.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from evio.testing.host_services import is_listening, start_coturn, start_openvswitch, start_prosody
from evio.testing.hosts import Host, HostProcess
from evio.testing.internet import Internet, Site
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

DOMAIN = "xmpp.example.net"
OVERLAY = "ov1"
CONFIG = "/etc/evio/config.json"
LINK_TIMEOUT = 60.0
IPERF_PORT = 5301
TRANSFER = 4 * 1024 * 1024


def _status(node: Host) -> dict:
    done = node.run(["evio", "status", "--json"], check=False, timeout=10)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _links(node: Host) -> dict[str, dict]:
    """Up links by peer node id."""
    overlay = _status(node).get("overlays", {}).get(OVERLAY, {})
    return {link["peer"]: link for link in overlay.get("links", []) if link.get("state") == "up"}


def _address_family(link: dict) -> int:
    host = str(link.get("remote_address") or "").rpartition(":")[0]
    return ipaddress.ip_address(host.strip("[]")).version


def _pings(node: Host, address: str) -> bool:
    return node.run(["ping", "-c1", "-W1", address], check=False, timeout=5).returncode == 0


class Members:
    def __init__(self, net: Internet) -> None:
        self.net = net
        self.daemons: dict[str, HostProcess] = {}
        self.overlay_address: dict[str, str] = {}
        self.node_id: dict[str, str] = {}

    def join(self, name: str, node: Host) -> None:
        token = self.net.server.run(["evio", "member", "add", name, "--overlay", OVERLAY]).stdout.strip()
        node.run(["evio", "join", token])
        self.daemons[name] = node.spawn(["evio", "run", "--config", CONFIG])
        config = json.loads(node.path(CONFIG).read_text())
        self.overlay_address[name] = str(config["overlays"][OVERLAY]["bridge"]["address"]).split("/")[0]

    def diagnose(self) -> str:
        return "\n".join(f"--- {name} ({'alive' if p.alive() else f'exited {p.returncode}'})\n{p.tail(30)}"
                         for name, p in self.daemons.items())


@pytest.fixture
def members() -> Iterator[Members]:
    with ExitStack() as stack:
        net = stack.enter_context(Internet([Site("none", ipv4=False, ipv6=True), Site("eim", ipv6=True), Site("eim")]))
        server = net.server
        # One name for both of the server's addresses: each member reaches it in the family it has.
        server.run(["evio", "server", "init", "--domain", DOMAIN, "--address", server.name])
        with server.path("/etc/turnserver.conf").open("a") as conf:
            # Relays in the client's family: the IPv4-only and IPv6-only members get none in common.
            conf.write("allocation-default-address-family=keep\n")
        start_prosody(server)
        start_coturn(server)
        for node in net.nodes:
            start_openvswitch(node)
        m = Members(net)
        try:
            yield m
        except BaseException:
            print(m.diagnose())
            raise
        finally:
            for process in m.daemons.values():
                process.stop()


def test_ipv6_only_and_ipv4_only_members_reach_each_other_through_a_dual_stack_member(members: Members) -> None:
    net = members.net
    v6only, dual, v4only = net.nodes
    assert v6only.run(["ip", "-4", "address", "show", "scope", "global"]).stdout.strip() == ""
    assert not _pings(v4only, net.server.ipv6_address) and not _pings(v6only, "203.0.113.10")  # the families apart
    for name, node in (("node1", v6only), ("node2", dual), ("node3", v4only)):
        members.join(name, node)
    ids = {}
    for name, node in (("node1", v6only), ("node2", dual), ("node3", v4only)):
        wait_until_blocking(lambda node=node: bool(_status(node).get("node_id")), 30, what=f"{name}'s status")
        ids[name] = _status(node)["node_id"]

    # node2 links node1 over IPv6 and node3 over IPv4.
    try:
        wait_until_blocking(lambda: {ids["node1"], ids["node3"]} <= set(_links(dual)), LINK_TIMEOUT,
                            what="node2 linked to node1 and node3")
    except AssertionError:
        pytest.fail(f"node2's links: {_links(dual)}\n{members.diagnose()}")
    links = _links(dual)
    to_v6, to_v4 = links[ids["node1"]], links[ids["node3"]]
    print(f"\nnode2 -> node1: {to_v6['path']} {to_v6['local_candidate']}->{to_v6['remote_candidate']} "
          f"{to_v6['remote_address']} mtu {to_v6['mtu']}")
    print(f"node2 -> node3: {to_v4['path']} {to_v4['local_candidate']}->{to_v4['remote_candidate']} "
          f"{to_v4['remote_address']} mtu {to_v4['mtu']}")
    assert _address_family(to_v6) == 6 and to_v6["path"] == "direct", to_v6
    assert _address_family(to_v4) == 4, to_v4
    assert _address_family(_links(v6only)[ids["node2"]]) == 6
    # The MTU leaves room for the IPv6 header where a node has IPv6, on all its paths.
    assert to_v6["mtu"] == to_v4["mtu"] == 1408
    assert _links(v4only)[ids["node2"]]["mtu"] == 1428

    # node1 and node3 share no family: no tunnel between them, yet they reach each other over the overlay.
    assert ids["node3"] not in _links(v6only) and ids["node1"] not in _links(v4only)
    a1, a3 = members.overlay_address["node1"], members.overlay_address["node3"]
    wait_until_blocking(lambda: _pings(v4only, a1) and _pings(v6only, a3), 30, what="node3 and node1 ping each other")
    relayed_before = _links(dual)[ids["node1"]]["rx"]["frames"]

    server = v6only.spawn(["iperf3", "-s", "-1", "-B", a1, "-p", str(IPERF_PORT)])
    wait_until_blocking(lambda: is_listening(v6only, "tcp", IPERF_PORT), 10, what="iperf3 listening on node1")
    done = v4only.run(["iperf3", "-c", a1, "-p", str(IPERF_PORT), "-n", str(TRANSFER), "-J"], timeout=60)
    result = json.loads(done.stdout)["end"]
    received = result["sum_received"]["bytes"]
    print(f"node3 -> node1 over the overlay through node2: {received} bytes at "
          f"{result['sum_received']['bits_per_second'] / 1e6:.0f} Mbit/s, {result['sum_sent'].get('retransmits')} retransmits")
    assert received >= TRANSFER
    wait_until_blocking(lambda: not server.alive(), 10, what="iperf3 server done")
    # The frames went through node2: its tunnel from node1 carried the transfer's acknowledgements and more.
    assert ids["node3"] not in _links(v6only)
    assert _links(dual)[ids["node1"]]["rx"]["frames"] - relayed_before >= 100
