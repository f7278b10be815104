"""Tunnels end to end in one process: real aioice, DTLS and data path over loopback, fake TAPs and signaling.

aioice gathers host candidates from every interface but 127.0.0.1; the
``loopback_only`` fixture makes it use 127.0.0.2 (still loopback), so these
tests need neither root nor a network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from evio.config.model import Cipher
from evio.node.status import link_document
from evio.testing.datapath_pair import RAPID_EPOCHS, collected
from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.fake_tunnel_signaling import FakeTunnelSignalingHub
from evio.testing.tunnel_nodes import FAST, FRAME, NOW, A, B, Node, make_node
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings, tap_name
from evio.tunnel.datapath.keys import RekeyPolicy
from evio.tunnel.datapath.tap import TapDevice
from evio.tunnel.errors import SetupError, TunnelError
from evio.tunnel.lifecycle import TunnelState
from evio.tunnel.liveness import LivenessConfig, LivenessState
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.ice import IceConfig, PathKind, RelayPolicy
from evio.tunnel.path.offer_answer import Body
from evio.tunnel.pmtu import PmtuSource
from evio.tunnel.session import TunnelEvent, TunnelUp

pytestmark = pytest.mark.usefixtures("loopback_only")  # tests/conftest.py


async def test_tunnel_comes_up_carries_frames_and_closes_cleanly(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    info = await a.manager.connect(B)
    assert info.state is TunnelState.UP and info.path is PathKind.DIRECT
    assert (info.initiator, info.controlling) == (True, False)
    assert info.setup_seconds is not None and info.setup_seconds < 2.0
    await wait_until(lambda: len(b.ups()) == 1)
    assert b.ups()[0].info.controlling and b.ups()[0].info.tunnel_id == info.tunnel_id
    assert a.taps[0].mtu == 1428 and a.taps[0].name == tap_name("evt", B)
    for _ in range(20):
        a.taps[0].tap.send_frame(FRAME)
        b.taps[0].tap.send_frame(FRAME[::-1])
    got_b: list[bytes] = []
    got_a: list[bytes] = []
    await wait_until(collected(b.taps[0].tap, got_b, 20))
    await wait_until(collected(a.taps[0].tap, got_a, 20))
    assert got_b == [FRAME] * 20 and got_a == [FRAME[::-1]] * 20
    await a.manager.disconnect(B)
    await wait_until(lambda: len(b.downs()) == 1)
    assert b.downs()[0].info.reason == "peer-closed"
    assert a.downs()[0].info.state is TunnelState.CLOSED
    assert a.manager.get(B) is None and b.manager.get(A) is None
    assert all(t.closed for t in a.taps + b.taps)


async def test_wrong_fingerprint_never_yields_a_link(hub: FakeTunnelSignalingHub) -> None:
    config = TunnelSettings(liveness=FAST)
    impostor = TunnelCertificate.generate("impostor", NOW)

    def swap_fingerprint(src: int, dst: int, body: Body) -> Body:
        if src == B:  # B's answer names a certificate B does not hold
            body["fingerprint"] = str(impostor.fingerprint)
        return body

    hub.tamper = swap_fingerprint
    a, b = make_node(hub, A, config), make_node(hub, B, config)
    try:
        with pytest.raises(SetupError):
            await a.manager.connect(B)
        await wait_until(lambda: len(b.downs()) == 1)
        assert not a.ups() and not b.ups()
        assert a.downs()[0].info.state is TunnelState.FAILED
        assert "fingerprint" in (a.downs()[0].info.reason or "") or "fingerprint" in (b.downs()[0].info.reason or "")
        assert all(t.closed for t in a.taps + b.taps)
    finally:
        await a.manager.close()
        await b.manager.close()


async def test_silent_peer_detected_and_torn_down(hub: FakeTunnelSignalingHub) -> None:
    # B's own deadline is long: with A's, B would find A silent as soon (its data path is the one stopped) and
    # close with a DTLS close_notify, which A may read before its own deadline ("peer closed DTLS").
    a = make_node(hub, A, TunnelSettings(liveness=FAST))
    b = make_node(hub, B, TunnelSettings(liveness=replace(FAST, dead_after=10.0)))
    try:
        await a.manager.connect(B)
        await wait_until(lambda: len(b.ups()) == 1)
        # B vanishes without a word: its data path stops and its sockets go quiet.
        tunnel_b = b.manager.get(A)
        assert tunnel_b is not None
        tunnel_b._datapath.stop()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await wait_until(lambda: len(a.downs()) == 1, timeout=5)
        assert a.downs()[0].info.reason == "peer-silent"
        assert loop.time() - started < FAST.dead_after + 0.5
        assert a.taps[0].closed
    finally:
        await a.manager.close()
        await b.manager.close()


async def test_offer_to_a_silent_peer_fails_in_time(hub: FakeTunnelSignalingHub) -> None:
    config = TunnelSettings(liveness=FAST, signaling_timeout=0.3)
    a = make_node(hub, A, config)
    make_node(hub, B, config)
    hub.drop_to.add(B)
    try:
        with pytest.raises(SetupError):
            await a.manager.connect(B)
        assert a.downs() and a.downs()[0].info.state is TunnelState.FAILED
    finally:
        await a.manager.close()


async def test_simultaneous_connects_give_one_tunnel(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    results = await asyncio.gather(a.manager.connect(B), b.manager.connect(A), return_exceptions=True)
    assert any(not isinstance(r, BaseException) for r in results)
    await wait_until(lambda: a.manager.get(B) is not None and a.manager.get(B).state is TunnelState.UP)  # type: ignore[union-attr]
    await wait_until(lambda: b.manager.get(A) is not None and b.manager.get(A).state is TunnelState.UP)  # type: ignore[union-attr]
    assert a.manager.get(B).info.tunnel_id == b.manager.get(A).info.tunnel_id  # type: ignore[union-attr]


async def test_rekey_by_time_keeps_the_link(hub: FakeTunnelSignalingHub) -> None:
    config = TunnelSettings(liveness=FAST, rekey=RekeyPolicy(max_seconds=0.15, peer_epochs=RAPID_EPOCHS), ciphers=(Cipher.CHACHA20_POLY1305,))
    a, b = make_node(hub, A, config), make_node(hub, B, config)
    try:
        await a.manager.connect(B)
        await wait_until(lambda: len(b.ups()) == 1)
        tunnel = a.manager.get(B)
        assert tunnel is not None and tunnel.info.cipher is Cipher.CHACHA20_POLY1305
        await wait_until(lambda: tunnel.stats().tx_epoch >= 2, timeout=3)
        a.taps[0].tap.send_frame(FRAME)
        await wait_until(lambda: b.taps[0].tap.frames() == [FRAME])
        assert b.manager.get(A).stats().rx_epoch >= 2  # type: ignore[union-attr]
        assert not a.downs() and not b.downs()
    finally:
        await a.manager.close()
        await b.manager.close()


async def test_relay_only_without_turn_fails_at_once(hub: FakeTunnelSignalingHub) -> None:
    config = TunnelSettings(ice=IceConfig(relay=RelayPolicy.ONLY), liveness=FAST)
    a = make_node(hub, A, config)
    try:
        with pytest.raises(SetupError):
            await a.manager.connect(B)
    finally:
        await a.manager.close()


async def test_malformed_offer_is_refused(nodes: tuple[Node, Node], hub: FakeTunnelSignalingHub) -> None:
    a, b = nodes
    hub.tamper = lambda src, dst, body: {**body, "v": 99} if src == A else body
    with pytest.raises(SetupError):
        await a.manager.connect(B)
    assert b.manager.get(A) is None and not b.taps


async def test_tunnel_over_the_signal_packages_remote_actions() -> None:
    """RemoteActionSignaling on the real signaling endpoint logic (FakeSignalHub: no server)."""
    from evio.testing.fake_signal import FakeSignalHub
    from evio.tunnel.path.offer_answer import RemoteActionSignaling

    signal_hub = FakeSignalHub()
    signal_hub.set_group("ov1", ["a@x.test", "b@x.test"])
    clients = {A: signal_hub.client("a@x.test", {"ov1": A}), B: signal_hub.client("b@x.test", {"ov1": B})}
    for client in clients.values():
        await client.start()
    await wait_until(lambda: all(len(c.peers("ov1")) == 1 for c in clients.values()))
    config = TunnelSettings(liveness=FAST)
    events: dict[int, list[TunnelEvent]] = {A: [], B: []}
    taps: list[FakeTapDevice] = []

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        taps.append(FakeTapDevice(name, mtu))
        return taps[-1]

    managers = {
        n: TunnelManager(
            n,
            config,
            TunnelCertificate.generate(f"{n:x}", NOW),
            RemoteActionSignaling(clients[n], "ov1"),
            events[n].append,
            tap_factory=tap_factory,
        )
        for n in (A, B)
    }
    for m in managers.values():
        m.start()
    try:
        info = await managers[B].connect(A)
        assert info.state is TunnelState.UP and info.controlling
        await wait_until(lambda: any(isinstance(e, TunnelUp) for e in events[A]))
        # Signaling failures surface as SetupError (here: an overlay the nodes do not share).
        other = RemoteActionSignaling(clients[B], "ov2")
        with pytest.raises(SetupError):
            await other.request(A, {"v": 1}, timeout=1.0)
    finally:
        for m in managers.values():
            await m.close()
        for client in clients.values():
            await client.stop()
    assert all(t.closed for t in taps)


async def test_probe_measures_the_round_trip_and_echoes_keep_an_rtt(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    await a.manager.connect(B)
    tunnel = a.manager.get(B)
    assert tunnel is not None and tunnel.up_since is not None
    rtts = [await tunnel.probe(1.0) for _ in range(3)]
    assert all(0 < rtt < 0.5 for rtt in rtts)
    # The periodic echo (every keepalive_interval, 0.1 s here) keeps a sample without any probe.
    peer_side = b.manager.get(A)
    assert peer_side is not None
    await wait_until(lambda: peer_side.rtt.samples >= 2)
    assert peer_side.rtt.smoothed is not None and peer_side.rtt.smoothed > 0
    await a.manager.disconnect(B)
    with pytest.raises(TunnelError, match="not up"):
        await tunnel.probe(1.0)


# -- overlay trust anchor: the signaling server cannot stand in for a member --------------------------


def certificate_time() -> float:
    """The certificates' own time (they are issued at NOW), not the test machine's."""
    return NOW.timestamp() + 60


def _member_certificate(ca: tuple[object, object], node: int) -> TunnelCertificate:
    from evio.tunnel.path.overlay_ca import issue_node_certificate

    key, cert = issue_node_certificate(ca[0], ca[1], ("ov1",), node, NOW, 30)  # type: ignore[arg-type]
    return TunnelCertificate(key, cert)


@pytest.mark.parametrize("anchored", [True, False])
async def test_forged_member_whose_fingerprint_the_server_carries(hub: FakeTunnelSignalingHub, anchored: bool) -> None:
    """B's place is taken by whoever runs the server: a self-signed certificate, its fingerprint signalled."""
    from evio.tunnel.path.overlay_ca import make_overlay_ca
    from evio.tunnel.path.trust import TrustAnchor

    ca = make_overlay_ca("ov1 CA", NOW, 365)
    anchor = TrustAnchor("ov1", (ca[1],)) if anchored else None
    a = make_node(hub, A, TunnelSettings(liveness=FAST, trust=anchor), _member_certificate(ca, A), certificate_time)
    forger = make_node(hub, B, TunnelSettings(liveness=FAST))  # signals its own fingerprint: the pin matches
    try:
        if anchored:
            with pytest.raises(SetupError, match="untrusted certificate: not issued by the overlay CA"):
                await a.manager.connect(B)
            await wait_until(lambda: len(forger.downs()) == 1)
            assert not a.ups() and not forger.ups()
            assert a.manager.untrusted_refused == 1
            assert all(t.closed for t in a.taps + forger.taps)
        else:
            # XMPP-only mode (the default): the fingerprint is all there is, so the forgery goes through.
            info = await a.manager.connect(B)
            assert info.state is TunnelState.UP and a.manager.untrusted_refused == 0
    finally:
        await a.manager.close()
        await forger.manager.close()


