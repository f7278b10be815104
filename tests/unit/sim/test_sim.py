import random

import pytest

from evio.cli import main
from evio.config.model import LogForm
from evio.overlay.adjacency import LinkState, LinkType, RejectReason
from evio.overlay.symphony import Ring
from evio.sim.flood import FloodGraph
from evio.sim.overlay import OverlayParams, SimError, SymphonyOverlay, build_overlay
from evio.sim.stats import broadcast_stats, choose_roots, max_path_histogram


def build(n: int, seed: int = 7, **kwargs: object) -> SymphonyOverlay:
    built = build_overlay(n, OverlayParams(**kwargs), random.Random(seed))  # type: ignore[arg-type]
    assert built.settled
    return built.overlay


@pytest.mark.parametrize("form", list(LogForm))
def test_n32_every_broadcast_reaches_every_node_exactly_once(form: LogForm) -> None:
    overlay = build(32, log_form=form)
    adjacency = overlay.adjacency()
    stats = broadcast_stats(adjacency, sorted(adjacency))
    assert stats.deliveries_expected == 32 * 31
    assert stats.exactly_once_ratio == 1.0
    assert stats.duplicated == 0 and stats.missed == 0
    assert 1.0 <= stats.mean_path_length < 4.0


def test_stable_overlay_has_the_ring_and_respects_the_cap() -> None:
    overlay = build(64, seed=3, successors=2)
    k = overlay.long_distance_count()
    assert k == 6
    ring = Ring(overlay.members)
    adjacency = overlay.adjacency()
    for nid in overlay.members:
        view = overlay.view(nid)
        successors = {p for p, link in view.outgoing.items() if link.type is LinkType.SUCCESSOR}
        assert successors == {ring.peer_at(nid, 1), ring.peer_at(nid, 2)}
        assert view.incoming_long_distance_only() <= overlay.incoming_cap() == 2 * k
        assert sum(1 for link in view.outgoing.values() if link.type is LinkType.LONG_DISTANCE) <= k
        for peer in view.outgoing:
            assert nid in adjacency[peer]  # links are symmetric tunnels


def test_a_stable_overlay_stays_put() -> None:
    overlay = build(48, seed=5)
    before = overlay.adjacency()
    result = overlay.run_round()
    assert result.operations == 0 and result.requests == 0
    assert overlay.adjacency() == before


def test_same_seed_same_overlay_other_seed_other_overlay() -> None:
    assert build(40, seed=11).adjacency() == build(40, seed=11).adjacency()
    assert build(40, seed=11).adjacency() != build(40, seed=12).adjacency()


@pytest.mark.parametrize("seed", range(6))
def test_both_ends_asking_at_once_make_one_link(seed: int) -> None:
    # two nodes, one successor each: both ask the other in the same round; whichever request
    # arrives first, the lower id's request makes the link and both ends hold it
    overlay = SymphonyOverlay([5, 9], OverlayParams(successors=1, long_distance=0), random.Random(seed))
    first = overlay.run_round()
    assert first.requests == 2 and first.operations == 2
    assert first.rejected == sum(overlay.rejections.values()) == overlay.rejections[RejectReason.COLLISION]
    assert overlay.adjacency() == {5: {9}, 9: {5}}
    assert overlay.view(5).outgoing[9].type is LinkType.SUCCESSOR
    assert overlay.view(9).outgoing[5].type is LinkType.SUCCESSOR
    assert overlay.stabilise()


def test_collisions_show_both_arrival_orders() -> None:
    refused = []
    for seed in range(6):
        overlay = SymphonyOverlay([5, 9], OverlayParams(successors=1, long_distance=0), random.Random(seed))
        refused.append(overlay.run_round().rejected)
    assert set(refused) == {0, 1}  # lower id's request first (settles it) or higher's first (refused)


