from hypothesis import given, settings
from hypothesis import strategies as st

from evio.ids import RING_SIZE, clockwise_distance
from evio.overlay.adjacency import (
    AddLink,
    Adjacency,
    ChangeType,
    Link,
    LinkOperation,
    LinkState,
    LinkType,
    RejectReason,
    RemoveLink,
    accept_request,
    desired_links,
    diff,
)
from evio.overlay.symphony import Selection

S = LinkType.SUCCESSOR
L = LinkType.LONG_DISTANCE
O = LinkType.ON_DEMAND
UP = LinkState.UP
PENDING = LinkState.PENDING
CLOSING = LinkState.CLOSING
ME = 100


def test_from_nothing_successors_come_first() -> None:
    ops = diff(ME, Adjacency(), {150: L, 101: S, 102: S, 120: O}, 2)
    assert ops == [AddLink(101, S), AddLink(102, S), AddLink(120, O), AddLink(150, L)]


def test_desired_links_keeps_the_strongest_type() -> None:
    sel = Selection(successors=(101, 102), long_distance=(150, 160))
    assert desired_links(sel, on_demand=[102, 160, 170]) == {101: S, 102: S, 150: L, 160: L, 170: O}


def test_nothing_to_do_when_current_is_desired() -> None:
    current = Adjacency({101: Link(S), 102: Link(S), 150: Link(L)}, {90: Link(S), 10: Link(L)})
    assert diff(ME, current, {101: S, 102: S, 150: L}, 2) == []


def test_old_successor_stays_until_its_replacement_is_up() -> None:
    # node 101 joined between us and our successors 102, 103
    current = Adjacency({102: Link(S), 103: Link(S)})
    ops = diff(ME, current, {101: S, 102: S}, 2)
    assert ops == [AddLink(101, S)]
    # replacement pending: still nothing removed
    current = Adjacency({101: Link(S, PENDING), 102: Link(S), 103: Link(S)})
    assert diff(ME, current, {101: S, 102: S}, 2) == []
    # replacement up: now the old one goes
    current = Adjacency({101: Link(S), 102: Link(S), 103: Link(S)})
    assert diff(ME, current, {101: S, 102: S}, 2) == [RemoveLink(103, S)]


def test_farthest_old_successor_goes_first() -> None:
    current = Adjacency({101: Link(S), 103: Link(S), 104: Link(S)})
    ops = diff(ME, current, {101: S, 102: S}, 2)
    assert ops == [AddLink(102, S), RemoveLink(104, S)]


def test_successor_turning_long_distance_waits_like_a_removal() -> None:
    current = Adjacency({102: Link(S), 103: Link(S)})
    assert diff(ME, current, {101: S, 102: S, 103: L}, 2) == [AddLink(101, S)]
    current = Adjacency({101: Link(S), 102: Link(S), 103: Link(S)})
    assert diff(ME, current, {101: S, 102: S, 103: L}, 2) == [ChangeType(103, S, L)]


def test_a_held_link_becomes_a_successor_before_anything_else() -> None:
    current = Adjacency({101: Link(L), 102: Link(S), 103: Link(S), 150: Link(L)})
    ops = diff(ME, current, {101: S, 102: S}, 2)
    assert ops[0] == ChangeType(101, L, S)
    assert RemoveLink(103, S) in ops and RemoveLink(150, L) in ops


def test_an_incoming_link_is_adopted_not_requested_again() -> None:
    current = Adjacency({}, {101: Link(L), 150: Link(S)})
    ops = diff(ME, current, {101: S, 150: L}, 1)
    assert ops == [ChangeType(101, L, S, adopted=True), ChangeType(150, S, L, adopted=True)]


def test_closing_links_are_left_alone() -> None:
    current = Adjacency({101: Link(S, CLOSING), 150: Link(L, CLOSING)}, {102: Link(L, CLOSING)})
    assert diff(ME, current, {101: S, 102: S}, 2) == []


def test_removal_order_on_demand_then_successor_then_long_distance() -> None:
    current = Adjacency({101: Link(S), 102: Link(S), 103: Link(S), 150: Link(L), 160: Link(O)})
    ops = diff(ME, current, {101: S, 102: S, 170: L, 180: O}, 2)
    assert ops == [
        RemoveLink(160, O),
        AddLink(180, O),
        RemoveLink(103, S),
        RemoveLink(150, L),
        AddLink(170, L),
    ]


# -- accept_request -------------------------------------------------------------------------


def full_incoming(k: int) -> Adjacency:
    return Adjacency({}, {200 + i: Link(L) for i in range(k)})


def test_long_distance_accepted_under_the_cap_and_refused_at_it() -> None:
    assert accept_request(ME, 300, L, full_incoming(2), 3).accepted
    decision = accept_request(ME, 300, L, full_incoming(3), 3)
    assert not decision.accepted and decision.reason is RejectReason.TOO_MANY_LONG_DISTANCE


def test_successor_and_on_demand_accepted_even_at_the_cap() -> None:
    assert accept_request(ME, 300, S, full_incoming(3), 3).accepted
    assert accept_request(ME, 300, O, full_incoming(3), 3).accepted


def test_links_both_ends_hold_do_not_count_against_the_cap() -> None:
    current = Adjacency({200: Link(S), 201: Link(L)}, {200: Link(L), 201: Link(L), 202: Link(L)})
    assert current.incoming_long_distance_only() == 1
    assert accept_request(ME, 300, L, current, 2).accepted


def test_pending_accepted_links_count_against_the_cap() -> None:
    current = Adjacency({}, {200: Link(L, PENDING), 201: Link(L)})
    assert not accept_request(ME, 300, L, current, 2).accepted