async def test_members_with_certificates_from_the_anchor_connect(hub: FakeTunnelSignalingHub) -> None:
    from evio.tunnel.path.overlay_ca import make_overlay_ca
    from evio.tunnel.path.trust import TrustAnchor

    ca = make_overlay_ca("ov1 CA", NOW, 365)
    config = TunnelSettings(liveness=FAST, trust=TrustAnchor("ov1", (ca[1],)))
    a = make_node(hub, A, config, _member_certificate(ca, A), certificate_time)
    b = make_node(hub, B, config, _member_certificate(ca, B), certificate_time)
    try:
        info = await a.manager.connect(B)
        assert info.state is TunnelState.UP
        await wait_until(lambda: len(b.ups()) == 1)
    finally:
        await a.manager.close()
        await b.manager.close()


# -- probes: a peer whose presence went must answer at once ------------------------------------------

# dead_after far beyond the probe's deadline: a doubt acted on is told from silence waited out even when a
# loaded machine runs the 0.5 s probe late (2.8 s once at load 9).
PROBED = LivenessConfig(hello_interval=0.02, keepalive_interval=0.5, dead_after=20.0, establish_timeout=1.5,
                        probe_interval=0.1, probe_timeout=0.5)


@contextlib.asynccontextmanager
async def connected_pair(hub: FakeTunnelSignalingHub, liveness: LivenessConfig) -> AsyncIterator[tuple[Node, Node]]:
    """Nodes A and B with a tunnel up between them; both managers closed after."""
    config = TunnelSettings(liveness=liveness)
    a, b = make_node(hub, A, config), make_node(hub, B, config)
    try:
        await a.manager.connect(B)
        await wait_until(lambda: len(b.ups()) == 1)
        yield a, b
    finally:
        await a.manager.close()
        await b.manager.close()


