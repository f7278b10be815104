"""Bounded Flood over an in-memory graph, with the real bound code.

Used by the simulator and the property tests: it delivers one broadcast from a
root along the arcs that `evio.sdn.flooding_bounds` hands out and records, per
node, how many copies arrived and after how many switching hops.

`FloodGraph` sorts each node's usable neighbours clockwise once; every flood
over it then finds a forwarder's share by bisection, so a flood costs about
one step per delivery instead of a sort per forwarding node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from evio.ids import RING_SIZE, sorted_clockwise
from evio.sdn.flooding_bounds import forward_bounds_ordered, root_bounds_ordered


@dataclass
class FloodResult:
    root: int
    receipts: dict[int, int] = field(default_factory=dict)  # node -> copies received
    hops: dict[int, int] = field(default_factory=dict)  # node -> hops of its first copy

    @property
    def duplicates(self) -> int:
        # The root already holds the broadcast, so any copy reaching it is a duplicate.
        return sum(c if n == self.root else c - 1 for n, c in self.receipts.items() if c > 1 or n == self.root)

    def reached(self) -> set[int]:
        return set(self.receipts)


class FloodGraph:
    """The links usable by a flood, each node's neighbours in clockwise order from it.

    A link is usable only in both directions' adjacency (a tunnel is
    symmetric) and only between nodes in `alive` (all nodes when None).
    `symmetric`: the caller's word that every link is in both directions'
    adjacency already (as `SymphonyOverlay.adjacency` builds it), so the other
    direction is not looked up; at n = 10^5 that is 3.6 million lookups at
    random places.
    """

    __slots__ = ("live", "_ordered", "_distances")

    def __init__(
        self, adjacency: Mapping[int, Collection[int]], alive: Collection[int] | None = None, symmetric: bool = False
    ) -> None:
        self.live: frozenset[int] = frozenset(adjacency if alive is None else alive)
        live = self.live
        empty: Collection[int] = ()
        if symmetric and alive is None:
            self._ordered: dict[int, list[int]] = {n: sorted_clockwise(n, adjacency.get(n, empty)) for n in live}
        elif symmetric:
            self._ordered = {n: sorted_clockwise(n, [p for p in adjacency.get(n, empty) if p in live]) for n in live}
        else:
            self._ordered = {
                n: sorted_clockwise(
                    n, (p for p in adjacency.get(n, empty) if p in live and n in adjacency.get(p, empty))
                )
                for n in live
            }
        self._distances: dict[int, list[int]] = {
            n: [(p - n) % RING_SIZE for p in ordered] for n, ordered in self._ordered.items()
        }

    def neighbours(self, node: int) -> list[int]:
        """Usable neighbours of `node`, clockwise from it."""
        return self._ordered.get(node, [])

    def distances(self, node: int) -> list[int]:
        """Clockwise distances from `node` of `neighbours(node)`, in the same order."""
        return self._distances.get(node, [])


def flood(
    adjacency: Mapping[int, Collection[int]] | FloodGraph, root: int, alive: Collection[int] | None = None
) -> FloodResult:
    """Flood from `root`; `adjacency[n]` is n's set of linked peers (or a prepared `FloodGraph`)."""
    graph = adjacency if isinstance(adjacency, FloodGraph) else FloodGraph(adjacency, alive)
    result = FloodResult(root)
    if root not in graph.live:
        return result
    receipts = result.receipts
    hops = result.hops
    queue: deque[tuple[int, int, int]] = deque()  # (node, bound, sender)
    for peer, bound in root_bounds_ordered(root, graph.neighbours(root)).items():
        queue.append((peer, bound, root))
    hops[root] = 0
    while queue:
        node, bound, sender = queue.popleft()
        receipts[node] = receipts.get(node, 0) + 1
        if node in hops:
            continue  # a duplicate: counted, not forwarded again
        hops[node] = hops[sender] + 1
        handed = forward_bounds_ordered(node, bound, graph.neighbours(node), sender, graph.distances(node))
        for peer, next_bound in handed.items():
            queue.append((peer, next_bound, node))
    return result
