"""`evio netcheck` on hosts behind real NAT routers classifies each kind of site (issue 22, deliverable 5).

One server host (prosody and coturn as `evio server init` configures them, coturn on two addresses so
that a node can compare its mappings toward two destinations) and four node hosts
(`evio.testing.internet`): behind an endpoint-independent NAT (whose WAN link carries only 1400-byte
packets), behind a symmetric NAT, on the public segment without NAT, and behind a router that drops
all UDP (nftables). Each node gets the config `evio join` would write for its token, with a second
STUN address; the first node's also names a TURN server nobody runs. No daemon runs: netcheck needs
none.

Printed with -s: each node's report, as an operator reads it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest

from evio.server.join import node_files
from evio.server.token import decode
from evio.testing.host_services import start_coturn, start_prosody
from evio.testing.hosts import Host
from evio.testing.internet import NFT_TABLE, SERVER_ADDRESS, Internet, Site

pytestmark = pytest.mark.integration

DOMAIN = "xmpp.example.net"
OVERLAY = "ov1"
SECOND_ADDRESS = "203.0.113.11"  # the server host's second address: a second STUN destination
DEAD_TURN = "203.0.113.99:3478"  # nobody has this address
WAN_MTU = 1400


@pytest.fixture(scope="module")
def net() -> Iterator[Internet]:
    with Internet([Site("eim"), Site("symmetric"), Site("none"), Site("eim")]) as net:
        server = net.server
        server.ip(f"address add {SECOND_ADDRESS}/24 dev eth0")  # before coturn starts, so it listens on both
        server.run(["evio", "server", "init", "--domain", DOMAIN, "--address", SERVER_ADDRESS])
        start_prosody(server)
        start_coturn(server)
        # Site 1: its router sends at most 1400 bytes to the WAN; the node's own link is 1500. (The public
        # side of the veth keeps 1500: lowered, it would lower the public bridge's MTU, and with it the
        # routed path of every site.)
        r1 = net.routers[0]
        assert r1 is not None
        r1.namespace.ip(f"link set wan mtu {WAN_MTU}")
        # Site 4: its router drops every UDP datagram it would forward, both ways.
        r4 = net.routers[3]
        assert r4 is not None
        r4.run(["nft", "add", "rule", "ip", NFT_TABLE, "forward", "meta", "l4proto", "udp", "drop"])
        for index, node in enumerate(net.nodes, start=1):
            _configure(net, node, f"node{index}", extra_turn=DEAD_TURN if index == 1 else None)
        yield net


def _configure(net: Internet, node: Host, name: str, extra_turn: str | None, second_stun: bool = True) -> None:
    """The files `evio join TOKEN` writes (without its Open vSwitch check: netcheck needs no bridge)."""
    token = net.server.run(["evio", "member", "add", name, "--overlay", OVERLAY]).stdout.strip()
    for file in node_files(decode(token, datetime.datetime.now(datetime.UTC))):
        real = node.path(file.path)
        real.parent.mkdir(parents=True, exist_ok=True)
        content = file.content
        if file.path.name == "config.json":
            document = json.loads(content)
            nat = document["overlays"][OVERLAY]["nat_traversal"]
            if second_stun:
                nat["stun"].append(f"{SECOND_ADDRESS}:3478")
            if extra_turn is not None:
                nat["turn"].append({**nat["turn"][0], "server": extra_turn})
            content = json.dumps(document, indent=2)
        real.write_text(content)
        real.chmod(file.mode)


def _netcheck(node: Host) -> tuple[int, dict[str, Any], str]:
    """The JSON report and the readable one (printed), and the exit status."""
    done = node.run(["evio", "netcheck", "--json"], check=False, timeout=60)
    assert done.returncode in (0, 1) and done.stdout.startswith("{"), done.stdout + done.stderr
    text = node.run(["evio", "netcheck"], check=False, timeout=60).stdout
    print(f"\n$ evio netcheck   # on {node.name}\n{text}")
    return done.returncode, json.loads(done.stdout), text


def _nat(report: dict[str, Any]) -> str:
    return str(next(n["kind"] for n in report["nat"] if n["family"] == "ipv4"))


def _verdict(report: dict[str, Any], subject: str) -> dict[str, Any]:
    return next(v for v in report["verdicts"] if v["subject"] == subject)


def _turn(report: dict[str, Any], transport: str, name: str = f"turn {SERVER_ADDRESS}:3478") -> dict[str, Any]:
    return next(t for t in report["turn"] if t["name"] == name and t["transport"] == transport)


def test_an_open_site_behind_an_eim_nat_with_a_dead_turn_server(net: Internet) -> None:
    status, report, _ = _netcheck(net.nodes[0])
    assert _nat(report) == "endpoint-independent", report["nat"]
    assert report["udp"]["state"] == "open"
    assert [f["source"] for f in report["families"] if f["family"] == "ipv6"] == [None]  # no IPv6 in this lab
    assert _turn(report, "udp")["outcome"] == "allocated" and _turn(report, "tcp")["outcome"] == "allocated"
    assert _turn(report, "tls")["outcome"] == "not-offered"  # init's coturn has no-tls
    # The dead one is named, with why, and costs only a warning: the live one relays.
    dead = _verdict(report, f"turn {DEAD_TURN}")
    assert dead["level"] == "warning" and "no answer" in dead["text"], dead
    xmpp = _verdict(report, f"xmpp {SERVER_ADDRESS}:5222 ({OVERLAY})")
    assert xmpp["level"] == "ok" and f"certificate valid for {DOMAIN}" in xmpp["text"], xmpp
    # The WAN link's 1400 bytes are found beyond the node's own 1500-byte link.
    assert {m["mtu"] for m in report["mtu"]} == {WAN_MTU}, report["mtu"]
    assert all(m["how"].startswith("largest DF-set probe answered") for m in report["mtu"]), report["mtu"]
    assert status == 0, report["verdicts"]
    # Measured again, not taken from the 1400 the kernel learnt from the router's ICMP the first time.
    _, again, _ = _netcheck(net.nodes[0])
    assert {m["mtu"] for m in again["mtu"]} == {WAN_MTU} and "route MTU 1400" in again["mtu"][0]["how"], again["mtu"]


def test_a_site_behind_a_symmetric_nat(net: Internet) -> None:
    status, report, _ = _netcheck(net.nodes[1])
    assert _nat(report) == "endpoint-dependent", report["nat"]
    assert report["udp"]["state"] == "open"
    assert {m["mtu"] for m in report["mtu"]} == {1500}, report["mtu"]
    assert status == 0, report["verdicts"]


def test_a_public_host_without_nat(net: Internet) -> None:
    status, report, _ = _netcheck(net.nodes[2])
    assert _nat(report) == "none", report["nat"]
    assert status == 0, report["verdicts"]


def test_a_site_whose_router_drops_all_udp(net: Internet) -> None:
    status, report, _ = _netcheck(net.nodes[3])
    assert report["udp"]["state"] == "blocked", report["udp"]
    assert _nat(report) == "unknown"
    assert _turn(report, "udp")["outcome"] == "no-answer"
    assert _turn(report, "tcp")["outcome"] == "allocated"  # TURN over TCP is the way out
    assert _verdict(report, "stun")["level"] == "problem"
    assert status == 1


def test_a_wrong_turn_password_is_a_problem_named_with_the_code(net: Internet) -> None:
    node = net.nodes[2]
    password = node.path(f"/etc/evio/{OVERLAY}/turn.password")
    good = password.read_text()
    password.write_text("not-the-password\n")
    try:
        status, report, _ = _netcheck(node)
    finally:
        password.write_text(good)
    refused = _verdict(report, f"turn {SERVER_ADDRESS}:3478")
    assert refused["level"] == "problem" and "401" in refused["text"], refused
    assert status == 1


# -- IPv6: an IPv6-only host and a dual-stack site (decision 0048) ------------------------------------------


@pytest.fixture(scope="module")
def net6() -> Iterator[Internet]:
    """A dual-stack server named "server" (A and AAAA, the name the token carries), an IPv6-only host on the
    public segment, and a dual-stack site: IPv4 behind an endpoint-independent NAT, IPv6 routed behind the
    router's stateful firewall."""
    with Internet([Site("none", ipv4=False, ipv6=True), Site("eim", ipv6=True)]) as net:
        server = net.server
        server.run(["evio", "server", "init", "--domain", DOMAIN, "--address", server.name])
        start_prosody(server)
        start_coturn(server)
        for index, node in enumerate(net.nodes, start=1):
            _configure(net, node, f"six{index}", extra_turn=None, second_stun=False)
        yield net