async def seconds_to_act_on_a_doubt(hub: FakeTunnelSignalingHub, liveness: LivenessConfig, *, settle: float = 0.0,
                                    timeout: float = 3.0) -> float:
    """B's end of a tunnel A - B stops without a word (as with kill -9), `settle` s pass, then A doubts B:
    the seconds until A takes the tunnel down, for B being silent."""
    async with connected_pair(hub, liveness) as (a, b):
        tunnel_b = b.manager.get(A)
        assert tunnel_b is not None
        tunnel_b._datapath.stop()
        if settle:
            await asyncio.sleep(settle)
        loop = asyncio.get_running_loop()
        started = loop.time()
        a.manager.doubt(B)
        await wait_until(lambda: len(a.downs()) == 1, timeout=timeout)
        assert a.downs()[0].info.reason == "peer-silent"
        return loop.time() - started


async def test_doubt_of_a_vanished_peer_takes_the_tunnel_down_within_the_probe_timeout(hub: FakeTunnelSignalingHub) -> None:
    elapsed = await seconds_to_act_on_a_doubt(hub, PROBED, timeout=PROBED.dead_after)
    assert elapsed < PROBED.probe_timeout + 4.0 < PROBED.dead_after / 2, elapsed


# The idle tick is 2 s here: a doubt acted on only at the next tick would take up to 2.3 s.
SLOW_TICKS = LivenessConfig(hello_interval=0.02, keepalive_interval=8.0, dead_after=24.0, establish_timeout=1.5,
                            probe_interval=0.05, probe_floor=0.25, probe_timeout=0.3)


