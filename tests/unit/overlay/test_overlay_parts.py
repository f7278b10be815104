"""The orchestrator's parts, each alone: inputs in, actions (or times, or verdicts) out, no clock.

The orchestrator's own tests (test_overlay_orchestrator.py) drive them together; these pin what each
part decides, so a change to one shows where it is.
"""

from __future__ import annotations

import random

import pytest

from evio.config.model import LogForm, OnDemandConfig, TopologyConfig
from evio.overlay.actions import (
    Action,
    CheckMembership,
    Connect,
    Disconnect,
    Failure,
    Notify,
    SendLinkRequest,
    SendRelease,
)
from evio.overlay.adjacency import LinkType
from evio.overlay.adjacency_events import LinkDown, LinkUp
from evio.overlay.answers import Reaction, answer_link, answer_release, judge, take_acceptance
from evio.overlay.evaluation import EvaluationSchedule, evaluate, on_demand_targets
from evio.overlay.link_pacing import OVERDUE_REPEAT, Pacing, setup_slots
from evio.overlay.negotiation import LinkAnswer, LinkRefusal, LinkRequest, ReleaseAnswer
from evio.overlay.peer_links import PeerLinks, Phase
from evio.overlay.presence import RELOGIN_GRACE_STRETCH, Presence, absent_wait
from evio.overlay.stand_ins import StandIns
from evio.overlay.symphony import Ring, Selection
from evio.overlay.timings import Timings
from evio.signal.events import RemovalCause

S, L, O = LinkType.SUCCESSOR, LinkType.LONG_DISTANCE, LinkType.ON_DEMAND
T = Timings()
CAPS = {S: 6, L: 4, O: 8}


def up(links: PeerLinks, peer: int, held: LinkType | None = S, theirs: LinkType | None = None) -> None:
    """A link to `peer` that is up, held as given."""
    st = links.track(peer)
    st.held, st.theirs = held, theirs
    links.tunnel_up(peer, f"t{peer}", f"tap{peer}", 0.0)


# -- peer_links ---------------------------------------------------------------------------------


def test_each_request_and_connect_gets_a_new_seq() -> None:
    links = PeerLinks("ov")
    st = links.track(1)
    [ask] = links.ask(1, st, LinkRequest(S))
    [connect] = links.connect(1, st, 0.0)
    assert isinstance(ask, SendLinkRequest) and isinstance(connect, Connect)
    assert (st.asking, st.asking_seq, ask.seq) == (S, 1, 1)
    assert (connect.seq, st.connect_seq, st.phase) == (2, 2, Phase.CONNECTING)
    assert links.requests_sent == 1


def test_a_tunnel_coming_up_announces_the_held_link_once_and_a_new_one_replaces_it() -> None:
    links = PeerLinks()
    links.track(1).held = S
    assert links.tunnel_up(1, "t1", "tap1", 1.0) == [Notify(LinkUp(1, S, "tap1"))]
    assert links.tunnel_up(1, "t1", "tap1", 2.0) is None  # connect's result and the event both report it
    assert links.tunnel_up(1, "t2", "tap2", 3.0) == [
        Notify(LinkDown(1, "tap1", "replaced by a new tunnel")), Notify(LinkUp(1, S, "tap2")),
    ]


def test_a_tunnel_nobody_holds_gets_no_link_up() -> None:
    links = PeerLinks()
    assert links.tunnel_up(1, "t1", "tap1", 1.0) == []
    assert links.end_tunnel(1, links.track(1), "gone", 2.0) == []  # nothing was announced
    assert links.phase(1) is Phase.NONE


def test_tunnel_events_about_an_older_tunnel_are_told_apart() -> None:
    links = PeerLinks()
    up(links, 1)
    st = links.track(1)
    assert st.reports_current("t1") and st.reports_current(None) and not st.reports_current("t0")
    links.end_tunnel(1, st, "down", 1.0)
    assert not st.reports_current("t1")  # a late report about the tunnel that went down


