"""The pure helpers of the lab scenarios (evio.testing.scenarios): ping traces, ring checks, figures."""

from __future__ import annotations

import json

from evio.lab.daemons import LinkView, Topology
from evio.testing.scenarios import (
    Figure,
    PingTrace,
    copies_per_node,
    figure_lines,
    link_snapshot,
    ring_offset,
    ring_shortfall,
    ring_whole_since,
    successor_gaps,
)


def ping_output(replies: list[tuple[int, float]]) -> str:
    lines = ["PING 10.254.0.2 (10.254.0.2) 56(84) bytes of data."]
    for seq, at in replies:
        lines.append(f"[{at:.6f}] 64 bytes from 10.254.0.2: icmp_seq={seq} ttl=64 time=0.51 ms")
    lines.append("[1000.000000] From 10.254.0.1 icmp_seq=99 Destination Host Unreachable")
    return "\n".join(lines)


def test_a_trace_reads_replies_and_ignores_other_lines() -> None:
    trace = PingTrace.parse(ping_output([(1, 100.0), (2, 100.1)]), interval=0.1)
    assert trace.replies == ((1, 100.0), (2, 100.1))


def test_the_outage_around_a_moment_is_the_gap_between_the_replies_on_either_side() -> None:
    trace = PingTrace.parse(ping_output([(1, 100.0), (2, 100.1), (3, 100.2), (9, 100.8), (10, 100.9)]), 0.1)
    outage = trace.outage_at(100.25)
    assert (outage.last_before, outage.first_after, outage.lost) == (100.2, 100.8, 5)
    assert outage.resumed and abs((outage.seconds or 0) - 0.6) < 1e-9
    never = trace.outage_at(101.0)
    assert not never.resumed and never.seconds is None and never.lost == 0


def test_longest_gap_and_probes_lost_after_a_moment() -> None:
    trace = PingTrace.parse(ping_output([(1, 100.0), (2, 100.1), (4, 100.3), (5, 100.4), (8, 100.7)]), 0.1)
    assert abs(trace.max_gap(100.0, 100.7) - 0.3) < 1e-9
    assert abs(trace.max_gap(100.0, 101.5) - 0.8) < 1e-9  # the end counts: nothing came after 100.7
    assert trace.lost_after(100.15) == 3  # seqs 3, 6, 7
    assert trace.lost_after(99.0) == 0  # no reply before it: nothing to count from


def link(node: str, peer: str, kind: str = "successor", state: str = "up") -> LinkView:
    return LinkView(node, peer, kind, state, tap=None, port=None, path=None)


def both(a: str, b: str, kind: str = "successor") -> list[LinkView]:
    return [link(a, b, kind), link(b, a, kind)]


def test_successor_gaps_name_each_missing_successor_link_among_live_nodes() -> None:
    order = ("n1", "n2", "n3", "n4")
    ring = both("n1", "n2") + both("n2", "n3") + both("n3", "n4") + both("n4", "n1")
    topo = Topology(order, tuple(ring), {})
    assert successor_gaps(topo, 1) == []
    assert set(successor_gaps(topo, 2)) == {("n1", "n3"), ("n2", "n4"), ("n3", "n1"), ("n4", "n2")}
    # Per-node s; a long-distance link between the same pair does not count as a successor link.
    topo = Topology(order, tuple(ring + both("n1", "n3", "long_distance")), {})
    assert successor_gaps(topo, lambda node: 2 if node == "n1" else 1) == [("n1", "n3")]
    # A link up at one end only is not a link; a dead node is left out of the ring.
    half = Topology(order, tuple(ring[:-1]), {})
    assert successor_gaps(half, 1) == [("n4", "n1")]
    without_n4 = Topology(order, tuple(both("n1", "n2") + both("n2", "n3") + both("n3", "n1")), {"n4": "gone"})
    assert successor_gaps(without_n4, 1) == []
    assert ring_offset(without_n4, "n3", 1) == "n1"