def test_failed_nodes_repaired() -> None:
    overlay = build(64, seed=2)
    rng = random.Random(1)
    failed = set(rng.sample(sorted(overlay.members), 16))
    survivors = overlay.members - failed
    before = broadcast_stats(overlay.adjacency(), sorted(survivors), survivors)
    assert before.duplicated == 0  # bounded flood never duplicates, whatever the graph
    overlay.fail(failed)
    assert overlay.members == survivors
    assert overlay.stabilise()
    after = broadcast_stats(overlay.adjacency(), sorted(survivors))
    assert after.exactly_once_ratio == 1.0


def test_build_rejects_impossible_parameters() -> None:
    with pytest.raises(SimError):
        build_overlay(1, OverlayParams(), random.Random(0))
    with pytest.raises(SimError):
        SymphonyOverlay([1, 2], OverlayParams(successors=0), random.Random(0))


def test_stats_on_a_plain_ring() -> None:
    # six nodes, each linked to its successor only: from any root the flood goes round
    # clockwise (1, 2, 3, 4 hops) and the predecessor gets it directly (1 hop)
    nodes = [10, 20, 30, 40, 50, 60]
    adjacency = {n: {nodes[(i + 1) % 6], nodes[(i - 1) % 6]} for i, n in enumerate(nodes)}
    stats = broadcast_stats(adjacency, nodes)
    assert stats.exactly_once_ratio == 1.0
    assert stats.mean_path_length == pytest.approx((1 + 2 + 3 + 4 + 1) / 5)
    assert set(stats.max_path_by_node.values()) == {4}
    assert max_path_histogram(stats.max_path_by_node) == {4: 6}


def test_stats_count_missed_nodes() -> None:
    adjacency = {1: {2}, 2: {1}, 3: set()}
    stats = broadcast_stats(adjacency, [1])
    assert stats.deliveries_expected == 2 and stats.exactly_once == 1 and stats.missed == 1


def test_choose_roots() -> None:
    nodes = list(range(100))
    assert choose_roots(nodes, None, random.Random(0)) == nodes
    assert choose_roots(nodes, 500, random.Random(0)) == nodes
    sample = choose_roots(nodes, 10, random.Random(0))
    assert len(sample) == 10 and sample == choose_roots(nodes, 10, random.Random(0))


