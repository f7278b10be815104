"""Review21k K5: the coturn `evio server init` writes relays TCP for any member to anywhere public, the server's own
public address included ("A relay must not reach this host", says the file).

Attack (a hostile member, or anyone holding one member's TURN credentials, which every member's config carries):
`configs.coturn_config` denies the private, loopback, link-local, multicast and reserved ranges
(`DENIED_PEER_RANGES`) but (1) not `no-tcp-relay`, so coturn (4.6: "--no-tcp-relay  Do not allow TCP relay
endpoints", i.e. allowed unless set) grants RFC 6062 TCP allocations: CONNECT to any public address and port, from
the operator's server address. evio's tunnels never ask for one (they allocate UDP relays; TURN over TCP/TLS,
decision 0049, is the client's leg only). A member thus has an open TCP proxy: SMTP (25) spam, scans and logins
that the world attributes to the operator's server; and (2) not the server's own public address (`--address`,
which init knows), so a relay (UDP, or TCP as above) reaches this very host's public services as a peer on the
internet would not (firewall rules trusting the host's own address, XMPP's s2s and HTTP ports, coturn's own
listener: a relay loop on one allocation).

Measured: `run_init` with `--address 203.0.113.7` writes a turnserver.conf with no `no-tcp-relay` line and no
`denied-peer-ip` covering 203.0.113.7. Checked with this machine's coturn 4.6.1 (long-term credentials, no
`no-tcp-relay`, as init writes it): an ALLOCATE with REQUESTED-TRANSPORT TCP (6) was answered with success and a
relayed address.

Impact: medium: abuse of the operator's server and reputation by any member, and its own services reached from
"outside" through it; no member's traffic is touched.

Fixed: `no-tcp-relay` (the own-address half not taken, see the test). Suggested fix: write `no-tcp-relay` (evio needs UDP relays only), and `denied-peer-ip=<address>` for the server's
own address when it is an IP (and each `listening-ip`/`external-ip`), as issue 21 (5) asks of a node's candidates
("this node's own addresses"); resolve a DNS `--address` at init and deny what it names, with a note.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from evio.server.init import run_init
from tests.unit.server.test_server_init import _options

NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
SERVER = "203.0.113.7"


def _denied(address: str, ranges: list[str]) -> bool:
    ip = ipaddress.ip_address(address)
    for text in ranges:
        low, _, high = text.partition("-")
        first, last = ipaddress.ip_address(low), ipaddress.ip_address(high or low)
        if first.version == ip.version and first <= ip <= last:  # type: ignore[operator]
            return True
    return False


def test_the_turn_server_relays_no_tcp_and_still_lets_two_of_its_relays_reach_each_other(tmp_path: Path) -> None:
    """Fixed: `no-tcp-relay`. The second half of the suggestion is not taken: denying the server's own address
    breaks two members both relayed by this server (each relay's peer is the other's relayed address, on this
    host; tests/integration/node/test_node_udp_blocked_site.py failed with it). The file says so instead."""
    run_init(_options(tmp_path, address=SERVER), NOW)
    text = (tmp_path / "turnserver.conf").read_text()
    lines = text.splitlines()
    ranges = [line.split("=", 1)[1] for line in lines if line.startswith("denied-peer-ip=")]
    assert "no-tcp-relay" in lines
    assert not _denied(SERVER, ranges)
    assert "keep its other services" in text
