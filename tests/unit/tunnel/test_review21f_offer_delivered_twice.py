"""Review21f F7: an offer delivered twice replaces the tunnel it made.

Along the ring (decision 0064) a relay may hold a signed offer and hand it on later: it stays fresh for 60 s (clocks
differ) and the target's replay table knows only what came along the ring. The origin meanwhile fell back to the
server after 6 s with the same offer (same tunnel id, same ICE credentials), the target served it and the tunnel came
up. The held copy then arrives: the manager took it for a new offer from the peer, closed the working tunnel
("replaced by a new offer from the peer") and answered with new credentials nobody waits for. A member on the route
between two others thus keeps them from keeping a tunnel, where dropping would only have sent them through the
server. Fixed: an offer for the very tunnel the peer's active one is (its tunnel id) is answered with that tunnel's
answer again, and nothing is replaced. The tunnel manager's answer path is a spy, as in
tests/unit/tunnel/test_tunnel_offer_admission.py."""

from __future__ import annotations

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from tests.unit.tunnel.test_tunnel_offer_admission import Spy, manager, offer, offer_from, spy  # noqa: F401 (a fixture)


async def test_f7_the_same_offer_again_does_not_replace_the_tunnel_it_made(spy: Spy) -> None:  # noqa: F811
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, offer_burst=100)
    m.admit_offers(lambda peer: True)
    try:
        body = offer_from(0x41)
        assert await offer(hub, 0x41, body) is None  # through the server, after the ring's timeout
        first = m.tunnels()[0x41]
        assert await offer(hub, 0x41, body) is None  # the copy a relay held, handed on within its 60 s
        assert m.tunnels()[0x41] is first and first.active
        assert spy.answers == 1
    finally:
        await m.close()