def _family(report: dict[str, Any], family: str) -> dict[str, Any]:
    return next(f for f in report["families"] if f["family"] == family)


def _mtu_families(report: dict[str, Any]) -> set[int]:
    return {6 if m["address"].startswith("[") else 4 for m in report["mtu"]}


def _nat_of(report: dict[str, Any], family: str) -> str:
    return str(next(n["kind"] for n in report["nat"] if n["family"] == family))


def test_an_ipv6_only_host_reaches_every_server_over_ipv6(net6: Internet) -> None:
    status, report, text = _netcheck(net6.nodes[0])
    assert _family(report, "ipv4")["source"] is None and _family(report, "ipv6")["source"], report["families"]
    assert _nat_of(report, "ipv6") == "none", report["nat"]
    assert report["udp"]["state"] == "open", report["udp"]
    allocated = {(t["transport"], t["outcome"]) for t in report["turn"]}
    assert ("udp", "allocated") in allocated and ("tcp", "allocated") in allocated, report["turn"]
    assert _mtu_families(report) == {6} and all(m["mtu"] == 1500 for m in report["mtu"]), report["mtu"]
    # The server's IPv4 address is not asked (no warning "Network is unreachable" for it): the host has no IPv4.
    assert [v for v in report["verdicts"] if v["level"] != "ok"] == [], report["verdicts"]
    assert {t["address"].startswith("[") for t in report["turn"]} == {True}, report["turn"]
    assert status == 0, report["verdicts"]


def test_a_dual_stack_site_is_natted_in_ipv4_and_routed_in_ipv6(net6: Internet) -> None:
    status, report, _ = _netcheck(net6.nodes[1])
    assert _family(report, "ipv4")["source"] and _family(report, "ipv6")["source"], report["families"]
    assert _nat_of(report, "ipv4") == "endpoint-independent", report["nat"]
    assert _nat_of(report, "ipv6") == "none", report["nat"]
    assert _mtu_families(report) == {4, 6}, report["mtu"]
    assert [v for v in report["verdicts"] if v["level"] != "ok"] == [], report["verdicts"]
    assert status == 0, report["verdicts"]
