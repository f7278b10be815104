"""The overlay controller's decision core, driven by hand: inputs in, actions out, no I/O, no clock."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from evio.config.model import LimitsConfig, OnDemandConfig, TopologyConfig
from evio.overlay.adjacency import LinkState, LinkType
from evio.overlay.adjacency_events import LinkDown, LinkUp
from evio.overlay.negotiation import LinkAnswer, LinkRefusal, LinkRequest, ReleaseAnswer, ReleaseRequest
from evio.overlay.orchestrator import (
    OVERDUE_REPEAT,
    RELOGIN_GRACE_STRETCH,
    Action,
    CheckMembership,
    Connect,
    Disconnect,
    Doubt,
    Failure,
    Notify,
    Orchestrator,
    Phase,
    SendLinkRequest,
    SendRelease,
    Timings,
)
from evio.overlay.peer_backoff import PeerBackoff
from evio.signal.events import RemovalCause

S = LinkType.SUCCESSOR
L = LinkType.LONG_DISTANCE
O = LinkType.ON_DEMAND
ME = 100
T = Timings(
    reevaluate_interval=10.0, membership_debounce=0.5, membership_max_delay=2.0, settle_after_login=1.0,
    collision_wait=5.0, orphan_grace=3.0, refused_retry=1.0, backoff_base=1.0, backoff_cap=8.0,
    change_rate=1.0, change_burst=100, await_tunnel=30.0, max_setups=100,
)


def core(
    members: Iterable[int] = (110, 120, 130, 140, 150),
    successors: int = 2,
    long_distance: int | None = 0,
    node: int = ME,
    timings: Timings = T,
    on_demand: OnDemandConfig | None = None,
    seed: int = 0,
    cap: int | None = None,
) -> Orchestrator:
    """A core that is logged in at 0 and knows `members`; it settles at 1."""
    topology = TopologyConfig(
        successors=successors, long_distance=long_distance, on_demand=on_demand or OnDemandConfig(),
        max_incoming_long_distance=cap,
    )
    orch = Orchestrator(node, topology, random.Random(seed), 0.0, timings, name="ov")
    orch.signal_connected(0.0)
    for peer in members:
        orch.peer_added(peer, 0.0)
    return orch


def requests(actions: list[Action]) -> list[tuple[int, LinkType, bool]]:
    return [(a.peer, a.request.type, a.request.existing) for a in actions if isinstance(a, SendLinkRequest)]


A = TypeVar("A", SendLinkRequest, SendRelease, Connect, Disconnect, Notify)


def of(actions: list[Action], kind: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def complete(orch: Orchestrator, ask: SendLinkRequest, now: float) -> list[Action]:
    """Our request is accepted, we connect, the tunnel comes up."""
    out = orch.link_answered(ask.peer, ask.seq, LinkAnswer(True), now)
    (connect,) = of(out, Connect)
    return out + orch.connect_succeeded(ask.peer, connect.seq, f"t{ask.peer}", f"tap{ask.peer}", now)


def link_up(orch: Orchestrator, now: float, *peers: int) -> list[Action]:
    """Evaluate and bring up the links asked for to `peers` (all of them, when none are named)."""
    asks = of(orch.tick(now), SendLinkRequest)
    out: list[Action] = []
    for ask in asks:
        if not peers or ask.peer in peers:
            out += complete(orch, ask, now)
    assert not peers or {a.peer for a in asks} >= set(peers)
    return out


def up_links(orch: Orchestrator) -> dict[int, LinkType]:
    return {p: i.link_type for p, i in orch.adjacency().items() if i.state is LinkState.UP}


# -- evaluation ----------------------------------------------------------------------------------


def test_nothing_before_login_settles_then_successors_first() -> None:
    orch = core(long_distance=2)  # the presences came with the login, at 0
    assert orch.tick(0.4) == []  # membership may still be arriving
    assert orch.next_wakeup(0.4) == pytest.approx(0.5)  # quiet for membership_debounce: settled
    asks = of(orch.tick(0.5), SendLinkRequest)
    assert [(a.peer, a.request.type) for a in asks] == [(110, S), (120, S)]  # the ring first
    assert orch.tick(1.1) == []  # in flight: not asked twice
    complete(orch, asks[0], 1.2)
    assert requests(orch.tick(1.2)) == []  # long-distance links wait for every successor link
    complete(orch, asks[1], 1.3)
    assert [t for _, t, _ in requests(orch.tick(1.3))] == [L, L]


def test_login_settles_once_presences_pause_or_after_settle_after_login() -> None:
    # Presences still trickling in keep the node waiting until they pause for membership_debounce (0.5).
    orch = Orchestrator(ME, TopologyConfig(successors=2, long_distance=0), random.Random(0), 0.0, T, name="ov")
    orch.signal_connected(0.0)
    for i, at in enumerate((0.1, 0.4, 0.7)):
        orch.peer_added(110 + 10 * i, at)
        assert orch.tick(at) == []
    assert orch.tick(1.1) == []
    assert requests(orch.tick(1.2)) == [(110, S, False), (120, S, False)]
    # A node alone at login waits the whole settle time: nobody's presence says the membership is complete.
    alone = Orchestrator(ME, TopologyConfig(successors=2, long_distance=0), random.Random(0), 0.0, T, name="ov")
    alone.signal_connected(0.0)
    assert alone.tick(0.6) == [] and alone.next_wakeup(0.6) == pytest.approx(1.0)
    alone.peer_added(110, 1.5)  # after settling: an ordinary membership change, debounced
    assert alone.tick(1.6) == [] and requests(alone.tick(2.0)) == [(110, S, False)]


def test_accepted_link_connects_and_is_announced_exactly_once() -> None:
    orch = core()
    out = link_up(orch, 1.0, 110)
    assert of(out, Notify) == [Notify(LinkUp(110, S, "tap110"))]
    # The tunnel manager also reports the same tunnel as an event: no second LinkUp.
    assert orch.tunnel_up(110, "t110", "tap110", 1.1) == []
    assert up_links(orch) == {110: S}
    out = orch.tunnel_down(110, "t110", "peer silent", 2.0)
    assert of(out, Notify) == [Notify(LinkDown(110, "tap110", "peer silent"))]
    assert orch.tunnel_down(110, "t110", "peer silent", 2.0) == []
    assert 110 not in orch.adjacency()


def test_a_replacing_tunnel_is_reported_down_then_up() -> None:
    orch = core()
    link_up(orch, 1.0, 110)
    out = orch.tunnel_up(110, "t2", "tap110", 3.0)
    assert of(out, Notify) == [Notify(LinkDown(110, "tap110", "replaced by a new tunnel")), Notify(LinkUp(110, S, "tap110"))]
    assert orch.tunnel_down(110, "t110", "closed", 3.1) == []  # the old tunnel's late report
    assert up_links(orch) == {110: S}


def test_membership_changes_are_debounced() -> None:
    orch = core(members=())
    orch.tick(1.0)
    orch.peer_added(110, 5.0)
    orch.peer_added(120, 5.4)
    assert orch.next_wakeup(5.4) == pytest.approx(5.9)
    assert orch.tick(5.6) == []  # still within the quiet time
    assert [p for p, _, _ in requests(orch.tick(5.9))] == [110, 120]
    # A stream of changes is evaluated no later than max_delay after the first.
    for i in range(10):
        orch.peer_added(200 + i, 10.0 + 0.3 * i)
    assert orch.next_wakeup(12.7) == pytest.approx(12.0)


def test_periodic_evaluation() -> None:
    orch = core(members=(110,), successors=1)
    link_up(orch, 1.0, 110)
    orch.tick(1.0)  # the link coming up asked for one more look
    assert orch.next_wakeup(1.0) == pytest.approx(11.0)
    before = orch.evaluations
    assert orch.tick(11.0) == []
    assert orch.evaluations == before + 1


def test_join_adds_the_new_successor_before_releasing_the_old() -> None:
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0, 110, 120)
    orch.peer_added(105, 2.0)  # joins between us and 110
    out = orch.tick(2.5)
    assert requests(out) == [(105, S, False)] and of(out, SendRelease) == []
    (ask,) = of(out, SendLinkRequest)
    out = orch.link_answered(105, ask.seq, LinkAnswer(True), 2.6) + orch.tick(2.7)
    assert of(out, Connect) and of(out, SendRelease) == []  # 105 not up yet: 120 stays
    assert orch.adjacency()[120].link_type is S
    out = orch.tunnel_up(105, "t105", "tap105", 3.0) + orch.tick(3.0)
    (release,) = of(out, SendRelease)
    assert release.peer == 120 and release.request == ReleaseRequest(S)
    # 120 does not hold it: the tunnel goes.
    out = orch.release_answered(120, release.seq, ReleaseAnswer(None), 3.1)
    assert of(out, Disconnect) == [Disconnect(120)]


def test_a_released_link_the_peer_holds_stays_up() -> None:
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0, 110, 120)
    orch.peer_added(105, 2.0)
    ask = of(orch.tick(2.5), SendLinkRequest)[0]
    orch.link_answered(105, ask.seq, LinkAnswer(True), 2.6)
    (release,) = of(orch.tunnel_up(105, "t105", "tap105", 3.0) + orch.tick(3.0), SendRelease)
    out = orch.release_answered(120, release.seq, ReleaseAnswer(L), 3.1)
    assert of(out, Disconnect) == []
    assert orch.adjacency()[120].link_type is L and orch.adjacency()[120].state is LinkState.UP


def test_release_from_a_peer_we_do_not_hold_lets_it_close() -> None:
    orch = core(members=(90,), successors=0)
    orch.tick(1.0)
    answer, _ = orch.link_request(90, LinkRequest(S), 1.0)
    assert answer == LinkAnswer(True, held_as=None)
    assert orch.phase(90) is Phase.AWAITING
    orch.tunnel_up(90, "t90", "tap90", 1.5)
    released, out = orch.release_request(90, ReleaseRequest(S), 2.0)
    assert released == ReleaseAnswer(None)
    assert of(out, Disconnect) == []  # the releaser closes it
    out = orch.tunnel_down(90, "t90", "closed by peer", 2.1)
    assert of(out, Notify) == [Notify(LinkDown(90, "tap90", "closed by peer"))]
    assert orch.backed_off(2.1) == set()  # released first: not a failure


# -- negotiation answers -------------------------------------------------------------------------


def test_incoming_long_distance_is_capped() -> None:
    orch = core(members=(110, 120, 130, 140), cap=1)
    orch.tick(1.0)
    assert orch.link_request(130, LinkRequest(L), 1.0)[0].accepted
    refused = orch.link_request(140, LinkRequest(L), 1.0)[0]
    assert refused == LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_LONG_DISTANCE)
    assert orch.link_request(140, LinkRequest(O), 1.0)[0].accepted
    assert orch.link_request(50, LinkRequest(S), 1.0)[0].accepted


# -- issue 9: every incoming type capped, tunnels per node capped, link requests rate-limited per peer ----


def capped(members: Iterable[int], limits: LimitsConfig | None = None, **topology: Any) -> Orchestrator:
    orch = Orchestrator(ME, replace(TopologyConfig(long_distance=0), **topology), random.Random(0), 0.0, T,
                        name="ov", limits=limits or LimitsConfig())  # fmt: skip
    orch.signal_connected(0.0)
    for peer in members:
        orch.peer_added(peer, 0.0)
    return orch


def test_incoming_successor_links_are_capped() -> None:
    # Before: 50 fake predecessors were all accepted as successors, each a tunnel and a TAP.
    peers = range(1000, 1050)
    orch = capped(peers, max_incoming_successors=6)
    answers = [orch.link_request(p, LinkRequest(S), 1.0)[0] for p in peers]
    assert sum(a.accepted for a in answers) == 6
    assert {a.refusal for a in answers if not a.accepted} == {LinkRefusal.TOO_MANY_SUCCESSORS}
    assert orch.refusals_sent[LinkRefusal.TOO_MANY_SUCCESSORS] == 44
    assert orch.tunnel_count() == 6


def test_incoming_successor_cap_defaults_to_twice_s_plus_two() -> None:
    peers = range(1000, 1020)
    orch = capped(peers, successors=3)
    assert sum(orch.link_request(p, LinkRequest(S), 1.0)[0].accepted for p in peers) == 8


def test_incoming_on_demand_links_are_capped() -> None:
    peers = range(1000, 1050)
    orch = capped(peers, max_incoming_on_demand=3)
    answers = [orch.link_request(p, LinkRequest(O), 1.0)[0] for p in peers]
    assert sum(a.accepted for a in answers) == 3
    assert {a.refusal for a in answers if not a.accepted} == {LinkRefusal.TOO_MANY_ON_DEMAND}


def test_retyping_an_incoming_link_counts_against_the_new_type_s_cap() -> None:
    orch = capped((110, 120, 130), max_incoming_on_demand=1, max_incoming_successors=10)
    for peer in (110, 120):
        assert orch.link_request(peer, LinkRequest(S), 1.0)[0].accepted
        orch.tunnel_up(peer, f"t{peer}", f"tap{peer}", 1.1)
    assert orch.link_request(110, LinkRequest(O, existing=True), 2.0)[0].accepted
    assert orch.link_request(120, LinkRequest(O, existing=True), 2.0)[0].refusal is LinkRefusal.TOO_MANY_ON_DEMAND


def test_tunnels_per_node_are_capped_whatever_the_type() -> None:
    peers = range(1000, 1040)
    orch = capped(peers, LimitsConfig(max_tunnels=10, link_request_burst=100), max_incoming_successors=100,
                  max_incoming_on_demand=100, max_incoming_long_distance=100)  # fmt: skip
    kinds = [S, O, L]
    answers = [orch.link_request(p, LinkRequest(kinds[p % 3]), 1.0)[0] for p in peers]
    assert sum(a.accepted for a in answers) == 10 and orch.tunnel_count() == 10
    assert {a.refusal for a in answers if not a.accepted} == {LinkRefusal.TOO_MANY_LINKS}
    # Our own evaluation opens no new tunnel past the cap either (it may take over the links it has).
    assert [r for r in requests(orch.tick(5.0)) if not r[2]] == []


def test_link_requests_are_rate_limited_per_peer() -> None:
    orch = capped((110, 120), LimitsConfig(link_requests_per_s=1.0, link_request_burst=3))
    flood = [orch.link_request(110, LinkRequest(S, existing=True), 1.0)[0] for _ in range(20)]
    assert [a.refusal for a in flood[:3]] == [LinkRefusal.NO_LINK] * 3  # answered on their merits
    assert {a.refusal for a in flood[3:]} == {LinkRefusal.RATE_LIMITED}
    assert orch.refusals_sent[LinkRefusal.RATE_LIMITED] == 17
    assert orch.tracked_peers() == 0  # a refused flood leaves no state behind
    # Another peer is not affected, and the flooder gets a token back after a second.
    assert orch.link_request(120, LinkRequest(S), 1.0)[0].accepted
    assert orch.link_request(110, LinkRequest(S), 2.0)[0].accepted


def test_a_full_or_rate_limiting_peer_is_backed_off() -> None:
    orch = core(members=(110, 120, 130))
    asks = of(orch.tick(1.0), SendLinkRequest)
    ask = asks[0]
    orch.link_answered(ask.peer, ask.seq, LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_SUCCESSORS), 1.0)
    assert ask.peer in orch.backed_off(1.0)


def test_tunnel_offers_are_expected_only_for_negotiated_links() -> None:
    orch = core(members=(110, 120, 130, 140))
    assert not orch.expects_tunnel(130)  # a member, but no link was agreed: its offer is refused
    assert orch.link_request(130, LinkRequest(O), 1.0)[0].accepted
    assert orch.expects_tunnel(130)  # accepted: it connects to us now
    orch.tunnel_up(130, "t130", "tap130", 1.1)
    assert orch.expects_tunnel(130)  # up: a new offer replaces a tunnel the peer lost
    orch.release_request(130, ReleaseRequest(O), 2.0)
    orch.tunnel_down(130, "t130", "closed by peer", 2.1)
    assert not orch.expects_tunnel(130)
    ask = of(orch.tick(3.0), SendLinkRequest)[0]
    assert not orch.expects_tunnel(ask.peer)  # asked, not yet accepted
    orch.link_answered(ask.peer, ask.seq, LinkAnswer(True), 3.0)
    assert orch.expects_tunnel(ask.peer)  # connecting: the manager settles crossing offers


def test_taking_over_a_link_as_long_distance_is_capped_too() -> None:
    orch = core(members=(110, 120, 130, 140), cap=1)
    orch.tick(1.0)
    for peer in (130, 140):
        orch.link_request(peer, LinkRequest(O), 1.0)
        orch.tunnel_up(peer, f"t{peer}", f"tap{peer}", 1.1)
    assert orch.link_request(130, LinkRequest(L, existing=True), 2.0)[0].accepted
    answer = orch.link_request(140, LinkRequest(L, existing=True), 2.0)[0]
    assert answer.refusal is LinkRefusal.TOO_MANY_LONG_DISTANCE
    assert orch.link_request(150, LinkRequest(S, existing=True), 2.0)[0].refusal is LinkRefusal.NO_LINK


def test_collision_the_lower_id_request_wins_whatever_the_order() -> None:
    for answer_first in (False, True):
        low, high = core(members=(200,), successors=1, node=100), core(members=(100,), successors=1, node=200)
        (ask_low,) = of(low.tick(1.0), SendLinkRequest)
        (ask_high,) = of(high.tick(1.0), SendLinkRequest)
        # high's request reaches low: refused, low's own request goes ahead
        to_low, _ = low.link_request(200, ask_high.request, 1.1)
        assert to_low == LinkAnswer(False, refusal=LinkRefusal.COLLISION)
        if answer_first:
            assert high.link_answered(100, ask_high.seq, to_low, 1.2) == []  # waits for low's request
        to_high, _ = high.link_request(100, ask_low.request, 1.3)
        assert to_high == LinkAnswer(True, held_as=S)  # high holds it as its own successor link
        assert high.phase(100) is Phase.AWAITING
        if not answer_first:
            assert high.link_answered(100, ask_high.seq, to_low, 1.4) == []  # superseded
        out = low.link_answered(200, ask_low.seq, to_high, 1.5)
        assert len(of(out, Connect)) == 1
        # One tunnel, both hold it.
        low.tunnel_up(200, "t", "tapL", 2.0)
        high.tunnel_up(100, "t", "tapH", 2.0)
        assert up_links(low) == {200: S} and up_links(high) == {100: S}
        assert low.view().incoming[200].type is S and high.view().incoming[100].type is S


def test_losing_a_collision_waits_only_so_long() -> None:
    high = core(members=(100,), successors=1, node=200)
    (ask,) = of(high.tick(1.0), SendLinkRequest)
    high.link_answered(100, ask.seq, LinkAnswer(False, refusal=LinkRefusal.COLLISION), 1.1)
    assert high.tick(2.0) == []
    assert high.next_wakeup(2.0) == pytest.approx(6.1)
    assert requests(high.tick(6.1)) == [(100, S, False)]  # the winner never asked: ask again


def test_requests_while_closing_are_refused() -> None:
    orch = core(members=(110,), successors=1)
    link_up(orch, 1.0, 110)
    orch.peer_removed(110, RemovalCause.MEMBERSHIP_REVOKED, 2.0)
    assert orch.phase(110) is Phase.CLOSING
    assert orch.link_request(110, LinkRequest(S), 2.1)[0].refusal is LinkRefusal.LINK_CLOSING



# -- a peer that restarts with the same node id ----------------------------------------------------


def test_requests_and_acceptances_carry_the_epoch() -> None:
    orch = Orchestrator(ME, TopologyConfig(successors=1, long_distance=0), random.Random(0), 0.0, T, epoch=42)
    orch.signal_connected(0.0)
    orch.peer_added(110, 0.0)
    (ask,) = of(orch.tick(1.0), SendLinkRequest)
    assert ask.request.epoch == 42
    answer, _ = orch.link_request(90, LinkRequest(S, epoch=7), 1.0)
    assert answer.accepted and answer.epoch == 42


def test_a_new_link_asked_for_while_ours_is_up_is_refused_and_ours_probed() -> None:
    # The peer's end of our link is gone (its TURN server died: decision 0049), or the request is a late copy:
    # refused either way, and the tunnel probed, so a dead one goes down within a few RTTs, not dead_after.
    orch = core(members=(90, 110, 120))
    assert orch.link_request(90, LinkRequest(S, epoch=1), 1.0)[0].accepted
    orch.tunnel_up(90, "t", "tap90", 1.1)
    answer, out = orch.link_request(90, LinkRequest(S, epoch=1), 2.0)
    assert answer.refusal is LinkRefusal.ALREADY_LINKED
    assert of(out, Doubt) == [Doubt(90)]
    assert orch.phase(90) is Phase.UP
    # Holding the link we share (existing) is no sign of a lost end: nothing probed.
    _, out = orch.link_request(90, LinkRequest(S, existing=True, epoch=1), 3.0)
    assert of(out, Doubt) == []


def test_a_restarted_peer_s_request_replaces_the_stale_link_it_accepted_at_once() -> None:
    orch = core(members=(90, 110, 120))
    assert orch.link_request(90, LinkRequest(S, epoch=1), 1.0)[0].accepted
    orch.tunnel_up(90, "old", "tap90", 1.1)
    assert orch.phase(90) is Phase.UP
    # The same run asking again (a late duplicate) is still refused: that link is fine.
    assert orch.link_request(90, LinkRequest(S, epoch=1), 2.0)[0].refusal is LinkRefusal.ALREADY_LINKED
    # Node 90 restarts with the same id and a new epoch; the old tunnel has not timed out here yet.
    answer, out = orch.link_request(90, LinkRequest(S, epoch=2), 3.0)
    assert answer.accepted
    assert of(out, Notify) == [Notify(LinkDown(90, "tap90", "peer restarted"))]
    assert of(out, Disconnect) == []  # the peer's tunnel offer replaces the stale tunnel
    assert orch.phase(90) is Phase.AWAITING
    # The stale tunnel's end is old news: no second LinkDown, no failure, no backoff.
    assert orch.tunnel_down(90, "old", "replaced by a new offer from the peer", 3.1) == []
    assert orch.phase(90) is Phase.AWAITING and not orch.backed_off(3.1)
    assert of(orch.tunnel_up(90, "new", "tap90", 3.2), Notify) == [Notify(LinkUp(90, S, "tap90"))]


def test_a_restarted_peer_s_request_replaces_a_stale_link_we_asked_for() -> None:
    orch = core(members=(110, 120))
    (ask, *_) = of(orch.tick(1.0), SendLinkRequest)
    assert ask.peer == 110
    (connect,) = of(orch.link_answered(110, ask.seq, LinkAnswer(True, epoch=5), 1.1), Connect)
    orch.connect_succeeded(110, connect.seq, "old", "tap110", 1.2)
    assert up_links(orch) == {110: S}
    answer, out = orch.link_request(110, LinkRequest(O, epoch=6), 4.0)
    assert answer.accepted and of(out, Notify) == [Notify(LinkDown(110, "tap110", "peer restarted"))]
    # An existing-link request is no restart (a new run has no links to take over): left as it was.
    orch2 = core(members=(110, 120))
    link_up(orch2, 1.0, 110)
    assert of(orch2.link_request(110, LinkRequest(S, existing=True, epoch=9), 2.0)[1], Notify) == []
    assert up_links(orch2) == {110: S}


# -- failures and backoff -------------------------------------------------------------------------


def test_failing_peer_is_backed_off_exponentially_and_bypassed() -> None:
    orch = core(members=(110, 120, 130), successors=1)
    now = 1.0
    delays = []
    for _ in range(6):
        (ask,) = of(orch.tick(now), SendLinkRequest)
        assert ask.peer == 110
        (connect,) = of(orch.link_answered(110, ask.seq, LinkAnswer(True), now), Connect)
        out = orch.connect_failed(110, connect.seq, "ICE failed", now)
        assert Disconnect(110) in out
        (release,) = of(out, SendRelease)  # the peer stops waiting for our tunnel
        orch.disconnected(110, now)
        orch.release_answered(110, release.seq, ReleaseAnswer(None), now)
        # Meanwhile 110 is out of the ring: the next peer becomes our successor.
        bypass = of(orch.tick(now), SendLinkRequest)
        assert [a.peer for a in bypass] == [120]
        orch.link_answered(120, bypass[0].seq, LinkAnswer(False, refusal=LinkRefusal.LINK_CLOSING), now)
        assert 110 in orch.backed_off(now)
        retry = now
        while 110 in orch.backed_off(retry):
            retry += 0.01
        wake = orch.next_wakeup(now)
        assert wake is not None and wake <= retry  # woken when it may be asked again
        delays.append(retry - now)
        now = retry + T.refused_retry  # 120's refusal has expired too
    assert delays[0] <= 1.0 and delays[2] >= 2.0 and delays[3] >= 4.0  # doubles ...
    assert max(delays) <= T.backoff_cap + 0.02  # ... up to the cap
    (ask,) = of(orch.tick(now), SendLinkRequest)
    complete(orch, ask, now)
    assert orch.backed_off(now) == set()  # success resets it


def test_a_missing_successor_is_retried_for_ever_within_the_successor_cap() -> None:
    # Issue 13: "A missing successor must be retried until it exists"; a long-distance peer may wait longer.
    timings = replace(T, backoff_cap=60.0, successor_backoff_cap=4.0)
    orch = core(members=(110,), successors=1, timings=timings)
    now, delays = 1.0, []
    for _ in range(12):
        (ask,) = of(orch.tick(now), SendLinkRequest)
        assert ask.peer == 110
        for release in of(orch.link_answered(110, ask.seq, Failure.NO_ANSWER, now), SendRelease):
            orch.release_answered(110, release.seq, ReleaseAnswer(None), now)  # the withdrawal
        retry = now
        while 110 in orch.backed_off(retry):
            retry += 0.05
        delays.append(retry - now)
        now = retry
    assert max(delays) <= 4.0 + 0.06 and min(delays[4:]) >= 2.0  # capped, never given up
    # Without that cap (a peer that is no successor of ours) the same failures back off much longer.
    backoff, rng = PeerBackoff(1.0, 60.0), random.Random(0)
    for failure in range(8):
        backoff.failed(150, float(failure), rng)
    assert backoff.blocked(150, 7.0 + 4.5)


def test_a_successor_refused_quietly_for_long_is_warned_about_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    # A passing refusal (already_linked) is retried every refused_retry without a log line of its own: the
    # ring's gap still shows in the log, with the last setback, once it is `successor_overdue` old.
    orch = core(members=(110,), successors=1, timings=replace(T, successor_overdue=30.0))
    warned: list[float] = []
    with caplog.at_level(logging.WARNING, logger="evio.overlay.orchestrator"):
        for step in range(1, 200):
            now = step * 0.5
            for ask in of(orch.tick(now), SendLinkRequest):
                before = len(caplog.records)
                orch.link_answered(110, ask.seq, LinkAnswer(False, refusal=LinkRefusal.ALREADY_LINKED), now)
                assert len(caplog.records) == before  # the refusal itself is quiet
            if len(caplog.records) > len(warned):
                warned.append(now)
    assert len(warned) == 2 and 30.0 <= warned[0] <= 41.0 and warned[1] - warned[0] >= OVERDUE_REPEAT
    message = caplog.records[0].getMessage()
    assert f"successor peer={110:032x} has had no link" in message and "refused: already_linked" in message
    # Once the link is up there is nothing to warn about.
    (ask,) = of(orch.tick(200.0), SendLinkRequest)
    complete(orch, ask, 200.0)
    caplog.clear()
    orch.tick(211.0)
    assert orch.phase(110) is Phase.UP and caplog.records == []


def test_unanswered_requests_back_off_but_signal_outage_does_not() -> None:
    orch = core(members=(110,), successors=1)
    (ask,) = of(orch.tick(1.0), SendLinkRequest)
    orch.link_answered(110, ask.seq, Failure.SIGNAL_DOWN, 1.1)
    assert orch.backed_off(1.1) == set()
    (ask,) = of(orch.tick(2.5), SendLinkRequest)
    orch.link_answered(110, ask.seq, Failure.NO_ANSWER, 2.6)
    assert orch.backed_off(2.6) == {110}


def test_tunnel_dying_counts_as_a_failure_a_release_does_not() -> None:
    orch = core(members=(110, 120), successors=1)
    link_up(orch, 1.0, 110)
    orch.tunnel_down(110, "t110", "peer silent", 2.0)
    assert orch.backed_off(2.0) == {110}


# -- signaling outage, departures ---------------------------------------------------------------


def test_signal_outage_keeps_every_link_and_pauses_evaluation() -> None:
    orch = core(members=(110, 120, 130), long_distance=1)
    link_up(orch, 1.0, 110, 120)
    before = orch.adjacency()
    out = orch.signal_disconnected(5.0)
    for peer in (110, 120, 130):
        out += orch.peer_removed(peer, RemovalCause.SIGNAL_LOST, 5.0)
    for t in (6.0, 20.0, 60.0):
        out += orch.tick(t)
    assert out == []
    assert orch.adjacency() == before
    # Back: nothing moves before the members are known again.
    assert orch.signal_connected(61.0) == []
    for peer in (110, 120, 130):
        orch.peer_added(peer, 61.1)
    assert orch.tick(61.5) == []
    out = orch.tick(62.0)
    assert of(out, Disconnect) == [] and of(out, SendRelease) == []


def test_a_release_lost_to_a_signal_outage_is_sent_again_and_the_tunnel_stays_meanwhile() -> None:
    orch = core(members=(110, 120))
    link_up(orch, 1.0, 110, 120)
    orch.peer_added(105, 2.0)
    (ask,) = of(orch.tick(2.5), SendLinkRequest)
    complete(orch, ask, 2.6)
    (release,) = of(orch.tick(2.7), SendRelease)
    assert release.peer == 120
    out = orch.release_answered(120, release.seq, Failure.SIGNAL_DOWN, 2.8)
    out += orch.signal_disconnected(2.8) + orch.tick(5.0)
    assert of(out, Disconnect) == [] and orch.phase(120) is Phase.UP
    orch.signal_connected(6.0)
    (again,) = of(orch.tick(6.0), SendRelease)
    assert again.peer == 120 and again.request == ReleaseRequest(S)
    assert of(orch.release_answered(120, again.seq, ReleaseAnswer(None), 6.1), Disconnect) == [Disconnect(120)]


def test_a_peer_that_leaves_is_forgotten() -> None:
    orch = core(members=(110, 120), successors=1, long_distance=1)
    link_up(orch, 1.0, 110)  # the successor: the long-distance link waits for it
    assert [p for p, _, _ in requests(orch.tick(1.0))] == [120]
    orch.want_on_demand(120, 1.0)
    assert orch.tracked_peers() == 2
    orch.peer_removed(120, RemovalCause.LEFT, 2.0)
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    orch.tunnel_down(110, "t110", "peer-silent", 2.5)  # an up link goes with its tunnel
    assert orch.tracked_peers() == 0
    assert orch.adjacency() == {}


def test_an_up_link_to_a_peer_that_left_signaling_stays_until_its_tunnel_goes() -> None:
    orch = core(members=(110,), successors=1)
    link_up(orch, 1.0, 110)
    out = orch.peer_removed(110, RemovalCause.LEFT, 2.0) + orch.tick(3.0)
    assert of(out, Disconnect) == []
    assert up_links(orch) == {110: S}
    orch.tunnel_down(110, "t110", "peer silent", 4.0)
    assert orch.tracked_peers() == 0


def test_revoked_membership_tears_the_link_down() -> None:
    orch = core(members=(110,), successors=1)
    link_up(orch, 1.0, 110)
    out = orch.peer_removed(110, RemovalCause.MEMBERSHIP_REVOKED, 2.0)
    assert of(out, Disconnect) == [Disconnect(110)]
    out = orch.disconnected(110, 2.1)
    assert of(out, Notify) == [Notify(LinkDown(110, "tap110", "closed"))]
    assert orch.tracked_peers() == 0


# -- on-demand, rate limit, adoption, leftovers --------------------------------------------------


def test_on_demand_links_within_max_links() -> None:
    orch = core(members=(110, 120, 130, 140, 150), successors=1, on_demand=OnDemandConfig(max_links=2))
    link_up(orch, 1.0, 110)
    for peer in (130, 140, 150, 110):  # 110 is linked already: it does not use an on-demand slot
        orch.want_on_demand(peer, 2.0)
    assert requests(orch.tick(2.0)) == [(130, O, False), (140, O, False)]
    orch.drop_on_demand(130, 3.0)
    assert requests(orch.tick(3.0)) == []  # 130 is in flight: 150 waits for its slot
    assert orch.drop_on_demand(999, 3.0) == []


def test_on_demand_ignored_when_disabled() -> None:
    orch = core(members=(110, 130), successors=1, on_demand=OnDemandConfig(enabled=False))
    orch.want_on_demand(130, 1.0)
    assert requests(orch.tick(1.0)) == [(110, S, False)]


def test_on_demand_link_released_when_idle() -> None:
    orch = core(members=(110, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.want_on_demand(130, 2.0)
    link_up(orch, 2.0, 130)
    orch.drop_on_demand(130, 3.0)
    (release,) = of(orch.tick(3.0), SendRelease)
    assert release.peer == 130 and release.request == ReleaseRequest(O)


def test_disabling_on_demand_by_reload_releases_its_links_and_enabling_it_again_brings_none_back() -> None:
    orch = core(members=(110, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.want_on_demand(130, 2.0)
    link_up(orch, 2.0, 130)
    off = TopologyConfig(successors=1, long_distance=0, on_demand=OnDemandConfig(enabled=False))
    orch.set_topology(off, 3.0)
    (release,) = of(orch.tick(3.0), SendRelease)
    assert release.peer == 130 and release.request == ReleaseRequest(O)
    # The wish went with the setting: enabled again, nothing asks until traffic does.
    orch.set_topology(TopologyConfig(successors=1, long_distance=0), 4.0)
    assert requests(orch.tick(4.0)) == []


def test_changes_are_rate_limited() -> None:
    timings = Timings(settle_after_login=1.0, change_rate=2.0, change_burst=2, max_setups=100)
    orch = core(members=(110, 120, 130, 140), successors=4, timings=timings)
    assert [p for p, _, _ in requests(orch.tick(1.0))] == [110, 120]
    assert orch.next_wakeup(1.0) == pytest.approx(1.5)
    assert [p for p, _, _ in requests(orch.tick(1.5))] == [130]
    assert [p for p, _, _ in requests(orch.tick(2.0))] == [140]


def test_at_most_max_setups_new_links_are_under_way_at_once_successors_first() -> None:
    # 64 nodes starting together on two cores: every setup at once made them all time out together.
    orch = core(members=range(101, 164), long_distance=None, timings=replace(T, max_setups=3))
    successors = of(orch.tick(1.0), SendLinkRequest)
    assert [a.request.type for a in successors] == [S, S]  # the ring first, alone
    for ask in successors:
        complete(orch, ask, 1.5)
    asks = of(orch.tick(1.5), SendLinkRequest)
    assert [a.request.type for a in asks] == [L, L, L]
    assert requests(orch.tick(1.6)) == []  # all three in flight
    out = orch.link_answered(asks[0].peer, asks[0].seq, LinkAnswer(True), 2.0)
    (connect,) = of(out, Connect)
    assert requests(out + orch.tick(2.0)) == []  # accepted and connecting: still under way
    out = orch.connect_succeeded(asks[0].peer, connect.seq, "t", "tap", 2.5)
    assert [t for _, t, _ in requests(out + orch.tick(2.5))] == [L]  # one done: the next starts
    # A successor has slots of its own: three long-distance setups under way do not hold it up.
    orch.tunnel_down(successors[0].peer, f"t{successors[0].peer}", "peer-silent", 3.0)
    again = 3.0
    while successors[0].peer in orch.backed_off(again):
        again += 0.5
    assert requests(orch.tick(again)) == [(successors[0].peer, S, False)]


def test_fewer_setups_are_under_way_at_once_while_the_host_is_loaded() -> None:
    # A loaded host's setups slow each other: with as many at once as unloaded they missed their deadlines
    # together and were retried together. The slots follow the load (the tunnels' patience factor).
    load = [4.0]
    topology = TopologyConfig(successors=2, long_distance=None)
    orch = Orchestrator(ME, topology, random.Random(0), 0.0, replace(T, max_setups=3), name="ov", load=lambda: load[0])
    orch.signal_connected(0.0)
    for peer in range(101, 164):
        orch.peer_added(peer, 0.0)
    first = of(orch.tick(1.0), SendLinkRequest)
    assert [a.request.type for a in first] == [S]  # one successor at a time, not both
    complete(orch, first[0], 1.2)
    second = of(orch.tick(1.2), SendLinkRequest)
    assert [a.request.type for a in second] == [S]
    complete(orch, second[0], 1.4)
    assert [a.request.type for a in of(orch.tick(1.4), SendLinkRequest)] == [L]  # one long-distance link
    load[0] = 1.4  # the loop catches up: ceil(3 / 1.4) = 3 at once
    assert [t for _, t, _ in requests(orch.tick(1.5))] == [L, L]


def test_a_new_link_asked_for_without_an_answer_is_withdrawn_so_the_peer_does_not_wait_for_it() -> None:
    # The lab's asymmetric pair: the peer accepted and held the link as pending while our side,
    # its answer lost, had moved on.
    asker = core(members=(110, 120), successors=1)
    (ask,) = of(asker.tick(1.0), SendLinkRequest)
    answerer = Orchestrator(110, TopologyConfig(successors=1, long_distance=0), random.Random(1), 0.0, T)
    answerer.signal_connected(0.0)
    answerer.peer_added(ME, 0.0)
    answer, _ = answerer.link_request(ME, ask.request, 1.1)
    assert answer.accepted and answerer.phase(ME) is Phase.AWAITING
    (release,) = of(asker.link_answered(110, ask.seq, Failure.NO_ANSWER, 11.0), SendRelease)
    assert release.peer == 110 and release.request == ReleaseRequest(S)
    reply, _ = answerer.release_request(ME, release.request, 11.1)
    assert answerer.phase(ME) is Phase.NONE and ME not in answerer.adjacency()
    asker.release_answered(110, release.seq, reply, 11.2)
    assert asker.adjacency() == {}


def test_a_tunnel_that_fails_while_we_connect_is_withdrawn_too() -> None:
    orch = core(members=(110, 120), successors=1)
    (ask,) = of(orch.tick(1.0), SendLinkRequest)
    assert of(orch.link_answered(110, ask.seq, LinkAnswer(True), 1.1), Connect)
    out = orch.tunnel_down(110, "t1", "offer to 110: no_response", 6.0)
    assert [r.request for r in of(out, SendRelease) if r.peer == 110] == [ReleaseRequest(S)]
    assert 110 in orch.backed_off(6.0)


def test_a_link_the_peer_opened_is_taken_over_not_opened_again() -> None:
    orch = core(members=(110, 120), successors=1, cap=1)
    link_up(orch, 1.0, 110)
    # 120 holds a long-distance link to us, and we now want 120 as a successor (110 leaves).
    orch.link_request(120, LinkRequest(L), 2.0)
    orch.tunnel_up(120, "t120", "tap120", 2.1)
    orch.peer_removed(110, RemovalCause.LEFT, 3.0)
    orch.tunnel_down(110, "t110", "closed by peer", 3.0)
    out = orch.tick(4.0)
    assert requests(out) == [(120, S, True)] and of(out, Connect) == []
    assert orch.adjacency()[120].link_type is S


def test_a_take_over_refused_lets_go_of_the_link() -> None:
    orch = core(members=(110, 120), successors=1, cap=1)
    link_up(orch, 1.0, 110)
    orch.link_request(120, LinkRequest(O), 2.0)
    orch.tunnel_up(120, "t120", "tap120", 2.1)
    orch.peer_removed(110, RemovalCause.LEFT, 3.0)
    orch.tunnel_down(110, "t110", "closed by peer", 3.0)
    (ask,) = of(orch.tick(4.0), SendLinkRequest)
    assert ask.request == LinkRequest(S, existing=True)
    # Meanwhile 120 released its own hold and refuses ours: we let go, it may close.
    orch.release_request(120, ReleaseRequest(O), 4.1)
    out = orch.link_answered(120, ask.seq, LinkAnswer(False, refusal=LinkRefusal.LINK_CLOSING), 4.2)
    (release,) = of(out, SendRelease)
    assert release.request == ReleaseRequest(S)
    assert of(orch.release_answered(120, release.seq, ReleaseAnswer(None), 4.3), Disconnect) == [Disconnect(120)]


def test_an_unheld_tunnel_is_closed_after_grace() -> None:
    orch = core(members=(110,), successors=0)
    orch.tick(1.0)
    orch.tunnel_up(110, "stray", "tap110", 1.0)  # nobody asked for it
    assert of(orch.tick(1.0), Disconnect) == []
    assert orch.next_wakeup(1.0) == pytest.approx(4.0)
    assert of(orch.tick(4.0), Disconnect) == [Disconnect(110)]


def test_an_accepted_link_never_connected_is_forgotten() -> None:
    orch = core(members=(90,), successors=0, cap=1)
    orch.tick(1.0)
    assert orch.link_request(90, LinkRequest(L), 1.0)[0].accepted
    assert orch.view().incoming_long_distance_only() == 1
    orch.tick(31.0)
    assert orch.tracked_peers() == 0 and orch.view().incoming_long_distance_only() == 0


def test_stop_releases_disconnects_and_close_reports_the_rest() -> None:
    orch = core(members=(110, 120))
    link_up(orch, 1.0)
    out = orch.stop(2.0)
    assert sorted(a.peer for a in of(out, SendRelease)) == [110, 120]
    assert sorted(a.peer for a in of(out, Disconnect)) == [110, 120]
    assert of(orch.tunnel_down(110, "t110", "closed", 2.1), Notify) == [Notify(LinkDown(110, "tap110", "closed"))]
    assert orch.tick(3.0) == [] and orch.next_wakeup(3.0) is None
    assert orch.link_request(130, LinkRequest(S), 3.0)[0].refusal is LinkRefusal.STOPPING
    assert of(orch.close(), Notify) == [Notify(LinkDown(120, "tap120", "controller stopped"))]
    assert orch.tracked_peers() == 0 and orch.adjacency() == {}


def test_same_inputs_same_decisions() -> None:
    def run() -> list[Action]:
        orch = core(members=range(101, 164), long_distance=None, seed=7)
        return orch.tick(1.0)

    first = run()
    assert len(first) == 2  # s = 2; the k = floor(log2 64) long-distance links follow once they are up
    assert first == run()


def test_a_linked_peer_gone_from_signaling_triggers_one_membership_check() -> None:
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0)
    assert orch.phase(110) is Phase.UP
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    wake = orch.next_wakeup(2.0)
    assert wake is not None and wake <= 2.0 + T.revalidate_after
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(2.0 + T.revalidate_after / 2))
    checks = [a for a in orch.tick(2.0 + T.revalidate_after) if isinstance(a, CheckMembership)]
    assert len(checks) == 1 and orch.phase(110) is Phase.UP  # asked, not yet cut
    # Revoked while absent: the link goes at once.
    out = orch.peer_removed(110, RemovalCause.MEMBERSHIP_REVOKED, 4.0)
    assert Disconnect(110) in out


def test_a_peer_that_dropped_out_is_given_as_long_as_our_own_last_way_back_took() -> None:
    # On a loaded host a login took 20 s: a check after 1.5 s turned every dropped session into a
    # re-login of each of its linked peers.
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0)
    orch.signal_disconnected(2.0)
    orch.signal_connected(14.0)  # 12 s to log in again
    orch.peer_removed(110, RemovalCause.LEFT, 20.0)
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(20.0 + 11.0))
    checks = [a for a in orch.tick(20.0 + 12.0) if isinstance(a, CheckMembership)]
    assert len(checks) == 1
    # Never longer than a peer that said it is logging in again gets.
    slow = core(members=(110, 120, 130))
    link_up(slow, 1.0)
    slow.signal_disconnected(2.0)
    slow.signal_connected(2.0 + 10 * T.relogin_grace)
    slow.peer_removed(110, RemovalCause.LEFT, 1000.0)
    assert [a for a in slow.tick(1000.0 + T.relogin_grace) if isinstance(a, CheckMembership)]


def test_a_peer_logging_in_again_sets_off_no_membership_check_of_ours_unless_it_stays_away() -> None:
    # A membership check is a re-login that our own peers see: were it answered with checks of
    # theirs, re-logins would run around a large overlay for ever (the 64-node lab did so).
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0)
    orch.peer_removed(110, RemovalCause.RELOGIN, 2.0)
    assert orch.phase(110) is Phase.UP
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(2.0 + 4 * T.revalidate_after))
    # Still away long after it said it would be back: now it is asked about.
    checks = [a for a in orch.tick(2.0 + T.relogin_grace) if isinstance(a, CheckMembership)]
    assert len(checks) == 1 and orch.phase(110) is Phase.UP


def test_our_first_login_counts_as_a_way_back() -> None:
    # The last daemons of a 128-node lab took 20 s and more to log in the first time; their peers,
    # never logged out themselves, asked about every peer whose session dropped after 1.5 s.
    topology = TopologyConfig(successors=2, long_distance=0)
    orch = Orchestrator(ME, topology, random.Random(0), 0.0, T, name="ov")
    orch.signal_connected(12.0)  # the first login took 12 s
    for peer in (110, 120, 130):
        orch.peer_added(peer, 12.0)
    link_up(orch, 13.0)
    orch.peer_removed(110, RemovalCause.LEFT, 20.0)
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(20.0 + 11.0))
    assert [a for a in orch.tick(20.0 + 12.0) if isinstance(a, CheckMembership)]


def test_a_peer_logging_in_again_gets_twice_our_own_slow_way_back_before_a_check() -> None:
    # A 128-node lab on two cores: logins took 20-60 s, and checks after 30 s ran around the overlay.
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0)
    orch.signal_disconnected(2.0)
    orch.signal_connected(2.0 + T.relogin_grace)  # our own way back took relogin_grace
    orch.peer_removed(110, RemovalCause.RELOGIN, 100.0)
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(100.0 + 2 * T.relogin_grace - 1.0))
    checks = [a for a in orch.tick(100.0 + 2 * T.relogin_grace) if isinstance(a, CheckMembership)]
    assert len(checks) == 1 and orch.phase(110) is Phase.UP
    # Bounded: after a long outage of our own, a revoked member is still found.
    slow = core(members=(110, 120, 130))
    link_up(slow, 1.0)
    slow.signal_disconnected(2.0)
    slow.signal_connected(2.0 + 3600.0)
    slow.peer_removed(110, RemovalCause.RELOGIN, 4000.0)
    bound = RELOGIN_GRACE_STRETCH * T.relogin_grace
    assert not any(isinstance(a, CheckMembership) for a in slow.tick(4000.0 + bound - 1.0))
    assert [a for a in slow.tick(4000.0 + bound) if isinstance(a, CheckMembership)]


def test_a_peer_back_in_time_is_not_checked() -> None:
    orch = core(members=(110, 120, 130))
    link_up(orch, 1.0)
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    orch.peer_added(110, 2.5)
    assert not any(isinstance(a, CheckMembership) for a in orch.tick(2.0 + T.revalidate_after))


def test_a_successor_gone_from_signaling_gets_a_stand_in_at_once_which_takes_its_place_if_it_died() -> None:
    orch = core(members=(110, 120, 130), successors=1)
    link_up(orch, 1.0, 110)
    # 110 crashed: its presence goes; its tunnel is probed, and 120 is asked for a successor link now.
    out = orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    assert orch.next_wakeup(2.0) == 2.0  # not after the membership debounce
    (ask,) = of(out + orch.tick(2.0), SendLinkRequest)
    assert (ask.peer, ask.request.type, ask.request.existing) == (120, S, False)
    assert of(complete(orch, ask, 2.1), Disconnect) == []
    assert up_links(orch) == {110: S, 120: S}  # presence alone takes nothing away
    out = orch.tunnel_down(110, "t110", "peer-silent", 2.3)  # the probe found it dead
    assert requests(out + orch.tick(2.3)) == [] and of(out, SendRelease) == []
    assert up_links(orch) == {120: S}
    assert of(orch.tick(5.0), SendRelease) == []  # past the doubt: 120 is the successor now


def test_a_doubted_successor_that_lives_keeps_its_link_and_its_stand_in_is_released() -> None:
    orch = core(members=(110, 120, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    (ask,) = of(orch.tick(2.0), SendLinkRequest)
    complete(orch, ask, 2.1)
    assert of(orch.tick(3.0), SendRelease) == []  # still doubted: both are wanted
    assert of(orch.tick(3.9), SendRelease) == []  # (asks signaling about 110 meanwhile)
    assert orch.next_wakeup(3.9) == 2.0 + T.standby_window
    out = orch.tick(2.0 + T.standby_window)  # its tunnel answered the probe: 110 stays, 120 goes
    assert [(r.peer, r.request.type) for r in of(out, SendRelease)] == [(120, S)]
    assert of(out, Disconnect) == [] and 110 in up_links(orch)


def test_a_successor_back_in_signaling_ends_the_doubt_and_its_stand_in() -> None:
    orch = core(members=(110, 120, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    orch.peer_added(110, 2.05)
    assert requests(orch.tick(2.1)) == []  # back before the evaluation: no stand-in
    orch.peer_removed(110, RemovalCause.LEFT, 3.0)
    (ask,) = of(orch.tick(3.0), SendLinkRequest)
    complete(orch, ask, 3.1)
    orch.peer_added(110, 3.2)
    assert [r.peer for r in of(orch.tick(3.7), SendRelease)] == [120]  # after the debounce, not the window
    # A peer saying it logs in again is not doubted.
    orch.peer_removed(110, RemovalCause.RELOGIN, 4.0)
    assert requests(orch.tick(4.6)) == []


def test_a_peer_we_have_a_tunnel_with_is_no_stand_in() -> None:
    orch = core(members=(110, 120, 130), successors=1, long_distance=1)
    link_up(orch, 1.0, 110)
    link_up(orch, 1.1)  # the long-distance link: 120 or 130
    (chord,) = [p for p, t in up_links(orch).items() if t is L]
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    asks = of(orch.tick(2.0), SendLinkRequest)
    assert [(a.peer, a.request.existing) for a in asks] == ([] if chord == 120 else [(120, False)])


def test_a_crashed_successor_is_replaced_as_soon_as_its_tunnel_dies_not_after_the_debounce() -> None:
    # Without a stand-in (its presence went while our own signaling was down), the tunnel's death
    # still cuts a membership debounce short.
    orch = core(members=(110, 120, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.signal_disconnected(1.9)
    orch.peer_removed(110, RemovalCause.LEFT, 2.0)
    orch.signal_connected(2.05)  # settling until 3.05
    assert requests(orch.tick(3.05)) == []  # 110's link is up: nothing to do
    orch.peer_added(140, 3.1)  # membership moving until 3.6
    orch.tunnel_down(110, "t110", "peer-silent", 3.2)
    assert orch.next_wakeup(3.2) == 3.2
    assert requests(orch.tick(3.2)) == [(120, S, False)]  # the new successor at once, not at 3.6


def test_a_tunnel_down_of_a_present_peer_still_waits_for_a_moving_membership() -> None:
    orch = core(members=(110, 120, 130), successors=1)
    link_up(orch, 1.0, 110)
    orch.peer_added(140, 2.0)  # membership moving until 2.5
    orch.tunnel_down(110, "t110", "peer-silent", 2.1)
    assert requests(orch.tick(2.1)) == []
    assert orch.next_wakeup(2.1) == 2.5
