"""The asyncio adapter: its API contract, bad input, failures of the link provider, and the real TunnelManager.

Over the fakes everything runs on a `VirtualClock` the test drives; over the
real TunnelManager (sockets on loopback) on real time.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from functools import partial

import pytest

from evio.config.model import TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import AdjacencyEvent, LinkDown, LinkUp
from evio.overlay.controller import ControllerError, LinkProvider, OverlayController, Timings
from evio.overlay.negotiation import ACTION_LINK, ACTION_RELEASE, LinkRefusal, decode_link_answer
from evio.signal.errors import ErrorReason, RequestError
from evio.testing.fake_links import FakeLinkNetwork, FakeOverlay
from evio.testing.fake_signal import FakeSignalClient, FakeSignalHub
from evio.testing.fake_tunnel import FakeTapDevice
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath.tap import TapDevice
from evio.tunnel.lifecycle import TunnelInfo
from evio.tunnel.liveness import LivenessConfig
from evio.tunnel.manager import TunnelManager
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.offer_answer import RemoteActionSignaling
from evio.tunnel.session import TunnelEvent

FAST = Timings(
    reevaluate_interval=0.2, membership_debounce=0.05, membership_max_delay=0.3, settle_after_login=0.1,
    request_timeout=2.0, collision_wait=1.0, orphan_grace=1.0, refused_retry=0.2, backoff_base=0.2,
    backoff_cap=2.0, await_tunnel=5.0, connect_timeout=0.5, change_rate=50.0, change_burst=16,
)
OV = "ov"


DEADLINE = 60.0  # virtual seconds


def jid(nid: int) -> str:
    return f"n{nid:032x}@overlay.test"


async def clients(hub: FakeSignalHub, ids: list[int], overlays: tuple[str, ...] = (OV,)) -> list[FakeSignalClient]:
    for ov in overlays:
        hub.set_group(ov, [jid(n) for n in ids])
    out = [hub.client(jid(n), {ov: n for ov in overlays}) for n in ids]
    for c in out:
        await c.start()
    clock = hub.clock if isinstance(hub.clock, VirtualClock) else None
    await wait_until(lambda: all(len(c.peers(OV)) == len(ids) - 1 for c in out), DEADLINE, what="peers", clock=clock)
    return out


def controller(client: FakeSignalClient, nid: int, links: LinkProvider, **topology: int) -> OverlayController:
    return OverlayController(
        OV, nid, TopologyConfig(**topology), client, links,  # type: ignore[arg-type]
        rng=random.Random(nid), clock=client.clock, reevaluate_interval=0.2, timings=FAST,
    )


# -- the contract ------------------------------------------------------------------------------


async def test_started_once_and_stop_is_idempotent() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    (client,) = await clients(hub, [1])
    ctl = controller(client, 1, FakeLinkNetwork(clock=clock).endpoint(1))
    await ctl.stop()  # never started: nothing to do
    assert not ctl.running
    ctl2 = controller(client, 1, FakeLinkNetwork(clock=clock).endpoint(1))
    await ctl2.start()
    with pytest.raises(ControllerError):
        await ctl2.start()
    await clock.run(ctl2.stop())
    await clock.run(ctl2.stop())
    assert ctl2.pending_tasks() == 0
    await client.stop()


async def test_negotiation_after_stop_is_refused_and_bad_bodies_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    a, b = await clients(hub, [1, 2])
    network = FakeLinkNetwork(clock=clock)
    ctl = controller(b, 2, network.endpoint(2), successors=0, long_distance=0)
    await ctl.start()
    with caplog.at_level(logging.WARNING, logger="evio.overlay.controller"):
        for _ in range(3):
            with pytest.raises(RequestError) as info:
                await a.request(OV, 2, ACTION_LINK, {"v": 1, "type": "chord", "existing": False, "epoch": 1})
            assert info.value.reason is ErrorReason.BAD_REQUEST
        with pytest.raises(RequestError):
            await a.request(OV, 2, ACTION_RELEASE, {"type": "successor"})
    assert ctl.malformed[1] == 4
    assert sum("malformed negotiation" in r.getMessage() for r in caplog.records) == 1  # once per peer per interval
    # A good request still works.
    answer = decode_link_answer(await a.request(OV, 2, ACTION_LINK, {"v": 1, "type": "successor", "existing": False, "epoch": 1}))
    assert answer.accepted
    await clock.run(ctl.stop())
    answer = decode_link_answer(await a.request(OV, 2, ACTION_LINK, {"v": 1, "type": "successor", "existing": False, "epoch": 1}))
    assert answer.refusal is LinkRefusal.STOPPING
    await a.stop()
    await b.stop()
    await network.close()


async def test_requests_for_another_overlay_are_rejected() -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    a, b = await clients(hub, [1, 2], overlays=(OV, "other"))
    ctl = controller(b, 2, FakeLinkNetwork(clock=clock).endpoint(2), successors=0, long_distance=0)
    await ctl.start()
    with pytest.raises(RequestError) as info:
        await a.request("other", 2, ACTION_LINK, {"v": 1, "type": "successor", "existing": False, "epoch": 1})
    assert info.value.reason is ErrorReason.REJECTED
    await ctl.stop()
    await a.stop()
    await b.stop()


async def test_a_failing_subscriber_does_not_stop_the_others() -> None:
    clock = VirtualClock()
    ov = FakeOverlay(timings=FAST, seed=3, clock=clock)
    try:
        ids = ov.random_ids(3)
        nodes = [await ov.add(nid, TopologyConfig(successors=1)) for nid in ids]
        seen: list[AdjacencyEvent] = []

        def broken(event: AdjacencyEvent) -> None:
            raise RuntimeError("subscriber bug")

        nodes[0].controller.subscribe(broken)
        sub = nodes[0].controller.subscribe(seen.append)
        await wait_until(lambda: not ov.missing_successors(), DEADLINE, what="ring", clock=clock)
        assert any(isinstance(e, LinkUp) for e in seen)
        sub.cancel()
        count = len(seen)
        await clock.run(ov.leave(ids[1]))
        await wait_until(lambda: not ov.missing_successors(), DEADLINE, what="ring after a leave", clock=clock)
        assert len(seen) == count  # cancelled: nothing more
    finally:
        await clock.run(ov.close())


class BrokenLinks:
    """A provider whose connect fails in its own way (a bug, or never returns)."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.connects = 0
        self.disconnects = 0

    async def connect(self, peer: int) -> TunnelInfo:
        self.connects += 1
        if self.hang:
            await asyncio.Event().wait()
        raise RuntimeError("provider bug")

    async def disconnect(self, peer: int) -> None:
        self.disconnects += 1

    def doubt(self, peer: int) -> None:
        pass