@pytest.mark.parametrize(
    ("member", "connected", "expected", "release_due"),
    [
        (True, True, SendRelease, None),  # say so: the peer decides whether the tunnel stays
        (True, False, None, S),  # no signaling: said once it is back, the tunnel stays meanwhile
        (False, True, Disconnect, None),  # the peer is gone: nobody holds the link, close it
    ],
)
def test_letting_go_of_a_link(member: bool, connected: bool, expected: type | None, release_due: LinkType | None) -> None:
    links = PeerLinks()
    up(links, 1)
    st = links.track(1)
    actions = links.let_go(1, st, 1.0, member, connected)
    assert [type(a) for a in actions] == ([expected] if expected else [])
    assert st.held is None and st.release_due is release_due


def test_an_unheld_tunnel_is_closed_after_the_orphan_grace() -> None:
    links = PeerLinks()
    up(links, 1, held=None)
    assert links.expire(1.0, {1}, True, orphan_grace=20.0) == []
    assert links.expire(20.9, {1}, True, orphan_grace=20.0) == []
    assert links.expire(21.0, {1}, True, orphan_grace=20.0) == [Disconnect(1)]
    assert links.phase(1) is Phase.CLOSING


def test_a_requester_that_never_connects_is_forgotten_at_the_deadline() -> None:
    links = PeerLinks()
    st = links.track(1)
    st.theirs, st.deadline = S, 5.0
    st.set_phase(Phase.AWAITING, 0.0)
    assert links.expire(4.0, {1}, True, 20.0) == [] and links.phase(1) is Phase.AWAITING
    assert links.expire(5.0, {1}, True, 20.0) == []
    assert links.get(1) is None  # nothing left to track


def test_a_release_owed_goes_once_signaling_is_back() -> None:
    links = PeerLinks()
    up(links, 1)
    links.let_go(1, links.track(1), 1.0, member=True, connected=False)
    assert links.expire(2.0, {1}, False, 20.0) == []
    [release] = links.expire(3.0, {1}, True, 20.0)
    assert isinstance(release, SendRelease) and release.request.type is S


def test_stop_releases_held_links_to_members_then_disconnects_every_tunnel() -> None:
    links = PeerLinks()
    up(links, 1)
    up(links, 2, held=None, theirs=L)
    up(links, 3)
    actions = links.stop({1, 2}, True, 5.0)
    assert [(type(a), a.peer) for a in actions if isinstance(a, SendRelease | Disconnect)] == [
        (SendRelease, 1), (Disconnect, 1), (Disconnect, 2), (Disconnect, 3),
    ]


def test_the_views_count_what_is_set_up() -> None:
    links = PeerLinks()
    up(links, 1)
    links.ask(2, links.track(2), LinkRequest(S))
    links.ask(3, links.track(3), LinkRequest(L))
    connecting = links.track(4)
    connecting.held = L
    links.connect(4, connecting, 0.0)
    assert links.tunnel_count() == 2  # up and connecting; requests in flight have no tunnel yet
    assert links.asking_new() == 2
    assert (links.setting_up(successors=True), links.setting_up(successors=False)) == (1, 2)
    assert links.up_and_held() == {1}
    assert sorted(links.held_or_asked(L)) == [3, 4]
    assert links.expects_tunnel(4) and not links.expects_tunnel(2)


# -- answers ------------------------------------------------------------------------------------


def answer(links: PeerLinks, peer: int, request: LinkRequest, max_tunnels: int = 10) -> tuple[LinkAnswer, list[Action]]:
    return answer_link(links, peer, links.track(peer), request, node_id=100, caps=CAPS,
                       max_tunnels=max_tunnels, await_tunnel=30.0, now=1.0)


def test_a_new_link_is_accepted_and_its_tunnel_awaited() -> None:
    links = PeerLinks()
    result, actions = answer(links, 1, LinkRequest(S))
    st = links.track(1)
    assert result == LinkAnswer(True, held_as=None) and actions == []
    assert (st.phase, st.theirs, st.deadline) == (Phase.AWAITING, S, 31.0)


def test_a_new_link_is_refused_at_the_tunnel_cap_and_while_its_tunnel_closes() -> None:
    links = PeerLinks()
    up(links, 1)
    assert answer(links, 2, LinkRequest(S), max_tunnels=1)[0].refusal is LinkRefusal.TOO_MANY_LINKS
    links.disconnect(1, links.track(1), 2.0)
    assert answer(links, 1, LinkRequest(S))[0].refusal is LinkRefusal.LINK_CLOSING


