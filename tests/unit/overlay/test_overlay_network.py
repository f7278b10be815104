"""16-32 overlay controllers in one process: real signaling logic over FakeSignalHub, fake tunnels.

Each test builds a `FakeOverlay` (evio.testing.fake_links) on a
`VirtualClock` and moves its time until a condition holds, with a deadline in
virtual seconds: nothing waits for real, and every run takes the same path.
Timings are shortened (debounce, periodic evaluation, backoff) so a scenario
has fewer events, but the code paths are the daemon's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest

from evio.config.model import OnDemandConfig, TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import LinkDown
from evio.overlay.controller import Timings
from evio.testing.fake_links import FakeOverlay
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

FAST = Timings(
    reevaluate_interval=0.15, membership_debounce=0.05, membership_max_delay=0.3, settle_after_login=0.1,
    request_timeout=2.0, collision_wait=1.0, orphan_grace=1.0, refused_retry=0.2, backoff_base=0.2,
    backoff_cap=2.0, await_tunnel=5.0, connect_timeout=4.0, change_rate=50.0, change_burst=16,
)
DEADLINE = 60.0  # virtual seconds; a healthy run needs a few per phase


def virtual_overlay(seed: int, fail_delay: float = 0.0) -> FakeOverlay:
    return FakeOverlay(timings=FAST, seed=seed, fail_delay=fail_delay, clock=VirtualClock())


def clock_of(ov: FakeOverlay) -> VirtualClock:
    assert isinstance(ov.clock, VirtualClock)
    return ov.clock


async def until(ov: FakeOverlay, condition: Callable[[], bool], what: str = "condition") -> None:
    await wait_until(condition, DEADLINE, what=what, clock=clock_of(ov))


async def evaluations_pass(ov: FakeOverlay, count: int = 3) -> None:
    """Wait until every controller has woken up `count` more times (evaluated, or paused)."""
    start = {nid: node.controller.core.ticks for nid, node in ov.nodes.items()}
    await until(
        ov, lambda: all(node.controller.core.ticks >= start[nid] + count for nid, node in ov.nodes.items()),
        what=f"{count} more evaluations everywhere",
    )


def tunnel_counts(ov: FakeOverlay) -> tuple[int, int]:
    return ov.network.setups, ov.network.teardowns


async def settled(ov: FakeOverlay) -> None:
    """Converged, and a whole round of evaluations changed no tunnel."""
    await until(ov, lambda: not ov.missing_successors(), what="Symphony ring")
    while True:
        before = tunnel_counts(ov)
        await evaluations_pass(ov)
        if tunnel_counts(ov) == before:
            return


@pytest.fixture
async def overlay() -> AsyncIterator[FakeOverlay]:
    ov = virtual_overlay(seed=11)
    try:
        yield ov
    finally:
        await clock_of(ov).run(ov.close())
        # Nothing of any controller is left: no tunnel, no task.
        assert ov.network.open_tunnels() == 0
        for node in [*ov.nodes.values(), *ov.gone]:
            assert node.controller.pending_tasks() == 0
            assert node.controller.core.tracked_peers() == 0
            assert node.announced() == set(), "every LinkUp got its LinkDown"
            assert node.event_errors == []


def assert_exact_events(ov: FakeOverlay) -> None:
    for node in [*ov.nodes.values(), *ov.gone]:
        assert node.event_errors == []
        up = {p for p, i in node.controller.adjacency().items() if i.state is LinkState.UP} if node in ov.nodes.values() else set()
        assert node.announced() == up


async def test_sixteen_nodes_converge_to_symphony_and_stop_changing(overlay: FakeOverlay) -> None:
    ids = overlay.random_ids(16)
    await asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=2)) for nid in ids))
    await settled(overlay)
    assert overlay.connected()
    # Each node holds its s successors and k = floor(log2 16) = 4 long-distance links at most.
    for nid, node in overlay.nodes.items():
        held = [overlay.network.tunnel(nid, p) for p in overlay.successors_of(nid, 2)]
        assert all(t is not None for t in held)
        long_distance = [
            p for p, i in node.controller.adjacency().items()
            if i.link_type is LinkType.LONG_DISTANCE and node.controller.core.view().outgoing.get(p) is not None
        ]
        assert len(long_distance) <= 4
    # The ring is closed: following successor links from any node visits every node.
    ring = overlay.ring()
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert frozenset((a, b)) in overlay.network.up_pairs()
    before = tunnel_counts(overlay)
    await evaluations_pass(overlay, 5)
    assert tunnel_counts(overlay) == before
    assert_exact_events(overlay)


async def test_e5_mixed_settings_form_one_overlay_that_stops_changing(overlay: FakeOverlay) -> None:
    """Paper E5: nodes 1-8 s=1 k=log n no OND; 9-16 s=2 k=1 OND; 17-24 s=2 k=log n no OND; 25-32 OND."""
    ids = sorted(overlay.random_ids(32))
    groups = [
        TopologyConfig(successors=1, on_demand=OnDemandConfig(enabled=False)),
        TopologyConfig(successors=2, long_distance=1, on_demand=OnDemandConfig(enabled=True)),
        TopologyConfig(successors=2, on_demand=OnDemandConfig(enabled=False)),
        TopologyConfig(successors=2, on_demand=OnDemandConfig(enabled=True)),
    ]
    await asyncio.gather(*(overlay.add(nid, groups[i // 8]) for i, nid in enumerate(ids)))
    # The SDN side of every on-demand node asks for a link across the ring.
    wanted = {ids[i]: ids[(i + 16) % 32] for i in range(32) if groups[i // 8].on_demand.enabled}
    for nid, peer in wanted.items():
        overlay.nodes[nid].controller.request_on_demand(peer)
    overlay.nodes[ids[0]].controller.request_on_demand(ids[16])  # disabled here: ignored
    await settled(overlay)
    assert overlay.connected()
    for nid, peer in wanted.items():
        assert frozenset((nid, peer)) in overlay.network.up_pairs()
    held = overlay.nodes[ids[0]].controller.core.view().outgoing.get(ids[16])
    assert held is None or held.type is not LinkType.ON_DEMAND
    # Incoming long-distance links held by the peer alone stay within each node's cap.
    for i, nid in enumerate(ids):
        cap = groups[i // 8].incoming_long_distance_cap(32)
        alone = sum(
            1 for other in overlay.nodes.values()
            if (link := other.controller.core.view().outgoing.get(nid)) is not None
            and link.type is LinkType.LONG_DISTANCE
            and overlay.nodes[nid].controller.core.view().outgoing.get(other.node_id) is None
        )
        assert alone <= cap
    stable = tunnel_counts(overlay)
    await evaluations_pass(overlay, 5)
    assert tunnel_counts(overlay) == stable, "links still changing in a stable overlay"
    assert_exact_events(overlay)


@pytest.mark.parametrize("successors", [1, 2])
async def test_repairs_after_a_node_leaves_or_crashes(overlay: FakeOverlay, successors: int) -> None:
    ids = overlay.random_ids(16)
    await asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=successors, long_distance=1)) for nid in ids))
    await settled(overlay)
    partitions: list[str] = []

    def watch() -> None:
        if not overlay.connected():
            partitions.append("partitioned")

    # A graceful leave: its peers repair; with s = 2 the overlay never splits meanwhile.
    leaving = overlay.ring()[3]
    predecessor = overlay.ring()[2]
    for node in overlay.nodes.values():
        node.controller.subscribe(lambda event: watch())
    await clock_of(overlay).run(overlay.leave(leaving))
    await until(overlay, lambda: not overlay.missing_successors(), what="repair after leave")
    assert frozenset((predecessor, overlay.successors_of(predecessor, 1)[0])) in overlay.network.up_pairs()
    # A crash: no release, tunnels die, presence goes.
    crashed = overlay.ring()[7]
    await clock_of(overlay).run(overlay.kill(crashed))
    await until(overlay, lambda: not overlay.missing_successors(), what="repair after crash")
    assert overlay.connected()
    if successors == 2:
        assert partitions == []
    await settled(overlay)
    assert_exact_events(overlay)


async def test_joins_never_leave_a_node_below_s_successors(overlay: FakeOverlay) -> None:
    s = 2
    ids = overlay.random_ids(24)
    await asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=s)) for nid in ids[:16]))
    await settled(overlay)
    below: list[int] = []

    def monitor() -> None:  # after every turn of the event loop
        below.extend(nid for nid in ids[:16] if overlay.nodes[nid].controller.core.view().successors_up() < s)

    unwatch = clock_of(overlay).watch(monitor)
    try:
        await clock_of(overlay).run(
            asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=s)) for nid in ids[16:]))
        )
        await settled(overlay)
    finally:
        unwatch()
    assert below == []
    assert_exact_events(overlay)


async def test_tunnels_stay_up_while_signaling_is_down(overlay: FakeOverlay) -> None:
    ids = overlay.random_ids(16)
    await asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=2)) for nid in ids))
    await settled(overlay)
    up = overlay.network.up_pairs()
    downs_before = sum(isinstance(e, LinkDown) for n in overlay.nodes.values() for e in n.events)
    overlay.hub.stop_server()
    await until(overlay, lambda: all(not n.controller.core.connected for n in overlay.nodes.values()))
    assert all(n.controller.core.members == frozenset() for n in overlay.nodes.values())
    await evaluations_pass(overlay, 3)  # every controller woke up several times meanwhile
    assert overlay.network.up_pairs() == up
    overlay.hub.start_server()
    await until(overlay, lambda: all(len(n.client.peers(overlay.overlay)) == 15 for n in overlay.nodes.values()))
    await settled(overlay)
    assert overlay.network.up_pairs() == up
    assert overlay.network.teardowns == 0
    assert sum(isinstance(e, LinkDown) for n in overlay.nodes.values() for e in n.events) == downs_before


async def test_two_nodes_starting_together_make_one_tunnel(overlay: FakeOverlay) -> None:
    ids = overlay.random_ids(2)
    nodes = [await overlay.add(nid, TopologyConfig(successors=1), start_controller=False) for nid in ids]
    await until(overlay, lambda: all(len(n.client.peers(overlay.overlay)) == 1 for n in nodes))
    for node in nodes:  # the same loop turn: their first evaluations coincide
        await node.controller.start()
    await settled(overlay)
    assert overlay.network.setups == 1 and overlay.network.failed_setups == 0
    for node in nodes:
        (info,) = node.controller.adjacency().values()
        assert info.link_type is LinkType.SUCCESSOR and info.state is LinkState.UP


async def test_a_node_restarted_with_its_id_gets_its_links_back_without_waiting_for_liveness(
    overlay: FakeOverlay,
) -> None:
    topology = TopologyConfig(successors=2, long_distance=0)
    for nid in overlay.random_ids(5):
        await overlay.add(nid, topology)
    await settled(overlay)
    restarted = overlay.ring()[2]
    successors = overlay.successors_of(restarted, 2)
    # The old run's peers would notice only after 120 s: nothing below may wait for that.
    await clock_of(overlay).run(overlay.restart(restarted, dead_after=120.0))
    assert {frozenset((restarted, p)) for p in successors} <= overlay.network.stale_tunnels()
    # Its successors take its new requests over the stale links at once (not "already linked" until liveness).
    await until(overlay, lambda: overlay.successors_up(restarted) == 2, what="the restarted node's successor links")
    assert not {frozenset((restarted, p)) for p in successors} & overlay.network.stale_tunnels()
    # Its predecessors' links it does not ask for: they go when liveness gives up, and are asked for again.
    overlay.network.expire_stale()
    await settled(overlay)
    assert_exact_events(overlay)


async def test_a_failing_peer_is_backed_off_bypassed_and_retried() -> None:
    ov = virtual_overlay(seed=5, fail_delay=0.01)
    clock = clock_of(ov)
    try:
        ids = ov.random_ids(8)
        ring = sorted(ids)
        a, b, c = ring[0], ring[1], ring[2]
        ov.network.block(a, b)
        await asyncio.gather(*(ov.add(nid, TopologyConfig(successors=1, long_distance=0)) for nid in ids))
        # a cannot reach its successor b: it links to c meanwhile, so the ring is not cut.
        await until(ov, lambda: frozenset((a, c)) in ov.network.up_pairs(), what="bypass of the failing successor")
        start = ov.nodes[a].links.connects
        t0 = clock.now()
        await until(ov, lambda: ov.nodes[a].links.connects >= start + 3, what="retries")
        # Exponential: three more attempts took at least 0.1 + 0.2 + 0.4 s (half of each nominal delay).
        assert clock.now() - t0 >= 0.6
        assert ov.network.up_pairs() >= {frozenset((a, c))}
        ov.network.unblock(a, b)
        await until(ov, lambda: not ov.missing_successors(), what="link to b after the fault clears")
        await until(
            ov,
            lambda: frozenset((a, c)) not in ov.network.up_pairs()
            or ov.nodes[a].controller.core.view().outgoing.get(c) is None,
        )
        assert ov.nodes[a].controller.core.backed_off(clock.now()) == set()
    finally:
        await clock.run(ov.close())
    assert ov.network.open_tunnels() == 0


async def test_on_demand_requests_honoured_within_max_links(overlay: FakeOverlay) -> None:
    ids = sorted(overlay.random_ids(16))
    limited = TopologyConfig(successors=1, long_distance=0, on_demand=OnDemandConfig(max_links=2))
    await asyncio.gather(*(overlay.add(nid, limited) for nid in ids))
    await settled(overlay)
    me = overlay.nodes[ids[0]]
    targets = [ids[5], ids[8], ids[11]]
    for peer in targets:
        me.controller.request_on_demand(peer)
    await until(overlay, lambda: sum(frozenset((ids[0], p)) in overlay.network.up_pairs() for p in targets) == 2)
    await evaluations_pass(overlay, 3)
    on_demand = [p for p, i in me.controller.adjacency().items() if i.link_type is LinkType.ON_DEMAND]
    assert sorted(on_demand) == sorted(targets[:2])  # the oldest wishes first, never a third
    # The SDN side finds one idle: it goes, and the waiting wish takes its slot.
    me.controller.release_on_demand(targets[0])
    await until(overlay, lambda: frozenset((ids[0], targets[0])) not in overlay.network.up_pairs())
    await until(overlay, lambda: frozenset((ids[0], targets[2])) in overlay.network.up_pairs())
    assert_exact_events(overlay)


# -- issue 9: revocation sticks -------------------------------------------------------------------


def tunnels_to(overlay: FakeOverlay, victim: int) -> set[int]:
    return {other for other in overlay.nodes if other != victim and overlay.network.tunnel(other, victim) is not None}


async def removal_setup(overlay: FakeOverlay) -> tuple[list[int], int]:
    ids = overlay.random_ids(8)
    await asyncio.gather(*(overlay.add(nid, TopologyConfig(successors=2)) for nid in ids))
    await settled(overlay)
    victim = ids[3]
    assert tunnels_to(overlay, victim)

    async def keep(peer: int) -> None:
        """The removed member is hostile: it never closes a tunnel itself."""

    overlay.nodes[victim].links.disconnect = keep  # type: ignore[method-assign]
    return ids, victim


async def closed_within(overlay: FakeOverlay, victim: int, linked: set[int], seconds: float) -> float:
    """Seconds until none of `linked` has a tunnel to `victim` (the victim itself keeps trying: it is hostile)."""
    clock = clock_of(overlay)
    start = clock.now()
    await wait_until(lambda: not (tunnels_to(overlay, victim) & linked), seconds,
                     what="tunnels to the removed member closed", clock=clock)
    return clock.now() - start


@pytest.mark.parametrize("case", ["deleted", "kicked"])
async def test_a_removed_member_s_tunnels_close_within_seconds(overlay: FakeOverlay, case: str) -> None:
    ids, victim = await removal_setup(overlay)
    linked = tunnels_to(overlay, victim)
    members = {FakeOverlay.jid(n) for n in ids if n != victim}
    if case == "deleted":
        overlay.hub.delete_account(FakeOverlay.jid(victim))  # the server pushes the unsubscription
    else:
        # Removed from the group (prosody's mod_groups pushes nothing), then its session is kicked:
        # the others see only "unavailable". Before: its tunnels stayed up as long as it kept them.
        overlay.hub.set_group(overlay.overlay, members, push=False)
        overlay.hub.kick(overlay.nodes[victim].client.full_jid)
    await closed_within(overlay, victim, linked, 5.0)
    await evaluations_pass(overlay, 3)
    assert not tunnels_to(overlay, victim)  # and it does not get back in


async def test_a_member_removed_while_this_node_was_offline_is_cut_at_its_next_login(overlay: FakeOverlay) -> None:
    ids, victim = await removal_setup(overlay)
    me = next(iter(tunnels_to(overlay, victim)))
    members = {FakeOverlay.jid(n) for n in ids if n != victim}
    overlay.hub.kick(overlay.nodes[me].client.full_jid, relogin=False)  # our session is down ...
    overlay.hub.set_group(overlay.overlay, members, push=False)  # ... while the member is removed
    await evaluations_pass(overlay, 2)
    assert overlay.network.tunnel(me, victim) is not None  # tunnels stay while signaling is down
    overlay.hub.relogin(overlay.nodes[me].client.full_jid)
    await closed_within(overlay, victim, {me}, 5.0)


async def test_a_member_that_merely_reconnects_keeps_its_links(overlay: FakeOverlay) -> None:
    ids, victim = await removal_setup(overlay)
    up = overlay.network.up_pairs()
    overlay.hub.kick(overlay.nodes[victim].client.full_jid, relogin=False)
    await until(overlay, lambda: any(n.client.membership_checks for n in overlay.nodes.values()), what="a membership check")
    overlay.hub.relogin(overlay.nodes[victim].client.full_jid)
    await until(overlay, lambda: all(len(n.client.peers(overlay.overlay)) == 7 for n in overlay.nodes.values()))
    await settled(overlay)
    assert overlay.network.up_pairs() == up and overlay.network.teardowns == 0


async def test_the_ring_closes_after_a_storm_of_lost_messages_and_failed_setups() -> None:
    """The 64-node lab's trouble, in the fakes: under load, negotiation messages are lost (requests
    end in no_response, answers never arrive) and tunnel setups fail at both ends. Once the storm
    is over, every missing successor is retried until it exists and no link stays pending."""
    seed = 3
    ov = FakeOverlay(timings=replace(FAST, backoff_cap=8.0), seed=seed, fail_delay=1.0, setup_delay=0.05,
                     clock=VirtualClock())  # fmt: skip
    clock = clock_of(ov)
    storm = random.Random(seed)
    ov.hub.loses = lambda sender, to: storm.random() < 0.25
    ov.network.setup_fails = lambda a, b: storm.random() < 0.4
    try:
        ids = ov.random_ids(24)
        await asyncio.gather(*(ov.add(nid, TopologyConfig(successors=2)) for nid in ids))
        await clock.advance(15.0)
        ov.hub.loses = None
        ov.network.setup_fails = None
        storm_over = clock.now()
        await wait_until(lambda: not ov.missing_successors(), 120.0, what="Symphony ring after the storm", clock=clock)
        closed_after = clock.now() - storm_over

        def pending() -> set[tuple[int, int]]:
            return {
                (nid, peer)
                for nid, node in ov.nodes.items()
                for peer, info in node.controller.adjacency().items()
                if info.state is not LinkState.UP
            }

        # Every link that was pending when the ring closed is up or given up within a few rounds.
        await wait_until(lambda: not pending(), 120.0, what="no pending links", clock=clock)
        assert closed_after < 60.0
    finally:
        await clock.run(ov.close())
    assert ov.network.open_tunnels() == 0
