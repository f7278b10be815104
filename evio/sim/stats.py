"""Broadcast statistics over a simulated overlay, and the paper's figures to compare with.

Path length is what the paper's E7 measures: the switching hops a Bounded
Flood broadcast (FRB) takes from its root to each receiver, counted on the
first copy (there is only one when the overlay is correct).

- exactly-once delivery ratio: (root, receiver) pairs, receiver alive and not
  the root, in which the receiver got exactly one copy;
- mean path length: each receiver's average over the roots it heard from, then
  averaged over receivers (Fig. 7's caption: "each node reports its average
  path length ... the network-wide average is the average across all nodes");
- per-node maximum path length: for each receiver, the longest path over the
  roots it heard from (E7: "each node recorded its maximum path length"), whose
  distribution is Table 1.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from evio.sim.collector import collector_paused
from evio.sim.flood import FloodGraph, flood

# Table 1 (n = 128, s = 2, k = log n): max hops -> (frequency, cumulative %).
PAPER_TABLE_1: dict[int, tuple[int, float]] = {
    5: (1, 0.78),
    6: (14, 11.7),
    7: (32, 36.7),
    8: (21, 53.1),
    9: (27, 74.2),
    10: (22, 91.4),
    11: (8, 97.7),
    12: (3, 100.0),
}
PAPER_TABLE_1_N = 128
# Section 5.6 (E6, overlay "BF", n = 128, s = 2, k = log n): mean path 3.41, mean deviation 0.27.
PAPER_MEAN_PATH = {128: 3.41}
# Fig. 7 sizes (E7).
PAPER_FIG7_SIZES = (8, 32, 64, 128)


def paper_fig7_estimate(n: int) -> float:
    """Fig. 7: the average path length is 'approximately 1/2 log(n)' (log2: 3.5 at n = 128, beside 3.41)."""
    return 0.5 * math.log2(n)


@dataclass(frozen=True)
class BroadcastStats:
    roots: int
    deliveries_expected: int  # (root, receiver) pairs
    exactly_once: int
    duplicated: int  # pairs in which the receiver got more than one copy
    missed: int  # pairs in which the receiver got nothing
    mean_path_length: float
    max_path_by_node: Mapping[int, int]  # receiver -> longest path over the roots it heard from

    @property
    def exactly_once_ratio(self) -> float:
        return self.exactly_once / self.deliveries_expected if self.deliveries_expected else 1.0


# Flooding costs about n deliveries per root (some 6 us each on a 2-core machine): beyond
# this many deliveries, broadcast roots are sampled by default. The mean path length
# needs few roots, since each root's flood averages over every receiver: at n = 100 000
# (seed 1) the mean over one root's receivers varies by 0.28 hops (standard deviation)
# from root to root, so 8 roots give the mean within about 0.1 hops (of 8).
DELIVERY_BUDGET = 300_000
MIN_SAMPLED_ROOTS = 8


def default_root_count(n: int) -> int | None:
    """Every node (None) while n * (n - 1) deliveries fit the budget, else a sample of budget / n roots."""
    if n * (n - 1) <= DELIVERY_BUDGET:
        return None
    return max(MIN_SAMPLED_ROOTS, DELIVERY_BUDGET // n)


def choose_roots(nodes: Collection[int], count: int | None, rng: random.Random) -> list[int]:
    """Every node when `count` is None or covers them all, else a random sample of `count`."""
    ordered = sorted(nodes)
    if count is None or count >= len(ordered):
        return ordered
    return sorted(rng.sample(ordered, count))


def broadcast_stats(
    adjacency: Mapping[int, Collection[int]],
    roots: Sequence[int],
    alive: Collection[int] | None = None,
    symmetric: bool = False,
) -> BroadcastStats:
    """Flood one broadcast from each root with the real bound code and tally what every live node got.

    `symmetric`: every link is in both ends' adjacency already (see `FloodGraph`).
    """
    with collector_paused():
        return _broadcast_stats(adjacency, roots, alive, symmetric)


def _broadcast_stats(
    adjacency: Mapping[int, Collection[int]], roots: Sequence[int], alive: Collection[int] | None, symmetric: bool
) -> BroadcastStats:
    graph = FloodGraph(adjacency, alive, symmetric)  # neighbours sorted once for all the roots
    live = graph.live
    expected = exactly_once = duplicated = missed = 0
    hop_sum: dict[int, int] = {}
    hop_count: dict[int, int] = {}
    longest: dict[int, int] = {}
    for root in roots:
        result = flood(graph, root)
        receivers = len(live) - (1 if root in live else 0)
        expected += receivers
        heard = 0
        hops_of = result.hops
        # Only nodes that got a copy are visited: the rest of the receivers missed it.
        for node, copies in result.receipts.items():
            if node == root:
                continue
            heard += 1
            if copies == 1:
                exactly_once += 1
            else:
                duplicated += 1
            hops = hops_of[node]
            hop_sum[node] = hop_sum.get(node, 0) + hops
            hop_count[node] = hop_count.get(node, 0) + 1
            if hops > longest.get(node, 0):
                longest[node] = hops
        missed += receivers - heard
    per_node = [hop_sum[node] / hop_count[node] for node in hop_count]
    mean = sum(per_node) / len(per_node) if per_node else 0.0
    return BroadcastStats(len(roots), expected, exactly_once, duplicated, missed, mean, longest)


def max_path_histogram(max_path_by_node: Mapping[int, int]) -> dict[int, int]:
    """Max hops -> how many nodes have that maximum, ascending."""
    return dict(sorted(Counter(max_path_by_node.values()).items()))
