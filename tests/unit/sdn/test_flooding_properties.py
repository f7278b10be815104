"""Property tests of Bounded Flood over random overlays (issue 2, item 4; docs/design.md, "Loop-free, exactly once").

Graphs are random sets of 1..60 node ids with random chords and random link
or node failures; up to 15 nodes spread round the ring take turns as the root. The flood is
`evio.sim.flood.flood`, driven by the real bounds in
`evio.sdn.flooding_bounds`; `collect_arcs` records the arcs it hands out.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evio.ids import MAX_NODE_ID, RING_SIZE, clockwise_distance
from evio.sdn import flooding_bounds
from evio.sim import flood as flood_module
from evio.sim.flood import FloodResult, flood

Adjacency = dict[int, set[int]]

PROPERTIES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Ids anywhere on the ring, plus clusters at both ends so that arcs wrap past zero often.
node_ids = st.one_of(
    st.integers(0, MAX_NODE_ID),
    st.integers(0, 1000),
    st.integers(MAX_NODE_ID - 1000, MAX_NODE_ID),
)
# Size drawn first: a plain st.sets shrinks towards, and mostly draws, small sets.
node_sets = st.sampled_from(range(1, 61)).flatmap(lambda n: st.sets(node_ids, min_size=n, max_size=n)).map(sorted)


def some_roots(nodes: list[int]) -> list[int]:
    """Up to 15 roots spread round the ring (every node in small graphs): keeps the file fast."""
    return nodes[:: max(1, len(nodes) // 15)]


def link(adj: Adjacency, a: int, b: int) -> None:
    adj[a].add(b)
    adj[b].add(a)


# Links are picked by a seeded random.Random: drawing each one from hypothesis made data
# generation most of the run time. Counts and the seed still shrink.
seeds = st.integers(0, 2**32 - 1).map(random.Random)


@st.composite
def any_graphs(draw: st.DrawFn) -> tuple[list[int], Adjacency]:
    """Random links, then random failures: some links gone, some up at one end only."""
    nodes = draw(node_sets)
    rng = draw(seeds)
    adj: Adjacency = {x: set() for x in nodes}
    for _ in range(draw(st.integers(0, 4 * len(nodes)))):
        link(adj, rng.choice(nodes), rng.choice(nodes))  # may be a self-link, which flood must ignore
    for _ in range(draw(st.integers(0, len(nodes)))):
        a, b = rng.choice(nodes), rng.choice(nodes)
        adj[a].discard(b)  # half-open: the tunnel is down at one end
        if rng.random() < 0.5:
            adj[b].discard(a)
    return nodes, adj


@st.composite
def ring_graphs(draw: st.DrawFn) -> tuple[list[int], Adjacency]:
    """Every node linked to its clockwise successor, plus random chords, a quarter of them failed."""
    nodes = draw(node_sets)
    rng = draw(seeds)
    n = len(nodes)
    adj: Adjacency = {x: set() for x in nodes}
    for i in range(n):
        if n > 1:
            link(adj, nodes[i], nodes[(i + 1) % n])
    for _ in range(draw(st.integers(0, 3 * n))):
        i, j = rng.randrange(n), rng.randrange(n)
        if j in ((i + 1) % n, (i - 1) % n, i):
            continue  # successor links never fail here
        if rng.random() < 0.25:
            adj[nodes[i]].add(nodes[j])  # a failed chord: up at one end only
        else:
            link(adj, nodes[i], nodes[j])
    return nodes, adj


# ---------------------------------------------------------------- collecting arcs


@dataclass(frozen=True)
class Handout:
    """What one node did with one broadcast: its arc [node, end) and the arcs it handed on.

    For the root, end == node and the arc is the whole ring.
    """

    node: int
    end: int
    handed: dict[int, int]  # neighbour -> bound: the neighbour's arc is [neighbour, bound)

    @property
    def arc_length(self) -> int:
        return clockwise_distance(self.node, self.end) or RING_SIZE

    @property
    def retained(self) -> tuple[int, int]:
        """The part of its arc the node keeps: from itself to the first arc it hands on."""
        if not self.handed:
            return self.node, self.end
        return self.node, min(self.handed, key=lambda p: clockwise_distance(self.node, p))


@contextmanager
def recording_bounds() -> Iterator[list[Handout]]:
    """Run the real bound functions inside flood() and record every hand-out."""
    handouts: list[Handout] = []

    def root_bounds(root: int, neighbours: list[int]) -> dict[int, int]:
        handed = flooding_bounds.root_bounds_ordered(root, neighbours)
        handouts.append(Handout(root, root, handed))
        return handed

    def forward_bounds(
        node: int, bound: int, neighbours: list[int], ingress: int | None = None, distances: list[int] | None = None
    ) -> dict[int, int]:
        handed = flooding_bounds.forward_bounds_ordered(node, bound, neighbours, ingress, distances)
        handouts.append(Handout(node, bound, handed))
        return handed

    with (
        mock.patch.object(flood_module, "root_bounds_ordered", root_bounds),
        mock.patch.object(flood_module, "forward_bounds_ordered", forward_bounds),
    ):
        yield handouts


def collect_arcs(adj: Adjacency, root: int, alive: set[int] | None = None) -> tuple[FloodResult, list[Handout]]:
    with recording_bounds() as handouts:
        result = flood(adj, root, alive)
    return result, handouts


def segment_length(start: int, end: int) -> int:
    return clockwise_distance(start, end) or RING_SIZE


def assert_partition_of_ring(segments: list[tuple[int, int]]) -> None:
    """Closed-open clockwise arcs that are pairwise disjoint and cover the ring exactly."""
    ordered = sorted(segments)
    for (_, end), (next_start, _) in zip(ordered, ordered[1:] + ordered[:1]):
        assert end == next_start, f"gap or overlap at {end:#x} / {next_start:#x}"
    assert sum(segment_length(s, e) for s, e in segments) == RING_SIZE


def assert_handouts_split_their_arc(h: Handout) -> None:
    """The arcs handed on lie inside (node, end), are pairwise disjoint, and end where the node's does."""
    offsets = sorted(
        (clockwise_distance(h.node, p), clockwise_distance(h.node, b) or RING_SIZE) for p, b in h.handed.items()
    )
    for start, stop in offsets:
        assert 0 < start < stop <= h.arc_length
    for (_, stop), (next_start, _) in zip(offsets, offsets[1:]):
        assert stop == next_start  # disjoint and contiguous
    if offsets:
        assert offsets[-1][1] == h.arc_length