@pytest.mark.parametrize("hang", [False, True])
async def test_provider_failures_are_failures_not_crashes(hang: bool) -> None:
    clock = VirtualClock()
    hub = FakeSignalHub(clock)
    a, b = await clients(hub, [1, 2])
    network = FakeLinkNetwork(clock=clock)
    broken = BrokenLinks(hang)
    ctl_a = controller(a, 1, broken, successors=1, long_distance=0)
    b_links = network.endpoint(2)
    ctl_b = controller(b, 2, b_links, successors=0, long_distance=0)
    b_links.on_event = ctl_b.on_tunnel_event
    await ctl_b.start()
    await ctl_a.start()
    await wait_until(lambda: broken.connects >= 2, DEADLINE, what="a second connect", clock=clock)
    assert ctl_a.core.failures["connect failed"] >= 1
    assert broken.disconnects >= 1  # a connect that timed out or failed is cleaned up
    assert ctl_a.running
    await clock.run(ctl_a.stop())
    await clock.run(ctl_b.stop())
    assert ctl_a.pending_tasks() == 0 and ctl_a.core.tracked_peers() == 0
    await a.stop()
    await b.stop()
    await network.close()


# -- over the real TunnelManager: ICE, DTLS and data path on loopback, fake TAPs ---------------

NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)




