import random

from hypothesis import given, settings
from hypothesis import strategies as st

from evio.ids import MAX_NODE_ID, sorted_clockwise, strictly_between
from evio.sdn.flooding_bounds import (
    forward_bounds,
    forward_bounds_ordered,
    mirror,
    reverse_forward_bounds,
    reverse_root_bounds,
    root_bounds,
    root_bounds_ordered,
)


def test_root_bounds_match_paper_figure_2() -> None:
    # Fig. 2: node 0 with neighbours 1, 10, 30 (and 45): NID 1 covers [1,10), NID 10 covers [10,30).
    assert root_bounds(0, [30, 1, 10, 45]) == {1: 10, 10: 30, 30: 45, 45: 0}


def test_root_bounds_wrap_clockwise_from_root() -> None:
    assert root_bounds(40, [10, 50, 30]) == {50: 10, 10: 30, 30: 40}
    assert root_bounds(40, []) == {}
    assert root_bounds(40, [40, 7]) == {7: 40}


def test_forwarder_only_uses_neighbours_inside_its_arc() -> None:
    # node 10 got bound 30: neighbours 12 and 20 are inside, 0, 30 and 45 are not.
    assert forward_bounds(10, 30, [0, 12, 20, 30, 45]) == {12: 20, 20: 30}


def test_forwarder_arc_wraps_past_zero() -> None:
    assert forward_bounds(60, 5, [62, 2, 5, 30]) == {62: 2, 2: 5}


def test_forwarder_never_sends_back_to_ingress() -> None:
    assert forward_bounds(10, 30, [12, 20], ingress=12) == {20: 30}


def test_forwarder_with_bound_at_its_successor_forwards_nothing() -> None:
    assert forward_bounds(10, 11, [11, 40]) == {}


# The definition before the bisection: sort, then keep the neighbours strictly inside (node, bound).
def _chain_reference(ordered: list[int], last: int) -> dict[int, int]:
    return {n: ordered[i + 1] if i + 1 < len(ordered) else last for i, n in enumerate(ordered)}


def _forward_reference(node: int, bound: int, neighbours: list[int], ingress: int | None) -> dict[int, int]:
    ordered = [n for n in sorted_clockwise(node, neighbours) if n != ingress and strictly_between(n, node, bound)]
    return _chain_reference(ordered, bound)


_ids = st.one_of(st.integers(0, MAX_NODE_ID), st.integers(0, 50), st.integers(MAX_NODE_ID - 50, MAX_NODE_ID))


@settings(max_examples=400, deadline=None)
@given(node=_ids, bound=_ids, neighbours=st.lists(_ids, max_size=40), ingress=st.one_of(st.none(), _ids))
def test_bisected_forward_bounds_equal_the_filter_definition(
    node: int, bound: int, neighbours: list[int], ingress: int | None
) -> None:
    if ingress is not None and neighbours and ingress % 2:
        ingress = neighbours[ingress % len(neighbours)]  # often one of the neighbours, as in a real flood
    expected = _forward_reference(node, bound, neighbours, ingress)
    assert forward_bounds(node, bound, neighbours, ingress) == expected
    ordered = sorted_clockwise(node, neighbours)
    assert forward_bounds_ordered(node, bound, ordered, ingress) == expected
    distances = [(n - node) % (MAX_NODE_ID + 1) for n in ordered]
    assert forward_bounds_ordered(node, bound, ordered, ingress, distances) == expected


@settings(max_examples=300, deadline=None)
@given(origin=_ids, nids=st.lists(_ids, max_size=40))
def test_sorted_clockwise_is_the_order_of_clockwise_distance(origin: int, nids: list[int]) -> None:
    assert sorted_clockwise(origin, nids) == sorted(set(nids), key=lambda n: (n - origin) % (MAX_NODE_ID + 1))


@settings(max_examples=200, deadline=None)
@given(root=_ids, neighbours=st.lists(_ids, max_size=40))
def test_ordered_root_bounds_equal_the_filter_definition(root: int, neighbours: list[int]) -> None:
    expected = _chain_reference([n for n in sorted_clockwise(root, neighbours) if n != root], root)
    assert root_bounds(root, neighbours) == expected
    assert root_bounds_ordered(root, sorted_clockwise(root, neighbours)) == expected


def reverse_flood(root: int, adjacency: dict[int, set[int]]) -> dict[int, int]:
    """Each node -> how many reverse copies it received (the switch's forwarding, without the switch)."""
    received: dict[int, int] = {}
    queue = [(n, b, root) for n, b in reverse_root_bounds(root, adjacency[root]).items()]
    while queue:
        node, bound, sender = queue.pop(0)
        received[node] = received.get(node, 0) + 1
        queue += [(n, b, node) for n, b in reverse_forward_bounds(node, bound, adjacency[node], sender).items()]
    return received


def test_reverse_bounds_are_the_forward_ones_counter_clockwise() -> None:
    # Root 40 with neighbours 10, 30, 50: counter-clockwise 30 [30, 10), then 10 [10, 50), then 50 [50, 40).
    assert reverse_root_bounds(40, [10, 50, 30]) == {30: 10, 10: 50, 50: 40}
    assert reverse_forward_bounds(30, 10, [40, 20, 15, 10, 5]) == {20: 15, 15: 10}
    assert mirror(mirror(12345)) == 12345 and mirror(0) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, MAX_NODE_ID), min_size=2, max_size=30, unique=True), st.randoms(use_true_random=False))
def test_a_reverse_flood_reaches_every_node_of_a_ring_exactly_once(nodes: list[int], rng: random.Random) -> None:
    ring = sorted(nodes)
    adjacency: dict[int, set[int]] = {n: set() for n in ring}
    for i, n in enumerate(ring):
        succ = ring[(i + 1) % len(ring)]
        chord = rng.choice(ring)
        for a, b in ((n, succ), (n, chord)):
            if a != b:
                adjacency[a].add(b)
                adjacency[b].add(a)
    root = rng.choice(ring)
    assert reverse_flood(root, adjacency) == {n: 1 for n in ring if n != root}