def assert_no_duplicates(result: FloodResult) -> None:
    assert result.root not in result.receipts, "the root received its own broadcast"
    assert all(copies == 1 for copies in result.receipts.values()), result.receipts
    assert result.duplicates == 0


# ---------------------------------------------------------------- (a) any graph: never a duplicate


@PROPERTIES
@given(any_graphs())
def test_no_node_ever_receives_a_broadcast_twice_on_any_graph(graph: tuple[list[int], Adjacency]) -> None:
    nodes, adj = graph
    for root in some_roots(nodes):
        result = flood(adj, root)
        assert_no_duplicates(result)
        assert result.reached() <= set(nodes) - {root}


# ---------------------------------------------------------------- (b) successor links: exactly once


@PROPERTIES
@given(ring_graphs())
def test_with_successor_links_every_node_receives_it_exactly_once(graph: tuple[list[int], Adjacency]) -> None:
    nodes, adj = graph
    for root in some_roots(nodes):
        result = flood(adj, root)
        assert_no_duplicates(result)
        assert result.reached() == set(nodes) - {root}
        assert set(result.hops) == set(nodes)


# ---------------------------------------------------------------- (c) the bounds partition the ring


@PROPERTIES
@given(any_graphs())
def test_arcs_are_disjoint_and_the_retained_parts_partition_the_ring(graph: tuple[list[int], Adjacency]) -> None:
    nodes, adj = graph
    for root in some_roots(nodes):
        result, handouts = collect_arcs(adj, root)
        assert handouts[0].node == root and handouts[0].end == root
        # One hand-out per node that got the broadcast: the root and each receiver once.
        assert sorted(h.node for h in handouts) == sorted({root} | result.reached())
        for h in handouts:
            assert_handouts_split_their_arc(h)
        # Each node keeps [itself, first arc handed on): these pieces tile the ring on any graph.
        assert_partition_of_ring([h.retained for h in handouts])


