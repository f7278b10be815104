"""A site whose router drops all UDP joins an overlay and carries traffic over TURN/TCP; two coturns, the first
killed (issue 22, decision 0049).

The operator's path as in tests/integration/test_operations.py (`evio.testing.internet`, `evio.testing.hosts`: a
server host with prosody and coturn from `evio server init`, node hosts joined by token, each with its own Open
vSwitch and `evio run`); node2's router drops every UDP datagram it would forward. The second coturn runs on the
server host from the same configuration on another port (same accounts); each node's config lists both.

Printed with -s: how long node2 took from `evio run` to its first ping, the TCP rate through its link, and how long
the link took to carry traffic again once the coturn under it was killed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from evio.testing.host_services import is_listening, start_coturn, start_openvswitch, start_prosody
from evio.testing.hosts import Host, HostProcess
from evio.testing.internet import SERVER_ADDRESS, Internet, Site
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

DOMAIN = "xmpp.example.net"
OVERLAY = "ov1"
CONFIG = "/etc/evio/config.json"
SECOND_TURN_PORT = 3490
JOINED_WITHIN = 10.0  # issue 22: a UDP-blocked node joins within this
FAILOVER_WITHIN = 2.0  # issue 22: with the first coturn killed, relayed links carry traffic again within this


def _status(node: Host) -> dict:
    done = node.run(["evio", "status", "--json"], check=False, timeout=10)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _links(node: Host) -> list[dict]:
    return [link for link in _status(node).get("overlays", {}).get(OVERLAY, {}).get("links", []) if link.get("state") == "up"]


def _pings(node: Host, address: str, wait: float = 1.0) -> bool:
    return node.run(["ping", "-c1", f"-W{wait:g}", address], check=False, timeout=5).returncode == 0


def _overlay_address(node: Host) -> str:
    return str(json.loads(node.path(CONFIG).read_text())["overlays"][OVERLAY]["bridge"]["address"]).split("/")[0]


def _add_second_turn(node: Host) -> None:
    """The node's config lists the second coturn after the first (same account: both read the same userdb)."""
    path = node.path(CONFIG)
    config = json.loads(path.read_text())
    turn = config["overlays"][OVERLAY]["nat_traversal"]["turn"]
    second = dict(turn[0], server=f"{SERVER_ADDRESS}:{SECOND_TURN_PORT}")
    turn.append(second)
    path.write_text(json.dumps(config, indent=2))


def _iperf(client: Host, server: Host, address: str, seconds: int = 3) -> float:
    listener = server.spawn(["iperf3", "-s", "-1", "-B", address])
    try:
        wait_until_blocking(lambda: is_listening(server, "tcp", 5201), 10, what="iperf3 listening")
        done = client.run(["iperf3", "-c", address, "-t", str(seconds), "-J"], timeout=seconds + 30)
        return float(json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]) / 1e6
    finally:
        listener.stop(5)


@pytest.fixture
def internet() -> Iterator[tuple[Internet, ExitStack]]:
    with ExitStack() as stack:
        net = stack.enter_context(Internet([Site("eim"), Site("eim")]))
        yield net, stack


def test_a_udp_blocked_site_joins_over_turn_tcp_and_the_link_survives_its_coturn_killed(internet: tuple[Internet, ExitStack]) -> None:
    net, _ = internet
    server = net.server
    server.run(["evio", "server", "init", "--domain", DOMAIN, "--address", SERVER_ADDRESS])
    start_prosody(server)
    first = start_coturn(server)
    # The second coturn from the same configuration on another port (same accounts); both up before the nodes
    # start, so each relayed tunnel keeps its standby on the one its path does not use (decision 0057).
    second = server.spawn(["turnserver", "-c", "/etc/turnserver.conf", "--pidfile=", f"--listening-port={SECOND_TURN_PORT}",
                           f"--alt-listening-port={SECOND_TURN_PORT + 1}"], user="turnserver", cwd="/")  # fmt: skip
    router = net.routers[1]
    assert router is not None
    ruleset = "table inet evio_no_udp {\n  chain forward { type filter hook forward priority -10; policy accept; meta l4proto udp drop; }\n}\n"
    router.namespace.run(["nft", "-f", "-"], input=ruleset)

    daemons: dict[str, HostProcess] = {}
    addresses: dict[str, str] = {}
    started: dict[str, float] = {}
    try:
        wait_until_blocking(lambda: is_listening(server, "tcp", SECOND_TURN_PORT), 10, what="the second coturn")
        for name, node in zip(("node1", "node2"), net.nodes, strict=True):
            start_openvswitch(node)
            token = server.run(["evio", "member", "add", name, "--overlay", OVERLAY]).stdout.strip()
            node.run(["evio", "join", token])
            _add_second_turn(node)
            addresses[name] = _overlay_address(node)
            started[name] = time.monotonic()
            daemons[name] = node.spawn(["evio", "run", "--config", CONFIG])
        node1, node2 = net.nodes
        wait_until_blocking(lambda: _pings(node2, addresses["node1"]), 30, what="node2 pings node1", interval=0.05)
        joined = time.monotonic() - started["node2"]
        link = _links(node2)[0]
        assert (link["path"], link["transport"]) == ("relay", "tcp"), link
        assert _pings(node1, addresses["node2"])
        assert "relay/tcp" in node2.run(["evio", "status"]).stdout
        rate = _iperf(node2, node1, addresses["node1"])
        back = _iperf(node1, node2, addresses["node2"])
        print(f"\nUDP-blocked node2: first ping {joined:.2f} s after `evio run`; TCP over TURN/TCP {rate:.0f} Mbit/s out,"
              f" {back:.0f} Mbit/s in (load {os.getloadavg()[0]:.2f})")  # fmt: skip
        assert joined <= JOINED_WITHIN

        # Both ends hold a checked standby on the other coturn; then the coturn under the link is killed.
        def standby(node: Host) -> dict:
            links = _links(node)
            return (links[0].get("relay") or {}) if links else {}

        wait_until_blocking(lambda: all(standby(n).get("standby") == "ready" for n in (node1, node2)), 30,
                            what="both ends' standby relay checked", interval=0.2)  # fmt: skip
        before = standby(node2)
        assert before["allocations"] == 2 and before["server"] != before["standby_server"], before
        under = second.pid if str(before["server"]).endswith(f":{SECOND_TURN_PORT}") else first.processes[0].pid
        os.kill(under, signal.SIGKILL)
        killed = time.monotonic()
        wait_until_blocking(lambda: _pings(node2, addresses["node1"], 0.2), 30, what="node2 pings node1 again", interval=0.01)
        again = time.monotonic() - killed
        wait_until_blocking(lambda: bool(_links(node2)), 10, what="node2's link up again")
        after = _links(node2)[0]
        print(f"coturn {before['server']} (under the link) killed: traffic again after {again:.2f} s"
              f" (load {os.getloadavg()[0]:.2f}); link now {after['path']}/{after['transport']} on {after['relay']}")  # fmt: skip
        assert _pings(node1, addresses["node2"])
        assert after["relay"]["server"] == before["standby_server"] and after["relay"]["failovers"] == 1, after
        assert again < FAILOVER_WITHIN, again
    except BaseException:
        for name, process in daemons.items():
            print(f"--- {name} ({'alive' if process.alive() else f'exited {process.returncode}'})\n{process.tail(40)}")
        raise
    finally:
        for process in daemons.values():
            process.stop()
        if second.alive():
            second.stop(5)
