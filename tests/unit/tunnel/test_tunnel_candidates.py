"""Which remote candidates a node tries (issue 21, M3): never loopback, link-local, multicast, ...

A member's offer (or answer) lists up to 32 direct and 32 relay candidates, and
each one is an address this node sends ICE checks to (direct) or has its TURN
server send them to (relay). Before, any address was taken: 127.0.0.1,
0.0.0.0, 169.254.169.254 (a cloud's metadata service), multicast, broadcast.
Here the offer goes through the real offer admission and ICE setup (real
aioice gathering on loopback, fake TAPs and signaling), and the candidates
the agent is left with are checked.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
from collections.abc import Iterator

import aioice.ice
import pytest

from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.keys import Cipher
from evio.tunnel.datapath.tap import TapDevice
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.candidates import (
    DROP_LOG_INTERVAL,
    CandidateDrop,
    CandidateDrops,
    CandidatePolicy,
    LocalNetworks,
    candidate_drop,
    local_networks,
)
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.ice import IceConfig, RelayPolicy
from evio.tunnel.path.offer_answer import IceParameters, TunnelOffer

NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
B, PEER = 0xBB << 120, 0x11 << 120
CERT = TunnelCertificate.generate("x", NOW)
FORBIDDEN = ["127.0.0.1", "0.0.0.0", "169.254.169.254", "224.0.0.251", "255.255.255.255", "fe80::1", "::1", "ff02::1",
             "::ffff:127.0.0.1", "10.99.0.7"]
GOOD = "203.0.113.77"


def candidate(host: str, n: int) -> str:
    return f"candidate:{n} 1 UDP {2130706431 - n} {host} {40000 + n} typ host"


def host_address() -> ipaddress.IPv4Address:
    """One of this host's own IPv4 addresses that is not loopback (an agent gathering only loopback ones
    is taken for a one-host test, whose peers' loopback candidates are tried)."""
    for address in sorted(local_networks().addresses, key=str):
        if isinstance(address, ipaddress.IPv4Address) and not (address.is_loopback or address.is_link_local):
            return address
    pytest.skip("this host has no IPv4 address but loopback")


@pytest.fixture
def on_host_address(monkeypatch: pytest.MonkeyPatch) -> Iterator[ipaddress.IPv4Address]:
    address = host_address()
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: [str(address)])
    yield address


async def test_an_offer_pointing_the_node_at_forbidden_addresses_is_answered_without_them(
    on_host_address: ipaddress.IPv4Address,
) -> None:
    hub = FakeTunnelSignalingHub()

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        return FakeTapDevice(name, mtu)

    # 10.99.0.0/16 is the overlay's subnet here: a tunnel over the overlay would loop.
    config = TunnelSettings(ice=IceConfig(relay=RelayPolicy.NEVER, exclude_networks=("10.99.0.0/16",)))
    m = TunnelManager(B, config, CERT, hub.endpoint(B), tap_factory=tap_factory)
    m.start()
    m.admit_offers(lambda peer: True)
    # The directed broadcast of one of this host's subnets, if it has one that is not loopback's.
    own_broadcast = min((b for b in local_networks().broadcasts if not b.is_loopback), default=None)
    hosts = [*FORBIDDEN, str(on_host_address), *([str(own_broadcast)] if own_broadcast else []), "100.100.100.200", GOOD]
    ice = IceParameters("abcd", "a" * 22, tuple(candidate(h, i) for i, h in enumerate(hosts)))
    body = TunnelOffer("tun-candidates", PEER, CERT.fingerprint, ice, None, (Cipher.AES_256_GCM,)).to_body()
    try:
        await hub.endpoint(PEER).request(B, body, timeout=5.0)
        tunnel = m.get(PEER)
        assert tunnel is not None and tunnel._ice is not None and tunnel._ice.direct is not None
        tried = {c.host for c in tunnel._ice.direct.remote_candidates}
        assert tried == {GOOD}
        assert m.dropped_candidates.as_dict() == {
            "loopback": 3, "unspecified": 1, "link-local": 2, "multicast": 2, "broadcast": 2 if own_broadcast else 1,
            "overlay": 1, "own-address": 1, "denied": 1,
        }
    finally:
        await m.close()


