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
from collections.abc import Iterator

import aioice.ice
import pytest

from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.tunnel.config import TunnelSettings
from evio.tunnel.dtls import TunnelCertificate
from evio.tunnel.ice import IceConfig, RelayPolicy
from evio.tunnel.keys import Cipher
from evio.tunnel.manager import TunnelManager
from evio.tunnel.signaling import IceParameters, TunnelOffer
from evio.tunnel.tap import TapDevice

NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)
B, PEER = 0xBB << 120, 0x11 << 120
CERT = TunnelCertificate.generate("x", NOW)
FORBIDDEN = ["127.0.0.1", "0.0.0.0", "169.254.169.254", "224.0.0.251", "255.255.255.255", "fe80::1", "::1", "ff02::1",
             "::ffff:127.0.0.1", "10.99.0.7"]
GOOD = "192.0.2.10"


def candidate(host: str, n: int) -> str:
    return f"candidate:{n} 1 UDP {2130706431 - n} {host} {40000 + n} typ host"


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2"])
    yield


@pytest.mark.xfail(strict=True, reason="issue 21 M3: any address is tried")
async def test_an_offer_pointing_the_node_at_forbidden_addresses_is_answered_without_them() -> None:
    hub = FakeTunnelSignalingHub()

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        return FakeTapDevice(name, mtu)

    # 10.99.0.0/16 is the overlay's subnet here: a tunnel over the overlay would loop.
    config = TunnelSettings(ice=IceConfig(relay=RelayPolicy.NEVER, exclude_networks=("10.99.0.0/16",)))
    m = TunnelManager(B, config, CERT, hub.endpoint(B), tap_factory=tap_factory)
    m.start()
    m.admit_offers(lambda peer: True)
    hosts = [*FORBIDDEN, GOOD]
    ice = IceParameters("abcd", "a" * 22, tuple(candidate(h, i) for i, h in enumerate(hosts)))
    body = TunnelOffer("tun-candidates", PEER, CERT.fingerprint, ice, None, (Cipher.AES_256_GCM,)).to_body()
    try:
        await hub.endpoint(PEER).request(B, body, timeout=5.0)
        tunnel = m.get(PEER)
        assert tunnel is not None and tunnel._ice is not None and tunnel._ice.direct is not None
        tried = {c.host for c in tunnel._ice.direct.remote_candidates}
        assert tried == {GOOD}
        assert m.dropped_candidates == {
            "loopback": 3, "unspecified": 1, "link-local": 2, "multicast": 2, "broadcast": 1, "overlay": 1,
        }
    finally:
        await m.close()
