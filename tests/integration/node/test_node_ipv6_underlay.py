"""IPv6 and dual-stack underlays on hosts of the simulated internet (issue 22, item 1; decision 0048).

Members joined by token as an operator joins them (`evio join`, `evio run`), on a dual-stack server
(prosody, coturn) named "server" (A and AAAA), on sites of three kinds:

    IPv6 only   2001:db8::10N on the public segment, its own stateful firewall, no IPv4 at all
    dual stack  IPv4 behind an endpoint-independent NAT, IPv6 2001:db8:N::2 behind the router's stateful
                firewall (no NAT), as home routers do
    IPv4 only   behind an endpoint-independent NAT

Through a dual-stack member: coturn allocates relays in the family its client came by
(allocation-default-address-family=keep), so the IPv6-only and the IPv4-only member have no family in
common, direct or relayed. Four members, ordered on the ring v6-only, dual, v4-only, dual by their node
ids, so that the two are no ring neighbours (Bounded Flood needs a node's ring neighbours linked; the
decision has why): they reach each other over the overlay through a dual-stack member, whose switch
carries their frames between its tunnels. Through a dual-stack relay: coturn as `evio server init`
writes it allocates IPv4 relays for every client, so the two link through it.

Printed with -s: each link's path and MTU, and the TCP transfer between the v4-only and v6-only members.
"""

from __future__ import annotations

import functools
import ipaddress
import json
from collections.abc import Callable, Iterator
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
TCP_PORT = 5301
TRANSFER = 4 * 1024 * 1024
# A short TCP transfer, counted to the byte at the receiving end (argv: address, port [, bytes]).
RECEIVE = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
conn, _ = server.accept()
total = 0
while data := conn.recv(65536):
    total += len(data)
print(total)
"""
SEND = """
import socket, sys, time
started = time.monotonic()
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30) as conn:
    conn.sendall(bytes(int(sys.argv[3])))
    conn.shutdown(socket.SHUT_WR)
    conn.recv(1)
