"""The flooding-bound algorithm of Bounded Flood (paper section 3.2.3; docs/design.md, "Flooding bounds").

A broadcast rooted at `r` is split into disjoint clockwise arcs, closed-open:
the root sends to each neighbour `n_i` (sorted clockwise from `r`) the bound
`n_(i+1)`, and to the last one the bound `r`. A node `q` receiving bound `b`
is responsible for `[q, b)`: it forwards to its neighbours strictly inside
`(q, b)`, each with the next such neighbour as bound and the last with `b`.
Because the arcs handed out never overlap, no node can receive the same
broadcast twice on any graph; with every node linked to its clockwise
successor, every node receives it exactly once.

The same algorithm on the mirrored ring (`mirror`: ids negated, so clockwise
becomes counter-clockwise) gives the `reverse_*` bounds: a second, disjoint
flood whose arcs run the other way round. Evio floods a broadcast's header
that way too, for learning only: one orientation alone reaches some nodes
the long way round (docs/design.md, "Learning and unicast flows").

The `*_ordered` forms take the neighbours already in clockwise order from the
node (`evio.ids.sorted_clockwise`): the neighbours strictly inside `(q, b)`
are then a prefix of that list, found by bisection. The unordered forms sort
and call them, so the switch and the simulator run the same code.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from evio.ids import RING_SIZE, sorted_clockwise


def _chain(ordered: Sequence[int], last_bound: int) -> dict[int, int]:
    """Each neighbour's bound is the next one; the last one's is `last_bound`."""
    return dict(zip(ordered, [*ordered[1:], last_bound]))


def root_bounds(root: int, neighbours: Iterable[int]) -> dict[int, int]:
    """Bounds for a broadcast originating here: neighbour id -> bound id."""
    return root_bounds_ordered(root, sorted_clockwise(root, neighbours))


def root_bounds_ordered(root: int, ordered: Sequence[int]) -> dict[int, int]:
    """`root_bounds` for distinct neighbours already sorted clockwise from `root`."""
    if ordered and ordered[0] == root:  # sorted clockwise, the root itself can only come first
        ordered = ordered[1:]
    return _chain(ordered, root)


def forward_bounds(node: int, bound: int, neighbours: Iterable[int], ingress: int | None = None) -> dict[int, int]:
    """Bounds for forwarding a broadcast received with `bound`: neighbour id -> bound id.

    Only neighbours strictly inside (node, bound) receive it; the neighbour it
    came from (`ingress`) never does.
    """
    return forward_bounds_ordered(node, bound, sorted_clockwise(node, neighbours), ingress)


def forward_bounds_ordered(
    node: int,
    bound: int,
    ordered: Sequence[int],
    ingress: int | None = None,
    distances: Sequence[int] | None = None,
) -> dict[int, int]:
    """`forward_bounds` for distinct neighbours already sorted clockwise from `node`.

    `distances`, when given, are their clockwise distances from `node` (a caller
    flooding many times over the same neighbours computes them once).
    """
    # Clockwise order makes "strictly inside (node, bound)" the slice from the first
    # neighbour past distance 0 (the node itself) up to the first at or past the bound.
    start = 1 if ordered and ordered[0] == node else 0
    limit = (bound - node) % RING_SIZE
    if distances is not None:
        end = bisect_left(distances, limit, lo=start)
    else:
        end = bisect_left(ordered, limit, lo=start, key=lambda n: (n - node) % RING_SIZE)
    inside = ordered[start:end]
    if ingress is not None and ingress in inside:
        inside = [n for n in inside if n != ingress]
    return _chain(inside, bound)


def mirror(nid: int) -> int:
    """`nid` on the mirrored ring: clockwise order there is counter-clockwise order here."""
    return -nid % RING_SIZE


def reverse_root_bounds(root: int, neighbours: Iterable[int]) -> dict[int, int]:
    """`root_bounds` counter-clockwise: neighbour id -> bound id, arcs running the other way."""
    bounds = root_bounds(mirror(root), (mirror(n) for n in neighbours))
    return {mirror(n): mirror(b) for n, b in bounds.items()}


def reverse_forward_bounds(
    node: int, bound: int, neighbours: Iterable[int], ingress: int | None = None
) -> dict[int, int]:
    """`forward_bounds` counter-clockwise, for a copy received with reverse bound `bound`."""
    bounds = forward_bounds(mirror(node), mirror(bound), (mirror(n) for n in neighbours),
                            None if ingress is None else mirror(ingress))
    return {mirror(n): mirror(b) for n, b in bounds.items()}
