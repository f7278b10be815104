"""Bounded Flood over an in-memory graph, with the real bound code.

Used by the simulator and the property tests: it delivers one broadcast from a
root along the arcs that `evio.sdn.flooding_bounds` hands out and records, per
node, how many copies arrived and after how many switching hops.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from evio.sdn.flooding_bounds import forward_bounds, root_bounds


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


def flood(adjacency: Mapping[int, Collection[int]], root: int, alive: Collection[int] | None = None) -> FloodResult:
    """Flood from `root`; `adjacency[n]` is n's set of linked peers.

    Links are usable only in both directions' adjacency (a tunnel is
    symmetric) and only between nodes in `alive` (all nodes when None).
    """
    live = set(adjacency) if alive is None else set(alive)

    cache: dict[int, list[int]] = {}

    def neighbours(n: int) -> list[int]:
        # Computed once per node per flood: it dominates the cost at large n.
        found = cache.get(n)
        if found is None:
            found = cache[n] = [p for p in adjacency.get(n, ()) if p in live and n in adjacency.get(p, ())]
        return found

    result = FloodResult(root)
    if root not in live:
        return result
    queue: deque[tuple[int, int, int]] = deque()  # (node, bound, sender)
    for peer, bound in root_bounds(root, neighbours(root)).items():
        queue.append((peer, bound, root))
    result.hops[root] = 0
    while queue:
        node, bound, sender = queue.popleft()
        result.receipts[node] = result.receipts.get(node, 0) + 1
        if node in result.hops:
            continue  # a duplicate: counted, not forwarded again
        result.hops[node] = result.hops[sender] + 1
        for peer, next_bound in forward_bounds(node, bound, neighbours(node), ingress=sender).items():
            queue.append((peer, next_bound, node))
    return result
