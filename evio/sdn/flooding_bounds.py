"""The flooding-bound algorithm of Bounded Flood (paper section 3.2.3; docs/design.md, "Flooding bounds").

A broadcast rooted at `r` is split into disjoint clockwise arcs, closed-open:
the root sends to each neighbour `n_i` (sorted clockwise from `r`) the bound
`n_(i+1)`, and to the last one the bound `r`. A node `q` receiving bound `b`
is responsible for `[q, b)`: it forwards to its neighbours strictly inside
`(q, b)`, each with the next such neighbour as bound and the last with `b`.
Because the arcs handed out never overlap, no node can receive the same
broadcast twice on any graph; with every node linked to its clockwise
successor, every node receives it exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable

from evio.ids import sorted_clockwise, strictly_between


def _chain(ordered: list[int], last_bound: int) -> dict[int, int]:
    bounds = {}
    for i, nid in enumerate(ordered):
        bounds[nid] = ordered[i + 1] if i + 1 < len(ordered) else last_bound
    return bounds


def root_bounds(root: int, neighbours: Iterable[int]) -> dict[int, int]:
    """Bounds for a broadcast originating here: neighbour id -> bound id."""
    ordered = [n for n in sorted_clockwise(root, neighbours) if n != root]
    return _chain(ordered, root)


def forward_bounds(node: int, bound: int, neighbours: Iterable[int], ingress: int | None = None) -> dict[int, int]:
    """Bounds for forwarding a broadcast received with `bound`: neighbour id -> bound id.

    Only neighbours strictly inside (node, bound) receive it; the neighbour it
    came from (`ingress`) never does.
    """
    ordered = [
        n for n in sorted_clockwise(node, neighbours) if n != ingress and strictly_between(n, node, bound)
    ]
    return _chain(ordered, bound)