def test_collision_the_lower_id_request_wins_on_both_sides() -> None:
    low, high = 100, 200
    at_low = Adjacency({high: Link(L, PENDING)})
    at_high = Adjacency({low: Link(S, PENDING)})
    # high's request arrives at low: low's own request wins
    refused = accept_request(low, high, S, at_low, 0)
    assert not refused.accepted and refused.reason is RejectReason.COLLISION
    # low's request arrives at high: accepted even though high's long-distance cap is 0
    accepted = accept_request(high, low, L, at_high, 0)
    assert accepted.accepted and accepted.replaces_pending


def test_existing_or_closing_link_refused() -> None:
    assert accept_request(ME, 300, L, Adjacency({300: Link(S)}), 5).reason is RejectReason.ALREADY_LINKED
    assert accept_request(ME, 300, L, Adjacency({}, {300: Link(L)}), 5).reason is RejectReason.ALREADY_LINKED
    assert accept_request(ME, 300, S, Adjacency({300: Link(S, CLOSING)}), 5).reason is RejectReason.LINK_CLOSING
    assert accept_request(ME, 300, S, Adjacency({}, {300: Link(L, CLOSING)}), 5).reason is RejectReason.LINK_CLOSING


# -- properties -----------------------------------------------------------------------------

peers = st.integers(min_value=101, max_value=140)
links = st.builds(Link, st.sampled_from(list(LinkType)), st.sampled_from(list(LinkState)))


def successors_up(outgoing: dict[int, Link]) -> int:
    return sum(1 for link in outgoing.values() if link.type is S and link.state is UP)


def apply(outgoing: dict[int, Link], incoming: dict[int, Link], op: LinkOperation) -> None:
    """What the orchestrator does at once: adds stay pending, removals take effect."""
    if isinstance(op, AddLink):
        outgoing[op.peer] = Link(op.type, PENDING)
    elif isinstance(op, RemoveLink):
        del outgoing[op.peer]
    else:
        base = incoming[op.peer] if op.adopted else outgoing[op.peer]
        outgoing[op.peer] = Link(op.new, base.state)


@settings(max_examples=400, deadline=None)
@given(
    outgoing=st.dictionaries(peers, links, max_size=12),
    incoming=st.dictionaries(peers, links, max_size=12),
    desired=st.dictionaries(peers, st.sampled_from(list(LinkType)), max_size=12),
    s=st.integers(min_value=1, max_value=4),
)
def test_diff_properties(
    outgoing: dict[int, Link], incoming: dict[int, Link], desired: dict[int, LinkType], s: int
) -> None:
    ops = diff(ME, Adjacency(outgoing, incoming), desired, s)

    # one operation per peer at most
    assert len({op.peer for op in ops}) == len(ops)

    # successor additions (new links or type changes to successor) before any removal or demotion
    def is_successor_gain(op: LinkOperation) -> bool:
        return (isinstance(op, AddLink) and op.type is S) or (isinstance(op, ChangeType) and op.new is S)

    def is_loss(op: LinkOperation) -> bool:
        return isinstance(op, RemoveLink) or (isinstance(op, ChangeType) and op.old is S and not op.adopted)

    gains = [i for i, op in enumerate(ops) if is_successor_gain(op)]
    losses = [i for i, op in enumerate(ops) if is_loss(op)]
    if gains and losses:
        assert max(gains) < min(losses)

    # never below s up successors (or fewer, if fewer were up or desired), after every step
    floor = min(s, successors_up(outgoing), sum(1 for t in desired.values() if t is S))
    state_out = dict(outgoing)
    for op in ops:
        apply(state_out, incoming, op)
        assert successors_up(state_out) >= floor

    # nothing touches closing links; nothing is requested from a peer whose link is closing
    for op in ops:
        assert outgoing.get(op.peer, Link(S)).state is not CLOSING
        if isinstance(op, AddLink):
            assert op.peer not in outgoing and op.peer not in incoming

    # everything desired is now held as desired, unless it waits on a closing link
    for peer, want in desired.items():
        if outgoing.get(peer, Link(S)).state is CLOSING or incoming.get(peer, Link(S)).state is CLOSING:
            continue
        held = state_out.get(peer)
        assert held is not None
        if held.type is not want:
            # only a successor that must stay can differ
            assert held.type is S


@settings(max_examples=200, deadline=None)
@given(incoming=st.dictionaries(peers, links, max_size=12), outgoing=st.dictionaries(peers, links, max_size=6))
def test_long_distance_cap_holds(incoming: dict[int, Link], outgoing: dict[int, Link]) -> None:
    current = Adjacency(outgoing, incoming)
    k = 3
    decision = accept_request(ME, 999, L, current, k)
    if decision.accepted:
        assert current.incoming_long_distance_only() < k


def test_operations_of_a_kind_go_clockwise_from_self_across_the_wrap() -> None:
    me = RING_SIZE // 2
    peers = [me + 5, RING_SIZE - 1, 3, me - 7, me + 1, 0]
    by_distance = sorted(peers, key=lambda p: clockwise_distance(me, p))
    assert by_distance == [me + 1, me + 5, RING_SIZE - 1, 0, 3, me - 7]
    added = diff(me, Adjacency(), dict.fromkeys(peers, L), 2)
    assert added == [AddLink(p, L) for p in by_distance]
    released = diff(me, Adjacency({p: Link(L) for p in peers}), {}, 2)
    assert released == [RemoveLink(p, L) for p in by_distance]