def forward(owner: list[OverlayController], event: TunnelEvent) -> None:
    owner[0].on_tunnel_event(event)


async def test_controllers_drive_real_tunnel_managers(loopback_only: None) -> None:
    hub = FakeSignalHub()
    rng = random.Random(9)
    ids = sorted(rng.getrandbits(128) for _ in range(4))
    signal = await clients(hub, ids)
    config = TunnelSettings(liveness=LivenessConfig(hello_interval=0.02, keepalive_interval=0.1, dead_after=0.6, establish_timeout=2.0))
    taps: list[FakeTapDevice] = []
    managers: list[TunnelManager] = []
    controllers: list[OverlayController] = []
    events: dict[int, list[AdjacencyEvent]] = {nid: [] for nid in ids}

    async def tap_factory(name: str, mtu: int) -> TapDevice:
        tap = FakeTapDevice(name, mtu)
        taps.append(tap)
        return tap

    timings = Timings(
        reevaluate_interval=0.5, membership_debounce=0.05, settle_after_login=0.1, request_timeout=5.0,
        connect_timeout=20.0, backoff_base=0.5, backoff_cap=4.0,
    )
    for nid, client in zip(ids, signal):
        # The manager reports to the controller, the controller drives the manager: bind the callback late.
        owner: list[OverlayController] = []
        manager = TunnelManager(
            nid, config, TunnelCertificate.generate(f"{nid:032x}", NOW), RemoteActionSignaling(client, OV),
            on_event=partial(forward, owner), tap_factory=tap_factory,
        )
        ctl = OverlayController(
            OV, nid, TopologyConfig(successors=2, long_distance=0), client, manager,
            rng=random.Random(nid), reevaluate_interval=0.5, timings=timings,
        )
        owner.append(ctl)
        manager.start()
        ctl.subscribe(events[nid].append)
        managers.append(manager)
        controllers.append(ctl)
    try:
        for ctl in controllers:
            await ctl.start()

        def ring_up() -> bool:
            for i in range(len(ids)):
                adjacency = controllers[i].adjacency()
                for succ in (ids[(i + 1) % 4], ids[(i + 2) % 4]):
                    info = adjacency.get(succ)
                    if info is None or info.state is not LinkState.UP or info.link_type is not LinkType.SUCCESSOR:
                        return False
            return True

        def ups(nid: int) -> list[LinkUp]:
            return [e for e in events[nid] if isinstance(e, LinkUp)]

        # Each end reports its LinkUp when its own side of the tunnel is up: wait for both ends of all.
        await wait_until(
            lambda: ring_up() and all(len(ups(nid)) >= 3 for nid in ids), 30.0, what="ring over real tunnels"
        )
        # n = 4, s = 2: every pair is linked, one tunnel each, with a TAP named after the peer.
        for i, manager in enumerate(managers):
            assert set(manager.tunnels()) == set(ids) - {ids[i]}
        for nid in ids:
            assert len(ups(nid)) == 3 and all(e.tap == config.tap_name(e.peer) for e in ups(nid))
        # One node stops: its peers see exactly one LinkDown each for it, and its TAPs are closed.
        await controllers[0].stop()
        await wait_until(lambda: all(ids[0] not in m.tunnels() for m in managers[1:]), 20.0, what="tunnels closed")
        for i in (1, 2, 3):
            downs = [e for e in events[ids[i]] if isinstance(e, LinkDown) and e.peer == ids[0]]
            assert len(downs) == 1
        assert len([e for e in events[ids[0]] if isinstance(e, LinkDown)]) == 3
    finally:
        for ctl in controllers:
            await ctl.stop()
        for manager in managers:
            await manager.close()
        for client in signal:
            await client.stop()
    assert all(t.closed for t in taps)