def test_cli_prints_table_1_beside_the_paper(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "-n", "128", "-s", "2", "-k", "7", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "exactly-once delivery ratio           1.0000" in out
    assert "3.41 (n=128, s=2, k=log n)" in out
    assert "Table 1" in out and "74.2%" in out
    assert "every one of the 128 nodes" in out
    assert "elapsed" in out


def test_cli_sweep_and_failures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--sweep", "8,32", "--log-form", "log10"]) == 0
    out = capsys.readouterr().out
    assert "log form=log10" in out
    assert [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit()] == ["8", "32"]
    assert main(["sim", "-n", "40", "--failed", "0.25", "--roots", "10"]) == 0
    out = capsys.readouterr().out
    assert "10 randomly sampled nodes of 40" in out
    assert "10 of 40 nodes stop" in out and "after repair (stable" in out


@pytest.mark.parametrize("bad", [["--failed", "1.5"], ["--roots", "0"], ["--sweep", "1,8"], ["-n", "0"]])
def test_cli_rejects_bad_options(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sim", *bad])


@pytest.mark.parametrize("seed", range(4))
def test_running_cap_count_equals_the_recount_at_every_request(seed: int) -> None:
    # The simulator keeps each node's incoming long-distance count as it goes; the daemon
    # recounts it (`Adjacency.incoming_long_distance_only`). They must agree whenever a
    # request is answered (mid-round, with requests in flight), and after failures.
    from unittest import mock

    from evio.overlay.adjacency import Adjacency, accept_request
    from evio.sim import overlay as sim_overlay

    answered = 0

    def checked(self_id: int, requester: int, link_type: LinkType, current: Adjacency, cap: int) -> object:
        nonlocal answered
        answered += 1
        assert current.incoming_long_distance_only() == Adjacency(current.outgoing, current.incoming).incoming_long_distance_only()
        return accept_request(self_id, requester, link_type, current, cap)

    rng = random.Random(seed)
    # k = 2 for 60 nodes, with the incoming cap at k: refusals for lack of slots happen.
    overlay = SymphonyOverlay(rng.sample(range(10**6), 60), OverlayParams(long_distance=2, max_incoming_long_distance=2), rng)
    with mock.patch.object(sim_overlay, "accept_request", checked):
        overlay.stabilise()
        overlay.fail(rng.sample(sorted(overlay.members), 15))
        overlay.stabilise()
    assert answered > 100
    assert overlay.rejections[RejectReason.TOO_MANY_LONG_DISTANCE] > 0


@pytest.mark.parametrize("seed", range(4))
def test_nodes_left_out_of_a_round_would_not_change_anything(seed: int) -> None:
    # Only unsettled nodes are evaluated each round; evaluating every node instead must
    # find nothing to do once the overlay is stable, including after repairs.
    overlay = build(70, seed=seed)
    overlay._unsettled = set(overlay._members)
    before = overlay.adjacency()
    result = overlay.run_round()
    assert (result.operations, result.requests) == (0, 0) and overlay.adjacency() == before
    overlay.fail(random.Random(seed).sample(sorted(overlay.members), 10))
    assert overlay.stabilise()
    overlay._unsettled = set(overlay._members)
    assert overlay.run_round().requests == 0


def _graph_from_held_links(overlay: SymphonyOverlay) -> dict[int, set[int]]:
    """The flood graph as the held links say: both ends of every link that is up."""
    graph: dict[int, set[int]] = {nid: set() for nid in overlay.members}
    for holder, peer, link in overlay.held_links():
        if link.state is LinkState.UP:
            graph[holder].add(peer)
            graph[peer].add(holder)
    return graph


@pytest.mark.parametrize("seed", range(3))
def test_adjacency_is_both_ends_of_every_link_up_also_mid_build_and_after_failures(seed: int) -> None:
    # adjacency() reads each node's own tables (held and incoming); it must give the graph of
    # the held links, including while links are pending (after a round) and after failures.
    rng = random.Random(seed)
    overlay = SymphonyOverlay(rng.sample(range(10**6), 90), OverlayParams(), rng)
    overlay.run_round()
    assert overlay.adjacency() == _graph_from_held_links(overlay)
    overlay.stabilise()
    overlay.fail(rng.sample(sorted(overlay.members), 20))
    graph = overlay.adjacency()
    assert graph == _graph_from_held_links(overlay) and set(graph) == overlay.members
    ids = overlay._ids  # by rank, among the ids it was built with
    assert {ids[r]: {ids[p] for p in peers} for r, peers in overlay.adjacency(by_rank=True).items()} == graph


@pytest.mark.parametrize("seed", range(3))
def test_a_symmetric_flood_graph_is_the_checked_one(seed: int) -> None:
    rng = random.Random(seed)
    overlay = build(80, seed=seed)
    graph = overlay.adjacency()
    alive = set(rng.sample(sorted(graph), 60))
    for survivors in (None, alive):
        checked, trusted = FloodGraph(graph, survivors), FloodGraph(graph, survivors, symmetric=True)
        assert checked.live == trusted.live
        for node in checked.live:
            assert checked.neighbours(node) == trusted.neighbours(node)
            assert checked.distances(node) == trusted.distances(node)
    roots = sorted(alive)[:10]
    assert broadcast_stats(graph, roots, alive) == broadcast_stats(graph, roots, alive, symmetric=True)


@pytest.mark.parametrize("seed", range(3))
def test_every_link_is_up_at_the_end_of_every_round(seed: int) -> None:
    # The round's end brings up every pending link of the nodes it connected: none may be left
    # pending (a link a round made and did not list would show here), and the two ends' tables
    # hold the same link.
    rng = random.Random(seed)
    overlay = SymphonyOverlay(rng.sample(range(10**6), 120), OverlayParams(long_distance=3), rng)

    def check() -> None:
        for holder, peer, link in overlay.held_links():
            assert link.state is LinkState.UP
            assert overlay.view(peer).incoming[holder] is link

    for _ in range(3):
        overlay.run_round()
        check()
    overlay.stabilise()
    overlay.fail(rng.sample(sorted(overlay.members), 30))
    overlay.run_round()
    check()