def test_the_ring_shortfall_names_silent_nodes_and_each_missing_link_with_both_ends_views() -> None:
    order = ("n1", "n2", "n3", "n4")
    ring = both("n1", "n2") + both("n2", "n3") + both("n3", "n4") + both("n4", "n1")
    assert ring_shortfall(Topology(order, tuple(ring), {}), 4, 1) == ""
    pending = ring[:-1] + [link("n1", "n4", state="pending")]
    assert ring_shortfall(Topology(order, tuple(pending), {}), 4, 1) == (
        "n4->n1 (n4: successor/up; n1: successor/pending)")
    silent = Topology(order, tuple(both("n1", "n2") + both("n2", "n3") + both("n3", "n1")), {"n4": "refused"})
    assert ring_shortfall(silent, 4, 1) == "n4 not answering (refused)"
    # A node whose signaling lost sight of a member does not even try: the message says so.
    members = {"n1": frozenset({"n2", "n3"}), "n4": frozenset({"n1", "n2", "n3"})}
    unknown = Topology(order, tuple(ring[:-2]), {}, members)
    assert ring_shortfall(unknown, 4, 1) == "n4->n1 (n4: none; n1: none, n4 not among its members)"
    assert ring_shortfall(Topology(order[:3], tuple(both("n1", "n2") + both("n2", "n3") + both("n3", "n1")), {}),
                          4, 1) == "3 of 4 nodes live"


def test_the_ring_was_whole_since_its_last_successor_link_came_up_at_its_later_end() -> None:
    def aged(node: str, peer: str, since: float | None, kind: str = "successor") -> LinkView:
        return LinkView(node, peer, kind, "up", tap=None, port=None, path=None, up_since=since)

    order = ("n1", "n2", "n3", "n4")
    ring = [aged("n1", "n2", 10.0), aged("n2", "n1", 10.5), aged("n2", "n3", 11.0), aged("n3", "n2", 11.2),
            aged("n3", "n1", 20.3), aged("n1", "n3", 20.1), aged("n1", "n4", 5.0, "long_distance")]
    topo = Topology(order, tuple(ring), {"n4": "killed"})
    assert ring_whole_since(topo, 1) == 20.3  # the new link n3-n1, up at n3 last; n4's stale view is no part
    assert ring_whole_since(Topology(order, tuple(ring[:-2]), {"n4": "killed"}), 1) is None  # a gap
    unaged = [*ring[:4], aged("n3", "n1", None), aged("n1", "n3", 20.1)]
    assert ring_whole_since(Topology(order, tuple(unaged), {"n4": "killed"}), 1) is None


def test_a_link_snapshot_changes_when_a_link_comes_goes_or_changes_state() -> None:
    base = Topology(("a", "b"), tuple(both("a", "b")), {})
    same = Topology(("a", "b"), tuple(reversed(both("a", "b"))), {})
    down = Topology(("a", "b"), (link("a", "b"), link("b", "a", state="connecting")), {})
    assert link_snapshot(base) == link_snapshot(same) != link_snapshot(down)


def test_copies_per_node_counts_each_frame_of_a_root_after_a_node_s_mark() -> None:
    def entry(seq: int, root: str, frame: str, ethertype: int = 0x0806) -> dict[str, object]:
        return {"seq": seq, "root": root, "frame": frame, "ethertype": ethertype, "peer": "p", "hop_count": 1}

    logs = {
        "a": [entry(1, "r", "f0"), entry(2, "r", "f1"), entry(3, "r", "f1"), entry(4, "x", "f1")],
        "b": [entry(7, "r", "f1"), entry(8, "r", "f2", ethertype=0x86DD)],
    }
    assert copies_per_node(logs, {"a": 1, "b": 6}, "r") == {"a": {"f1": 2}, "b": {"f1": 1, "f2": 1}}
    assert copies_per_node(logs, {"a": 1, "b": 6}, "r", ethertype=0x0806) == {"a": {"f1": 2}, "b": {"f1": 1}}


def test_figures_print_beside_the_paper_in_scenario_order_and_as_json() -> None:
    figures = [
        Figure("ping", "all pairs", "240/240"),
        Figure("E11", "overhead", 0.1234, "ms", paper="0.37 ms"),
        Figure("E2", "relocation", 0.1, "s", paper="6.15 s", target="<= 1 s", note="50 ms probes"),
    ]
    lines = figure_lines(figures)
    assert [line.split()[0] for line in lines] == ["E2", "E11", "ping"]
    assert "0.10 s" in lines[0] and "paper: 6.15 s" in lines[0] and "target: <= 1 s" in lines[0]
    assert "0.12 ms" in lines[1] and "paper: -" in lines[2]
    assert json.loads(figures[2].json())["measured"] == 0.1
