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

Proposed fix: make before break: a new offer from a peer with a live tunnel sets up the new tunnel beside the old
one and swaps only once the new one's DTLS verified against the trust anchor as that peer (the old one closed
then); or, in trust mode, take a replacing offer only signed with the peer's certificate key (as the ring's sealed
messages are) or only along the ring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.tunnel import session
from evio.tunnel.datapath.keys import Cipher
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.offer_answer import TunnelOffer
from tests.unit.tunnel.test_tunnel_offer_admission import CERT, ICE, NOW, Spy, manager, offer, offer_from

P = 0x51
FORGER_CERT = TunnelCertificate.generate("forged", NOW)


@pytest.fixture
async def answers(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Spy]:
    spy = Spy()

    async def prepare(tunnel: session.Tunnel, offer: TunnelOffer) -> object:
        return await spy.prepare_answer(tunnel, offer)

    monkeypatch.setattr(session.Tunnel, "prepare_answer", prepare)
    monkeypatch.setattr(session.Tunnel, "start_responder", lambda self: None)
    yield spy


@pytest.mark.xfail(strict=True, reason="review21h H7: an unsigned offer through the server closes the peer's tunnel")
async def test_an_offer_the_server_forges_does_not_close_the_peers_tunnel(answers: Spy) -> None:
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps)
    m.admit_offers(lambda peer: True)  # a link with P is up: the policy admits a replacement
    try:
        assert await offer(hub, P, offer_from(P, 1)) is None
        tunnel = m.get(P)
        assert tunnel is not None and tunnel.active
        forged = TunnelOffer(f"tun-forged-{P:x}", P, FORGER_CERT.fingerprint, ICE, None, (Cipher.AES_256_GCM,))
        await offer(hub, P, forged.to_body())  # the server writes it in P's name
        assert CERT.fingerprint != FORGER_CERT.fingerprint
        assert m.get(P) is tunnel and tunnel.active, f"P's tunnel {tunnel.info.state.value}: {tunnel.info.reason}"
    finally:
        await m.close()
