"""Which tunnel offers the tunnel manager serves (issue 9): only for negotiated links, bounded, rate-limited.

Before, every well-formed offer from any member gathered sockets, allocated on
TURN with this node's credentials and made a TAP. Here the manager's answer
path (`Tunnel.prepare_answer`) is replaced by a spy so the tests see whether
any resource would have been allocated.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.tunnel import session
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.keys import Cipher
from evio.tunnel.datapath.tap import TapDevice
from evio.tunnel.errors import GatherTimeout, OfferError, SignalingFailed
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.offer_answer import IceParameters, TunnelAnswer, TunnelOffer

NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)
B = 0xBB << 120
CERT = TunnelCertificate.generate("x", NOW)
ICE = IceParameters("abcd", "a" * 22, ("candidate:1 1 UDP 2130706431 10.10.1.2 40000 typ host",))


def offer_from(peer: int, n: int = 0) -> dict[str, Any]:
    return TunnelOffer(f"tun-{peer:x}-{n}"[:64], peer, CERT.fingerprint, ICE, None, (Cipher.AES_256_GCM,)).to_body()


class Spy:
    def __init__(self) -> None:
        self.answers = 0
        self.release = asyncio.Event()
        self.release.set()

    async def prepare_answer(self, tunnel: session.Tunnel, offer: TunnelOffer) -> TunnelAnswer:
        self.answers += 1  # the real one gathers sockets and allocates on TURN here
        await self.release.wait()
        tunnel._pending_cipher = Cipher.AES_256_GCM  # what start_responder needs; it fails later, harmlessly
        tunnel._pending_fingerprint = offer.fingerprint
        return TunnelAnswer(offer.tunnel_id, B, CERT.fingerprint, ICE, None, Cipher.AES_256_GCM)


@pytest.fixture
async def spy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Spy]:
    spy = Spy()

    async def prepare(tunnel: session.Tunnel, offer: TunnelOffer) -> TunnelAnswer:
        return await spy.prepare_answer(tunnel, offer)

    monkeypatch.setattr(session.Tunnel, "prepare_answer", prepare)
    monkeypatch.setattr(session.Tunnel, "start_responder", lambda self: None)
    yield spy


def manager(hub: FakeTunnelSignalingHub, taps: list[str], **config: Any) -> TunnelManager:
    async def tap_factory(name: str, mtu: int) -> TapDevice:
        taps.append(name)
        return FakeTapDevice(name, mtu)

    m = TunnelManager(B, TunnelSettings(**config), CERT, hub.endpoint(B), tap_factory=tap_factory)
    m.start()
    return m


async def offer(hub: FakeTunnelSignalingHub, peer: int, body: dict[str, Any]) -> Exception | None:
    try:
        await hub.endpoint(peer).request(B, body, timeout=2.0)
    except (SignalingFailed, OfferError) as exc:
        return exc
    return None


async def test_offers_without_a_negotiated_link_are_refused_before_any_allocation(spy: Spy) -> None:
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, offer_burst=100)
    negotiated = {0x11}
    m.admit_offers(lambda peer: peer in negotiated)
    try:
        errors = [await offer(hub, 0x20 + i, offer_from(0x20 + i)) for i in range(30)]
        assert all(isinstance(e, SignalingFailed) for e in errors)
        assert spy.answers == 0 and taps == [] and m.tunnels() == {}
        assert m.refused_offers["not_negotiated"] == 30
        assert await offer(hub, 0x11, offer_from(0x11)) is None  # the negotiated peer is served
        assert spy.answers == 1 and set(m.tunnels()) == {0x11}
    finally:
        await m.close()


async def test_malformed_offers_are_counted_and_logged_once_per_peer(spy: Spy, caplog: pytest.LogCaptureFixture) -> None:
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, offer_burst=100)
    m.admit_offers(lambda peer: True)
    bad = offer_from(0x21)
    bad["ciphers"] = [{}]  # raised TypeError, with a traceback each time, before
    try:
        with caplog.at_level(logging.WARNING, logger="evio.tunnel.manager"):
            errors = [await offer(hub, 0x21, bad) for _ in range(20)]
        assert all(isinstance(e, OfferError) for e in errors)
        assert m.refused_offers["malformed"] == 20 and spy.answers == 0
        lines = [r for r in caplog.records if "offer refused" in r.getMessage()]
        assert len(lines) == 1 and not any(r.exc_info for r in caplog.records)
    finally:
        await m.close()


async def test_offers_are_rate_limited_per_peer(spy: Spy) -> None:
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, offer_burst=3, offers_per_s=0.001)
    m.admit_offers(lambda peer: False)
    try:
        for _ in range(10):
            await offer(hub, 0x22, offer_from(0x22))
        assert m.refused_offers == {"not_negotiated": 3, "rate_limited": 7}
        await offer(hub, 0x23, offer_from(0x23))  # another peer has its own budget
        assert m.refused_offers["not_negotiated"] == 4
    finally:
        await m.close()


async def test_pending_offers_and_tunnels_are_capped(spy: Spy) -> None:
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, max_pending_offers=2, max_tunnels=3)
    m.admit_offers(lambda peer: True)
    spy.release.clear()
    try:
        slow = [asyncio.create_task(offer(hub, p, offer_from(p))) for p in (0x31, 0x32)]
        while spy.answers < 2:
            await asyncio.sleep(0)
        assert isinstance(await offer(hub, 0x33, offer_from(0x33)), SignalingFailed)
        assert m.refused_offers["too_many_pending"] == 1 and spy.answers == 2
        spy.release.set()
        assert await asyncio.gather(*slow) == [None, None]
        assert await offer(hub, 0x33, offer_from(0x33)) is None
        assert isinstance(await offer(hub, 0x34, offer_from(0x34)), SignalingFailed)
        assert m.refused_offers["too_many_tunnels"] == 1 and len(m.tunnels()) == 3
    finally:
        await m.close()


async def test_an_answer_that_cannot_be_prepared_is_a_counted_refusal_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def no_candidates(tunnel: session.Tunnel, offer: TunnelOffer) -> TunnelAnswer:
        raise GatherTimeout("ICE candidates not gathered within 3 s")

    monkeypatch.setattr(session.Tunnel, "prepare_answer", no_candidates)
    hub, taps = FakeTunnelSignalingHub(), list[str]()
    m = manager(hub, taps, offer_burst=100)
    m.admit_offers(lambda peer: True)
    try:
        with caplog.at_level(logging.WARNING):
            errors = [await offer(hub, 0x22, offer_from(0x22, n)) for n in range(3)]
        assert all(isinstance(e, SignalingFailed) and "not gathered" in str(e) for e in errors), errors
        assert m.refused_offers["setup_failed"] == 3
        assert not any(r.exc_info for r in caplog.records)  # expected under load: no traceback
    finally:
        await m.close()