def test_an_existing_link_is_taken_over_and_announced_or_refused_without_one() -> None:
    links = PeerLinks()
    assert answer(links, 1, LinkRequest(S, existing=True))[0].refusal is LinkRefusal.NO_LINK
    up(links, 2, held=None)
    result, actions = answer(links, 2, LinkRequest(L, existing=True))
    assert result.accepted and actions == [Notify(LinkUp(2, L, "tap2"))]


def test_an_acceptance_of_our_new_link_connects_and_of_an_existing_one_holds_it() -> None:
    links = PeerLinks()
    st = links.track(1)
    links.ask(1, st, LinkRequest(S))
    [connect] = take_acceptance(links, 1, st, LinkAnswer(True, held_as=None, epoch=7), 1.0)
    assert isinstance(connect, Connect) and (st.held, st.epoch, st.asking) == (S, 7, None)
    up(links, 2, held=None, theirs=L)
    st2 = links.track(2)
    links.ask(2, st2, LinkRequest(S, existing=True))
    st2.held = S  # evaluation holds a retyped link as soon as it asks
    assert take_acceptance(links, 2, st2, LinkAnswer(True, held_as=L), 1.0) == []  # announced already


def test_a_release_is_answered_with_our_own_hold() -> None:
    links = PeerLinks()
    up(links, 1, held=L, theirs=S)
    st = links.track(1)
    assert answer_release(st, 1.0) == ReleaseAnswer(L) and not st.released_by_peer
    up(links, 2, held=None, theirs=S)
    st2 = links.track(2)
    assert answer_release(st2, 1.0) == ReleaseAnswer(None) and st2.released_by_peer


@pytest.mark.parametrize(
    ("outcome", "existing", "reaction", "let_go", "withdraw"),
    [
        (LinkAnswer(False, refusal=LinkRefusal.COLLISION), False, Reaction.AWAIT_WINNER, False, False),
        (LinkAnswer(False, refusal=LinkRefusal.COLLISION), True, Reaction.RETRY_SOON, True, False),
        (LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_LONG_DISTANCE), False, Reaction.SKIP_LONG_DISTANCE, False, False),
        (LinkAnswer(False, refusal=LinkRefusal.TOO_MANY_LINKS), False, Reaction.BACK_OFF, False, False),
        (LinkAnswer(False, refusal=LinkRefusal.RATE_LIMITED), True, Reaction.BACK_OFF, True, False),
        (LinkAnswer(False, refusal=LinkRefusal.ALREADY_LINKED), False, Reaction.RETRY_SOON, False, False),
        (Failure.NO_ANSWER, False, Reaction.BACK_OFF, False, True),
        (Failure.ERROR, True, Reaction.BACK_OFF, False, False),
        (Failure.PEER_ABSENT, False, Reaction.RETRY_SOON, False, False),
        (Failure.SIGNAL_DOWN, False, Reaction.RETRY_SOON, False, False),
    ],
)
def test_the_verdict_on_an_answer_that_is_no_acceptance(
    outcome: LinkAnswer | Failure, existing: bool, reaction: Reaction, let_go: bool, withdraw: bool
) -> None:
    verdict = judge(outcome, existing)
    assert (verdict.reaction, verdict.let_go, verdict.withdraw) == (reaction, let_go, withdraw)
    assert verdict.why.startswith("refused: " if isinstance(outcome, LinkAnswer) else "link request ")


# -- pacing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("load", "slots"), [(None, 3), (0.5, 3), (1.0, 3), (1.5, 2), (3.0, 1), (50.0, 1)])
def test_setup_slots_shrink_with_the_load_but_never_to_none(load: float | None, slots: int) -> None:
    assert setup_slots(3, load) == slots


def test_a_failing_successor_is_retried_within_its_cap_where_another_peer_waits_longer() -> None:
    pacing = Pacing(T, 0.0)
    pacing.successors = frozenset({1})
    rng = random.Random(0)
    for _ in range(10):
        successor_at = pacing.failed(1, "tunnel down", 0.0, rng, None)
        other_at = pacing.failed(2, "tunnel down", 0.0, rng, L)
    assert successor_at <= T.successor_backoff_cap
    assert other_at >= T.backoff_cap / 2  # equal jitter: at least half the cap
    assert pacing.backoff.blocked_peers(0.0) == {1, 2}


