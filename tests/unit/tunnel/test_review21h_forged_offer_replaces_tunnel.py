"""Review21h H7: the XMPP server ends any tunnel at will with an offer it forges in the peer's name.

Attack: offers through the server are not signed (`offer_answer`: the body carries the peer's node id, ICE
parameters and a DTLS fingerprint, nothing the server cannot write), and `TunnelManager._on_offer` treats an offer
from a peer it has a live tunnel with as "the peer restarted": the offer policy admits it (`expects_tunnel`: a link
up may be replaced) and the live tunnel is closed ("replaced by a new offer from the peer") *before* anything
proves the offer came from the peer. In trust mode the replacement then fails its DTLS check (the server holds no
certificate of the peer's), but the tunnel that worked is gone. A hostile or compromised XMPP server thus cuts
every tunnel between members, one forged message per tunnel, again each second (`offers_per_s`), although trust
mode is meant to keep the overlay working without trusting the server (tunnels, ring signaling of decision 0064).
A member cannot do this to others' tunnels: only the server writes another account's messages.

Measured (TunnelManager with the answer path stubbed, as in test_tunnel_offer_admission.py): after a forged offer
"from" the peer, with another tunnel id and a fingerprint of a certificate not the peer's, the peer's tunnel was
closed and replaced by the forged one's.

Fixed: an offer from a peer whose tunnel is up replaces it only if the peer does not answer an echo on it
within 1 s (`REPLACE_PROBE_TIMEOUT`); refused as `tunnel_alive` otherwise. Proposed at the review: make before break: a new offer from a peer with a live tunnel sets up the new tunnel beside the old
one and swaps only once the new one's DTLS verified against the trust anchor as that peer (the old one closed
then); or, in trust mode, take a replacing offer only signed with the peer's certificate key (as the ring's sealed
messages are) or only along the ring.
"""

from __future__ import annotations

import asyncio

import pytest

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import A, B
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.keys import Cipher
from evio.tunnel.errors import SignalingFailed
from evio.tunnel.lifecycle import TunnelState
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.offer_answer import TunnelOffer
from tests.unit.tunnel.test_tunnel_offer_admission import ICE, NOW
from tests.unit.tunnel.test_tunnel_session import PROBED, connected_pair

pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py
FORGER_CERT = TunnelCertificate.generate("forged", NOW)


def _forged() -> dict[str, object]:
    return TunnelOffer(f"tun-forged-{A:x}"[:64], A, FORGER_CERT.fingerprint, ICE, None, (Cipher.AES_256_GCM,)).to_body()


async def test_an_offer_the_server_forges_does_not_close_the_peers_tunnel(hub: FakeTunnelSignalingHub) -> None:
    async with connected_pair(hub, PROBED) as (a, b):
        tunnel = b.manager.get(A)
        assert tunnel is not None and tunnel.state is TunnelState.UP
        with pytest.raises(SignalingFailed):
            await hub.endpoint(A).request(B, _forged(), timeout=5.0)  # the server writes it in A's name
        assert b.manager.get(A) is tunnel and tunnel.state is TunnelState.UP, tunnel.info.reason
        assert b.manager.refused_offers["tunnel_alive"] == 1 and not a.downs() and not b.downs()


async def test_an_offer_from_a_peer_that_restarted_still_replaces_its_dead_tunnel(hub: FakeTunnelSignalingHub) -> None:
    async with connected_pair(hub, PROBED) as (a, b):
        old = b.manager.get(A)
        a_end = a.manager.get(B)
        assert old is not None and a_end is not None
        a_end._datapath.stop()  # A's process is gone: nothing answers on the old tunnel
        request = asyncio.ensure_future(hub.endpoint(A).request(B, _forged(), timeout=10.0))
        await wait_until(lambda: not old.active, timeout=5.0)
        assert old.info.reason == "replaced by a new offer from the peer"
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
