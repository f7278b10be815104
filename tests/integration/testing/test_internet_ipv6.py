"""The simulated internet's IPv6 (evio.testing.internet): a dual-stack server, IPv6-only and dual-stack sites.

The home router's IPv6 is routed, not translated, behind a stateful firewall (RFC 6092): the server
sees a dual-stack node's own address, and nothing unsolicited gets in; the families stay apart.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evio.testing.host_services import is_listening
from evio.testing.hosts import Host
from evio.testing.internet import SERVER_ADDRESS, Internet, Site
from evio.testing.waiting import wait_until_blocking

pytestmark = pytest.mark.integration

# argv: the address to bind, the port; prints each datagram's source and echoes it back.
UDP_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, addr = s.recvfrom(100)
    s.sendto(addr[0].encode(), addr)
"""
UDP_ASK = """
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
print(s.recv(100).decode())
"""
TCP_LISTEN = """
import socket, time
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 8080))
s.listen()
time.sleep(600)
"""
TCP_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.5).close()
    print("connected")
except TimeoutError:
    print("timeout")
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.fixture(scope="module")
def net() -> Iterator[Internet]:
    with Internet([Site("none", ipv4=False, ipv6=True), Site("eim", ipv6=True), Site("eim")]) as internet:
        yield internet


def _pings(host: Host, address: str) -> bool:
    return host.run(["ping", "-c1", "-W1", address], check=False, timeout=5).returncode == 0


def test_each_site_reaches_the_server_in_the_families_it_has(net: Internet) -> None:
    v6only, dual, v4only = net.nodes
    server6 = net.server.ipv6_address
    assert (v6only.ipv6_address, dual.ipv6_address, v4only.ipv6_address) == ("2001:db8::101", "2001:db8:2::2", "")
    assert _pings(v6only, server6) and not _pings(v6only, SERVER_ADDRESS)
    assert _pings(dual, server6) and _pings(dual, SERVER_ADDRESS)
    assert _pings(v4only, SERVER_ADDRESS) and not _pings(v4only, server6)
    assert _pings(v6only, "server")  # the name resolves to the family the host has
    assert not v6only.run(["ip", "-4", "route", "show"]).stdout.strip()
    assert _pings(v6only, dual.ipv6_address)  # ICMPv6 passes the router's firewall (RFC 4890), connections do not
    assert _pings(net.server, v6only.ipv6_address)  # a public host answers ping (ICMPv6 is let in)


def test_the_dual_stack_site_is_routed_not_translated_and_firewalled(net: Internet) -> None:
    v6only, dual, _ = net.nodes
    echo = net.server.spawn(["python3", "-c", UDP_ECHO, "::", "40003"])
    listeners = [host.spawn(["python3", "-c", TCP_LISTEN]) for host in (v6only, dual)]
    try:
        wait_until_blocking(lambda: is_listening(net.server, "udp", 40003) and all(
            is_listening(h, "tcp", 8080) for h in (v6only, dual)), 10, what="listeners")
        seen = dual.run(["python3", "-c", UDP_ASK, net.server.ipv6_address, "40003"]).stdout.strip()
        inbound = {h.name: net.server.run(["python3", "-c", TCP_CONNECT, h.ipv6_address, "8080"]).stdout.strip()
                   for h in (v6only, dual)}
        # Nothing listens on the server's 8081: its reset is a reply, and comes back through the firewall.
        outbound = dual.run(["python3", "-c", TCP_CONNECT, net.server.ipv6_address, "8081"]).stdout.strip()
    finally:
        echo.stop()
        for listener in listeners:
            listener.stop()
    assert seen == dual.ipv6_address  # no NAT66: the server sees the host's own address
    assert inbound == {v6only.name: "timeout", dual.name: "timeout"}
    assert outbound == "ConnectionRefusedError"