def test_retries_and_long_distance_refusals_expire_and_a_moving_ring_forgets_refusals() -> None:
    pacing = Pacing(T, 0.0)
    pacing.retry_soon(1, "refused: already_linked", 0.0)
    pacing.refuse_long_distance(2, 0.0)
    assert not pacing.may_ask(1, 1.0) and pacing.may_ask(1, T.refused_retry)
    assert pacing.refused_long_distance(1.0) == {2}
    assert sorted(pacing.wakeups(1.0)) == [T.refused_retry, T.long_distance_refusal_ttl]
    pacing.expire(T.refused_retry)
    assert pacing.tracked() == set()
    pacing.ring_moved()
    assert pacing.refused_long_distance(1.0) == set()


def test_an_overdue_successor_is_warned_about_once_a_minute_until_its_link_is_up() -> None:
    pacing = Pacing(T, 0.0)
    phases = {1: Phase.CONNECTING}
    pacing.successors = frozenset({1})
    pacing.note_setback(1, "refused: link_closing")

    def phase(peer: int) -> Phase:
        return phases.get(peer, Phase.NONE)

    assert pacing.warn_overdue([1], phase, 0.0) == []
    assert pacing.warn_overdue([1], phase, T.successor_overdue) == [1]
    assert pacing.warn_overdue([1], phase, T.successor_overdue + OVERDUE_REPEAT - 1) == []
    assert pacing.warn_overdue([1], phase, T.successor_overdue + OVERDUE_REPEAT) == [1]
    phases[1] = Phase.UP
    assert pacing.warn_overdue([1], phase, 1000.0) == []
    phases[1] = Phase.NONE
    assert pacing.warn_overdue([1], phase, 1001.0) == []  # its clock starts again


# -- presence -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cause", "rejoin", "wait"),
    [
        (RemovalCause.LEFT, 0.0, T.revalidate_after),  # unloaded: soon
        (RemovalCause.LEFT, 20.0, 20.0),  # as long as our own way back took
        (RemovalCause.LEFT, 500.0, T.relogin_grace),
        (RemovalCause.RELOGIN, 0.0, T.relogin_grace),
        (RemovalCause.RELOGIN, 40.0, 80.0),  # twice our way back
        (RemovalCause.RELOGIN, 10_000.0, RELOGIN_GRACE_STRETCH * T.relogin_grace),
    ],
)
def test_how_long_a_linked_peer_gone_from_signaling_is_given(cause: RemovalCause, rejoin: float, wait: float) -> None:
    assert absent_wait(cause, rejoin, T) == wait


def test_a_login_settles_when_the_presences_pause_at_most_after_the_settle_time() -> None:
    presence = Presence(100, T, 0.0)
    assert presence.logged_in(5.0) == 5.0 + T.settle_after_login
    assert presence.rejoin_time == 5.0  # from our start
    assert presence.add(1, 5.1) and not presence.add(1, 5.2) and not presence.add(100, 5.2)
    assert presence.settle_until == 5.1 + T.membership_debounce
    presence.logged_out(10.0)
    presence.logged_in(13.0)
    assert presence.rejoin_time == 3.0


def test_membership_is_checked_for_linked_peers_still_gone_and_only_while_logged_in() -> None:
    presence = Presence(100, T, 0.0)
    presence.logged_in(0.0)
    phases = {1: Phase.UP, 2: Phase.UP}
    presence.check_later(1, RemovalCause.LEFT, 0.0)
    presence.check_later(2, RemovalCause.LEFT, 0.0)
    presence.add(2, 1.0)  # back: still a member
    presence.logged_out(1.0)
    assert list(presence.wakeups()) == []
    assert presence.check_absent(5.0, lambda p: phases[p]) == []
    presence.logged_in(6.0)
    assert presence.check_absent(6.0, lambda p: phases[p]) == [CheckMembership()]
    assert presence.check_absent(7.0, lambda p: phases[p]) == []  # asked once


def _absence(presence: Presence, peer: int, left: float) -> float:
    """`peer` leaves at `left` (as `Orchestrator.peer_removed` tells it): when its check is due."""
    presence.members.discard(peer)
    presence.check_later(peer, RemovalCause.LEFT, left)
    return min(presence.wakeups())