@PROPERTIES
@given(ring_graphs())
def test_with_successor_links_the_arcs_cover_every_node(graph: tuple[list[int], Adjacency]) -> None:
    nodes, adj = graph
    successor = {x: nodes[(i + 1) % len(nodes)] for i, x in enumerate(nodes)}
    for root in some_roots(nodes):
        _, handouts = collect_arcs(adj, root)
        for h in handouts:
            assert_handouts_split_their_arc(h)
        assert_partition_of_ring([h.retained for h in handouts])
        # The part a node keeps holds no other node (its successor lies at or past the end),
        # so with the ring tiled every node keeps a part: nothing is left unreached.
        for h in handouts:
            start, end = h.retained
            assert start == h.node
            if len(nodes) > 1:
                assert clockwise_distance(start, successor[start]) >= segment_length(start, end)
        assert sorted(h.node for h in handouts) == nodes


# ---------------------------------------------------------------- (d) node failures


@st.composite
def ring_graphs_with_failures(draw: st.DrawFn) -> tuple[list[int], Adjacency, set[int]]:
    nodes, adj = draw(ring_graphs())
    rng = draw(seeds)
    failed = rng.sample(nodes, draw(st.integers(0, len(nodes))))
    return nodes, adj, set(nodes) - set(failed)


@PROPERTIES
@given(ring_graphs_with_failures())
def test_survivors_of_node_failures_never_get_duplicates(graph: tuple[list[int], Adjacency, set[int]]) -> None:
    nodes, adj, alive = graph
    for root in some_roots(nodes):
        result = flood(adj, root, alive)
        if root not in alive:
            assert result.receipts == {}
            continue
        assert_no_duplicates(result)
        assert result.reached() <= alive - {root}


@PROPERTIES
@given(ring_graphs_with_failures())
def test_once_survivors_relink_their_successors_all_receive_it_exactly_once(
    graph: tuple[list[int], Adjacency, set[int]],
) -> None:
    nodes, adj, alive = graph
    survivors = sorted(alive)
    for i, x in enumerate(survivors):
        if len(survivors) > 1:
            link(adj, x, survivors[(i + 1) % len(survivors)])  # what the overlay repairs first
    for root in some_roots(survivors):
        result = flood(adj, root, alive)
        assert_no_duplicates(result)
        assert result.reached() == alive - {root}


# ---------------------------------------------------------------- the checks can fail


def test_partition_check_rejects_overlap_and_gaps() -> None:
    assert_partition_of_ring([(5, 5)])
    assert_partition_of_ring([(5, 9), (9, 5)])
    for bad in ([(5, 9), (8, 5)], [(5, 9), (10, 5)], [(5, 9)], [(5, 5), (5, 5)]):
        try:
            assert_partition_of_ring(bad)
        except AssertionError:
            continue
        raise AssertionError(f"{bad} passed as a partition")


def test_duplicate_check_catches_a_root_that_hears_its_own_broadcast() -> None:
    result = FloodResult(root=1, receipts={1: 1, 2: 1})
    assert result.duplicates == 1
    try:
        assert_no_duplicates(result)
    except AssertionError:
        return
    raise AssertionError("a copy back at the root passed as no duplicate")


def test_broken_bounds_would_be_caught() -> None:
    # A forwarder that ignores its bound floods everything: duplicates appear at once.
    nodes = [0, 10, 20, 30]
    adj: Adjacency = {x: set() for x in nodes}
    for i in range(4):
        link(adj, nodes[i], nodes[(i + 1) % 4])
    link(adj, 0, 20)

    def unbounded(
        node: int, bound: int, neighbours: list[int], ingress: int | None = None, distances: list[int] | None = None
    ) -> dict[int, int]:
        everything_but_itself = (node - 1) % RING_SIZE
        return flooding_bounds.forward_bounds_ordered(node, everything_but_itself, neighbours, ingress, distances)

    with mock.patch.object(flood_module, "forward_bounds_ordered", unbounded):
        assert flood(adj, 0).duplicates > 0