async def test_a_doubt_is_acted_on_at_once_not_at_the_next_idle_tick(hub: FakeTunnelSignalingHub) -> None:
    # Settled past the establishing-pace ticks: A's supervisor is in its 2 s idle wait when the doubt comes.
    elapsed = await seconds_to_act_on_a_doubt(hub, SLOW_TICKS, settle=0.2, timeout=5)
    # The deadline (0.3 s) plus a generous margin for a loaded machine, well under one idle tick.
    assert elapsed < SLOW_TICKS.probe_timeout + 0.6 < SLOW_TICKS.tick_interval(LivenessState.UP)


async def test_doubt_of_a_live_peer_changes_nothing(hub: FakeTunnelSignalingHub) -> None:
    async with connected_pair(hub, PROBED) as (a, b):
        tunnel = a.manager.get(B)
        assert tunnel is not None
        a.manager.doubt(B)
        a.manager.doubt(0xCC << 120)  # no tunnel: nothing to do
        await wait_until(lambda: tunnel._liveness is not None and not tunnel._liveness.probing, timeout=2)
        await asyncio.sleep(PROBED.probe_timeout + 0.2)  # an absence: no late take-down within the probe deadline
        assert not a.downs() and not b.downs() and tunnel.state is TunnelState.UP


async def test_both_ends_probe_the_path_mtu_and_the_status_says_probed(nodes: tuple[Node, Node]) -> None:
    """Loopback takes the whole tunnel (65536): each end confirms its largest datagram within a round or two."""
    a, b = nodes
    await a.manager.connect(B)
    await wait_until(lambda: b.manager.get(A) is not None)
    for end in (a.manager.get(B), b.manager.get(A)):
        assert end is not None
        await wait_until(lambda: end.path_mtu[1] is PmtuSource.PROBED, timeout=10)  # noqa: B023 - awaited here
        assert end.path_mtu[0] == 20 + 8 + 1428 + 14 + 26
        assert not end.stats().drops
        # What `evio status` shows of the link (evio.node.status).
        document = link_document(B, None, end, {}, None, False, 0.0)
        assert (document["mtu"], document["path_mtu"], document["mtu_source"]) == (1428, 1496, "probed")
    await a.manager.disconnect(B)