def test_a_peer_a_check_found_back_is_given_twice_as_long_each_time_up_to_the_relogin_grace() -> None:
    """Review21v2 finding 1: a member cycling its session made each node it links to log in again each time."""
    presence = Presence(100, T, 0.0)
    presence.logged_in(0.0)
    up = {1: Phase.UP, 2: Phase.UP}
    t, waits = 10.0, []
    for _ in range(6):  # gone past its wait each time: every absence is checked, and it comes back after
        due = _absence(presence, 1, t)
        waits.append(due - t)
        assert presence.check_absent(due, lambda p: up[p]) == [CheckMembership()]
        t = due + 1.0
        presence.add(1, t)
        t += 1.0
    assert waits == [1.5, 3.0, 6.0, 12.0, 24.0, T.relogin_grace]
    # Back before its wait: no check, and it stays backed off (the attack: 2 s away every 6 s).
    due = _absence(presence, 1, t)
    assert due - t == T.relogin_grace
    presence.add(1, t + 2.0)
    assert presence.check_absent(due, lambda p: up[p]) == []
    # Another peer's first absence is checked as soon as ever: the backoff is per peer, a check for everyone.
    assert _absence(presence, 2, t + 3.0) == t + 3.0 + T.revalidate_after


def _found_back_once() -> Presence:
    """Peer 1 gone at 10 s, a check asked for it, and back at 12 s: its next absence waits twice as long."""
    presence = Presence(100, T, 0.0)
    presence.logged_in(0.0)
    due = _absence(presence, 1, 10.0)
    assert presence.check_absent(due, lambda p: Phase.UP) == [CheckMembership()]
    presence.add(1, 12.0)
    return presence


def test_a_peer_found_back_that_stays_for_the_relogin_grace_is_checked_at_once_again() -> None:
    presence = _found_back_once()
    assert _absence(presence, 1, 12.0 + T.relogin_grace - 0.1) == 12.0 + T.relogin_grace - 0.1 + 3.0
    presence.add(1, 50.0)  # back before it was asked about: its clock starts again from here
    assert _absence(presence, 1, 50.0 + T.relogin_grace) == 50.0 + T.relogin_grace + T.revalidate_after


def test_only_a_revoked_peer_loses_its_checks_backoff() -> None:
    presence = _found_back_once()
    _absence(presence, 1, 13.0)
    presence.forget(1)  # its link went: dropping one and asking for another buys no fresh check
    assert _absence(presence, 1, 14.0) == 14.0 + 3.0
    presence.forget(1, revoked=True)
    assert _absence(presence, 1, 15.0) == 15.0 + T.revalidate_after


# -- stand-ins ----------------------------------------------------------------------------------


def test_a_doubted_successor_gets_the_next_peers_without_a_tunnel_as_stand_ins() -> None:
    ring = Ring({100, 110, 120, 130, 140})
    selection = Selection((110, 120), ())
    stand_ins = StandIns()
    assert stand_ins.choose(100, 2, ring, selection, lambda p: False, 0.0) == ()
    stand_ins.doubt(110, 2.0)
    assert stand_ins.choose(100, 2, ring, selection, lambda p: False, 1.0) == (130,)
    # A peer with a tunnel needs none, unless it was chosen already.
    assert stand_ins.choose(100, 2, ring, selection, lambda p: p == 130, 1.5) == (130,)
    fresh = StandIns()
    fresh.doubt(110, 2.0)
    assert fresh.choose(100, 2, ring, selection, lambda p: p == 130, 1.5) == ()
    assert not stand_ins.expire(1.9) and stand_ins.expire(2.0)
    assert stand_ins.choose(100, 2, ring, selection, lambda p: False, 2.0) == ()


def test_a_doubted_peer_back_in_signaling_is_believed() -> None:
    stand_ins = StandIns()
    stand_ins.doubt(110, 2.0)
    assert list(stand_ins.wakeups()) == [2.0]
    assert stand_ins.believe(110) and not stand_ins.believe(110)


# -- evaluation ---------------------------------------------------------------------------------