LOCAL = LocalNetworks.of([ipaddress.ip_interface("192.168.7.20/24"), ipaddress.ip_interface("2001:db8::5/64"),
                          ipaddress.ip_interface("127.0.0.1/8")])
POLICY = CandidatePolicy(deny=(ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("100.100.100.200/32"),
                               ipaddress.ip_network("fd00:ec2::254/128")),
                         overlay=(ipaddress.ip_network("10.254.0.0/16"),))


@pytest.mark.parametrize(("host", "relayed", "reason"), [
    ("0.0.0.0", False, CandidateDrop.UNSPECIFIED),
    ("0.1.2.3", False, CandidateDrop.UNSPECIFIED),
    ("::", False, CandidateDrop.UNSPECIFIED),
    ("127.0.0.1", False, CandidateDrop.LOOPBACK),
    ("127.1.2.3", True, CandidateDrop.LOOPBACK),
    ("::1", False, CandidateDrop.LOOPBACK),
    ("::ffff:127.0.0.1", False, CandidateDrop.LOOPBACK),
    ("169.254.169.254", True, CandidateDrop.LINK_LOCAL),
    ("fe80::1%eth0", False, CandidateDrop.LINK_LOCAL),
    ("224.0.0.251", False, CandidateDrop.MULTICAST),
    ("239.1.1.1", True, CandidateDrop.MULTICAST),
    ("ff02::1", False, CandidateDrop.MULTICAST),
    ("255.255.255.255", False, CandidateDrop.BROADCAST),
    ("192.168.7.255", True, CandidateDrop.BROADCAST),  # this node's subnet's directed broadcast
    ("10.254.3.4", False, CandidateDrop.OVERLAY),
    ("10.254.3.4", True, CandidateDrop.OVERLAY),
    ("192.168.7.20", False, CandidateDrop.OWN_ADDRESS),
    ("2001:db8::5", False, CandidateDrop.OWN_ADDRESS),
    ("192.168.7.20", True, None),  # a relay candidate: the TURN server may run on this host
    ("100.100.100.200", False, CandidateDrop.DENIED),
    ("fd00:ec2::254", True, CandidateDrop.DENIED),
    ("192.168.7.21", False, None),  # a peer on the same LAN
    ("203.0.113.9", False, None),
    ("2001:db8:1::9", True, None),
])
def test_candidate_drop_reasons(host: str, relayed: bool, reason: CandidateDrop | None) -> None:
    assert candidate_drop(host, relayed, POLICY, LOCAL) is reason


def test_peers_on_one_host_may_use_loopback_and_this_hosts_addresses_but_nothing_else() -> None:
    one_host = CandidatePolicy(POLICY.deny, POLICY.overlay, allow_local=True)
    assert candidate_drop("127.0.0.3", False, one_host, LOCAL) is None
    assert candidate_drop("192.168.7.20", False, one_host, LOCAL) is None
    assert candidate_drop("169.254.169.254", False, one_host, LOCAL) is CandidateDrop.LINK_LOCAL
    assert candidate_drop("0.0.0.0", False, one_host, LOCAL) is CandidateDrop.UNSPECIFIED


def test_dropped_candidates_are_counted_by_reason_and_logged_once_per_peer_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    drops = CandidateDrops(lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="evio.tunnel.path.candidates"):
        for _ in range(5):
            drops.dropped(PEER, CandidateDrop.LOOPBACK, "127.0.0.1 port 1")
        drops.dropped(B, CandidateDrop.DENIED, "100.100.100.200 port 1")
        now[0] = DROP_LOG_INTERVAL
        drops.dropped(PEER, CandidateDrop.LOOPBACK, "127.0.0.1 port 1")
    assert drops.as_dict() == {"denied": 1, "loopback": 6}
    assert len([r for r in caplog.records if "candidate dropped" in r.getMessage()]) == 3