print(f"{time.monotonic() - started:.2f}")
"""


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

    def tokens(self, count: int) -> list[tuple[int, str]]:
        """`count` members added: (node id, token), by node id: their order on the ring."""
        tokens = {}
        for index in range(count):
            name = f"m{index}"
            tokens[name] = self.net.server.run(["evio", "member", "add", name, "--overlay", OVERLAY]).stdout.strip()
        listed = json.loads(self.net.server.run(["evio", "member", "list", "--json"]).stdout)
        return sorted((int(row["node_id"], 16), tokens[row["name"]]) for row in listed)

    def join(self, node: Host, token: str) -> None:
        node.run(["evio", "join", token])
        self.daemons[node.name] = node.spawn(["evio", "run", "--config", CONFIG])
        config = json.loads(node.path(CONFIG).read_text())
        self.overlay_address[node.name] = str(config["overlays"][OVERLAY]["bridge"]["address"]).split("/")[0]

    def diagnose(self) -> str:
        lines = []
        for name, process in self.daemons.items():
            lines.append(f"--- {name} ({'alive' if process.alive() else f'exited {process.returncode}'})")
            lines.append(process.tail(30))
        return "\n".join(lines)


def members(sites: list[Site], coturn_keep: bool) -> Iterator[Members]:
    with ExitStack() as stack:
        net = stack.enter_context(Internet(sites))
        server = net.server
        # One name for both of the server's addresses: each member reaches it in the family it has.
        server.run(["evio", "server", "init", "--domain", DOMAIN, "--address", server.name])
        if coturn_keep:
            with server.path("/etc/turnserver.conf").open("a") as conf:
                conf.write("allocation-default-address-family=keep\n")
        start_prosody(server)
        start_coturn(server)
        for node in net.nodes:
            start_openvswitch(node)
        m = Members(net)
        try:
            yield m
        finally:
            for process in m.daemons.values():
                process.stop()


@pytest.fixture
def four() -> Iterator[Members]:
    sites = [Site("none", ipv4=False, ipv6=True), Site("eim", ipv6=True), Site("eim"), Site("eim", ipv6=True)]
    yield from members(sites, coturn_keep=True)


@pytest.fixture
def two() -> Iterator[Members]:
    yield from members([Site("none", ipv4=False, ipv6=True), Site("eim")], coturn_keep=False)


def _wait(m: Members, condition: Callable[[], bool], timeout: float, what: str) -> None:
    try:
        wait_until_blocking(condition, timeout, what=what)
    except AssertionError as exc:
        pytest.fail(f"{exc}\n{m.diagnose()}")


def _node_id(m: Members, node: Host) -> str:
    _wait(m, lambda: bool(_status(node).get("node_id")), 30, f"{node.name}'s status")
    return str(_status(node)["node_id"])


def _linked_to(node: Host, peers: set[str]) -> bool:
    return peers <= set(_links(node))


def _describe(link: dict) -> str:
    return (f"{link['path']} {link['local_candidate']}->{link['remote_candidate']} {link['remote_address']} "
            f"mtu {link['mtu']}")


def _transfer(m: Members, sender: Host, receiver_host: Host, address: str) -> str:
    """A short TCP transfer from `sender` to `address` (on `receiver_host`), counted to the byte; its seconds."""
    receiver = receiver_host.spawn(["python3", "-c", RECEIVE, address, str(TCP_PORT)])
    _wait(m, lambda: is_listening(receiver_host, "tcp", TCP_PORT), 10, "the receiver listening")
    sent = sender.run(["python3", "-c", SEND, address, str(TCP_PORT), str(TRANSFER)], timeout=60)
    _wait(m, lambda: not receiver.alive(), 30, "the receiver to finish")
    assert receiver.returncode == 0 and receiver.tail(1).strip() == str(TRANSFER), receiver.tail()
    return sent.stdout.strip()


def test_ipv6_only_and_ipv4_only_members_reach_each_other_through_a_dual_stack_member(four: Members) -> None:
    m = four
    net = m.net
    v6only, dual_a, v4only, dual_b = net.nodes
    assert v6only.run(["ip", "-4", "address", "show", "scope", "global"]).stdout.strip() == ""
    assert not _pings(v4only, net.server.ipv6_address) and not _pings(v6only, "203.0.113.10")  # the families apart
    for node, (_, token) in zip(net.nodes, m.tokens(4), strict=True):  # the ring: v6-only, dual, v4-only, dual
        m.join(node, token)
    ids = {node.name: _node_id(m, node) for node in net.nodes}
    v6, a, v4, b = (ids[n.name] for n in net.nodes)

    # Each dual-stack member links the IPv6-only one over IPv6 and the IPv4-only one over IPv4.
    for dual in (dual_a, dual_b):
        _wait(m, functools.partial(_linked_to, dual, {v6, v4}), LINK_TIMEOUT, f"{dual.name} linked to both")
    links = _links(dual_a)
    to_v6, to_v4 = links[v6], links[v4]
    print(f"\ndual -> v6-only: {_describe(to_v6)}\ndual -> v4-only: {_describe(to_v4)}")
    assert _address_family(to_v6) == 6 and to_v6["path"] == "direct", to_v6
    assert _address_family(to_v4) == 4, to_v4
    assert _address_family(_links(v6only)[a]) == 6
    # The MTU leaves room for the IPv6 header where a node has IPv6, on all its paths.
    assert to_v6["mtu"] == to_v4["mtu"] == 1408
    assert _links(v4only)[a]["mtu"] == 1428

    # No family in common: no tunnel between them, yet they reach each other over the overlay.
    a6, a4 = m.overlay_address[v6only.name], m.overlay_address[v4only.name]
    _wait(m, lambda: _pings(v4only, a6) and _pings(v6only, a4), 30, "the v4-only and v6-only members ping each other")
    before = {dual.name: _links(dual)[v6]["rx"]["frames"] for dual in (dual_a, dual_b)}
    seconds = _transfer(m, v4only, v6only, a6)
    carried = {dual.name: _links(dual)[v6]["rx"]["frames"] - before[dual.name] for dual in (dual_a, dual_b)}
    print(f"v4-only -> v6-only over the overlay: {TRANSFER} bytes in {seconds} s; frames from the v6-only member "
          f"through each dual-stack member: {carried}")
    assert v4 not in _links(v6only) and v6 not in _links(v4only)
    # Through a dual-stack member: the transfer's acknowledgements came to it on its tunnel from the v6-only one.
    assert max(carried.values()) >= 100, carried


def test_ipv6_only_and_ipv4_only_members_link_through_a_dual_stack_relay(two: Members) -> None:
    m = two
    v6only, v4only = m.net.nodes
    for node, (_, token) in zip(m.net.nodes, m.tokens(2), strict=True):
        m.join(node, token)
    v6, v4 = _node_id(m, v6only), _node_id(m, v4only)
    _wait(m, lambda: v4 in _links(v6only) and v6 in _links(v4only), LINK_TIMEOUT, "the two linked")
    link = _links(v6only)[v4]
    print(f"\nv6-only -> v4-only: {_describe(link)}")
    # The v6-only member reached coturn over IPv6 and has an IPv4 relay there: the pair is relay to relay.
    assert link["path"] == "relay" and link["local_candidate"] == "relay" and _address_family(link) == 4, link
    seconds = _transfer(m, v4only, v6only, m.overlay_address[v6only.name])
    print(f"v4-only -> v6-only through the relay: {TRANSFER} bytes in {seconds} s")