def test_the_schedule_debounces_membership_changes_within_the_max_delay() -> None:
    schedule = EvaluationSchedule(T, 0.0)
    assert schedule.wakeups() == [T.reevaluate_interval]
    schedule.want(4.0)
    assert schedule.wakeups() == [T.reevaluate_interval, 4.0]
    schedule.membership_changed(1.0)
    schedule.membership_changed(1.4)
    assert schedule.wakeups() == [T.reevaluate_interval, 1.4 + T.membership_debounce]  # the debounce covers the rest
    assert schedule.settling(1.5)
    for t in (3.0, 3.5, 3.9):
        schedule.membership_changed(t)
    assert schedule.wakeups()[1] == 1.0 + T.membership_max_delay
    schedule.hurry(3.95)
    assert not schedule.settling(3.95)
    schedule.evaluating(3.95)
    assert schedule.wakeups() == [3.95 + T.reevaluate_interval]
    schedule.hurry(4.0)  # no membership change under way: nothing to hurry
    assert schedule.wakeups() == [3.95 + T.reevaluate_interval]
    schedule.membership_changed(4.0)
    schedule.membership_now(4.1)  # a successor that may have crashed: no debounce
    assert schedule.wakeups() == [3.95 + T.reevaluate_interval, 4.1]


def run_evaluation(
    links: PeerLinks, pacing: Pacing, members: set[int], *, topology: TopologyConfig | None = None,
    load: float | None = None, max_tunnels: int = 100, on_demand: dict[int, None] | None = None,
) -> tuple[list[Action], float | None]:
    return evaluate(
        node_id=100, topology=topology or TopologyConfig(successors=2, long_distance=2), log_form=LogForm.LN,
        rng=random.Random(0), epoch=9, max_tunnels=max_tunnels, load=load, members=members,
        on_demand=on_demand or {}, links=links, pacing=pacing, stand_ins=StandIns(), now=0.0,
    )


def asked(actions: list[Action]) -> list[tuple[int, LinkType]]:
    return [(a.peer, a.request.type) for a in actions if isinstance(a, SendLinkRequest)]


MEMBERS = set(range(110, 200, 10))


def test_the_ring_comes_first_no_long_distance_link_is_asked_for_while_a_successor_is_not_up() -> None:
    links, pacing = PeerLinks(), Pacing(T, 0.0)
    actions, again = run_evaluation(links, pacing, MEMBERS)
    assert asked(actions) == [(110, S), (120, S)] and again is None
    assert all(a.request.epoch == 9 for a in actions if isinstance(a, SendLinkRequest))
    assert pacing.successors == {110, 120}
    for peer in (110, 120):
        up(links, peer)
        links.track(peer).asking = None
    actions, _ = run_evaluation(links, pacing, MEMBERS)
    assert [t for _, t in asked(actions)] == [L, L]


def test_new_links_wait_for_a_setup_slot_and_the_tunnel_cap() -> None:
    links, pacing = PeerLinks(), Pacing(Timings(max_setups=2), 0.0)
    actions, _ = run_evaluation(links, pacing, MEMBERS, topology=TopologyConfig(successors=4, long_distance=0), load=2.0)
    assert asked(actions) == [(110, S)]  # two slots, halved by the load
    actions, _ = run_evaluation(PeerLinks(), Pacing(T, 0.0), MEMBERS,
                                topology=TopologyConfig(successors=4, long_distance=0), max_tunnels=2)
    assert len(asked(actions)) == 2


def test_an_empty_change_budget_defers_the_rest_to_its_next_token() -> None:
    pacing = Pacing(Timings(change_rate=2.0, change_burst=1), 0.0)
    actions, again = run_evaluation(PeerLinks(), pacing, MEMBERS)
    assert asked(actions) == [(110, S)] and again == 0.5


def test_a_surplus_link_is_let_go() -> None:
    links, pacing = PeerLinks(), Pacing(T, 0.0)
    for peer in (110, 120, 150):
        up(links, peer, held=S if peer != 150 else O)
    actions, _ = run_evaluation(links, pacing, MEMBERS, topology=TopologyConfig(successors=2, long_distance=0))
    assert [(a.peer, a.request.type) for a in actions if isinstance(a, SendRelease)] == [(150, O)]


def test_on_demand_targets_stay_within_max_links_counting_those_leaving() -> None:
    links = PeerLinks()
    up(links, 190, held=O)  # no longer wished for, not yet released
    config = OnDemandConfig(enabled=True, max_links=2)
    selection = Selection((110, 120), (150,))
    ring = Ring({100, *MEMBERS})
    wishes = dict.fromkeys([110, 130, 140, 160])
    assert on_demand_targets(config, selection, ring, wishes, links) == [130]
    assert on_demand_targets(OnDemandConfig(enabled=False), selection, ring, wishes, links) == []
