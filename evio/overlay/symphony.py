"""Symphony link selection (paper section 3.1; docs/design.md, "Symphony link selection").

A node links to its `s` nearest clockwise peers (successors) and to `k`
long-distance peers drawn from the harmonic distribution of eq. (1):

    x = exp(log(n) * (rand() - 1))            target offset: n * x positions

and discards a long-distance candidate closer than eq. (2):

    D_c = floor(n * exp(-log(n)))

The paper writes `log`; the original EdgeVPN code (GraphBuilder) computes both
with `log10`. The two forms are selectable (`LogForm`) so the simulator can
compare them:

- ``ln``: n * x = n ** rand lies in [1, n), log-uniform: the true Symphony /
  Kleinberg harmonic distribution. D_c = floor(n / n) = 1, i.e. eq. (2)
  only excludes the node itself.
- ``log10``: n * x lies in [n ** 0.566, n) (0.566 = 1 - 1/ln 10), so no fresh
  draw lands within D_c = floor(n ** 0.566) positions (15 of 128); eq. (2)
  then only removes kept links that the ring's growth has made too close.

How distances are measured: in **ring positions** (rank distance), not in id
space. The ring is the sorted list of known peers, self included; the peer
`d` positions clockwise of self is `d` entries further along that list, with
wrap-around. Reasons: eq. (1) multiplies by n, the number of nodes, so `n * x`
is a count of nodes; membership is known exactly (signaling presence), so
ranks are exact, whereas id distance would only estimate them and would
misplace targets wherever random ids happen to cluster; every rank holds a
peer, so "the closest peer not beyond the target" is simply the peer at
``floor(n * x)`` positions; successors are exactly ranks 1..s; and this is
what the original implementation does (`_get_long_dist_candidates` indexes
the sorted node list, `is_too_close` compares index distances).

Two deliberate differences from the original: a draw that lands on self, a
successor, an already chosen or an excluded peer is drawn again (up to
`DRAWS_PER_LINK` draws per wanted link), where the original drew exactly k
times and silently ended up with fewer links; and the too-close rule is
applied to every candidate, fresh or kept, not only to kept links.

Everything here is pure: randomness comes from the `random.Random` passed in,
so a given generator state always yields the same selection.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from evio.config.model import LogForm, default_long_distance

# A wanted long-distance link gets this many draws before the node settles for fewer.
DRAWS_PER_LINK = 4

# n * exp(-ln n) is exactly 1 but may come out as 0.999...: floor with this much slack
# so that whole-number offsets land where the arithmetic says they do.
_FLOOR_EPSILON = 1e-9


class SelectionError(ValueError):
    """Inputs that cannot describe a Symphony selection (self not in the ring, negative counts)."""


def too_close_distance(n: int, log_form: LogForm) -> int:
    """Eq. (2), D_c = floor(n * exp(-log(n))), in ring positions."""
    if n < 1:
        return 0
    return int(math.floor(n * math.exp(-log_form.log(n)) + _FLOOR_EPSILON))


def draw_offset(n: int, log_form: LogForm, rng: random.Random) -> float:
    """Eq. (1): n * x, the clockwise target offset in ring positions, in [n * exp(-log n), n)."""
    return n * math.exp(log_form.log(n) * (rng.random() - 1.0))


class Ring:
    """Known node ids in clockwise (numeric) order, self included; positions are ranks.

    Built once per membership change and shared by every selection over it.
    """

    __slots__ = ("_ids", "_rank")

    def __init__(self, nids: Iterable[int]) -> None:
        self._ids: tuple[int, ...] = tuple(sorted(set(nids)))
        self._rank: dict[int, int] = {nid: i for i, nid in enumerate(self._ids)}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, nid: object) -> bool:
        return nid in self._rank

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def rank(self, nid: int) -> int:
        try:
            return self._rank[nid]
        except KeyError:
            raise SelectionError(f"node {nid:032x} is not in the ring") from None

    def peer_at(self, origin: int, positions: int) -> int:
        """The node `positions` places clockwise of `origin`."""
        return self._ids[(self.rank(origin) + positions) % len(self._ids)]

    def distance(self, origin: int, nid: int) -> int:
        """Clockwise distance from `origin` to `nid` in ring positions (0 for itself)."""
        return (self.rank(nid) - self.rank(origin)) % len(self._ids)


@dataclass(frozen=True)
class Selection:
    """The links a node wants: successors nearest first; long-distance kept ones first, then new draws."""

    successors: tuple[int, ...]
    long_distance: tuple[int, ...]


def select_links(
    ring: Ring,
    self_id: int,
    successor_count: int,
    long_distance_count: int | None,
    log_form: LogForm,
    rng: random.Random,
    keep: Iterable[int] = (),
    exclude: Collection[int] = (),
) -> Selection:
    """Choose successors and long-distance peers for `self_id` on `ring`.

    `long_distance_count` None means floor(log2(n)). `keep` are current
    long-distance peers, retained while still valid (Symphony's point: fewer
    link changes than Chord); `exclude` are peers to leave out of the
    long-distance draws (e.g. they just refused or keep failing). Successors
    are never excluded: they are what holds the ring together.
    """
    if successor_count < 0 or (long_distance_count is not None and long_distance_count < 0):
        raise SelectionError("successor and long-distance counts must be >= 0")
    n = len(ring)
    ids = ring._ids
    origin = ring.rank(self_id)  # raises when self is missing
    successors = tuple(ids[(origin + d) % n] for d in range(1, min(successor_count, n - 1) + 1))
    wanted = default_long_distance(n) if long_distance_count is None else long_distance_count
    d_c = too_close_distance(n, log_form)
    taken = set(successors)
    taken.add(self_id)
    long_distance: list[int] = []

    # Kept links first, nearest first, while they still qualify.
    kept = [(ring._rank[p] - origin) % n for p in set(keep) if p in ring._rank]
    for distance in sorted(kept):
        peer = ids[(origin + distance) % n]
        if len(long_distance) < wanted and distance >= d_c and peer not in taken and peer not in exclude:
            long_distance.append(peer)
            taken.add(peer)
    draws = DRAWS_PER_LINK * (wanted - len(long_distance))
    log_n = log_form.log(n)
    # Looked up once per selection, not per draw (simulations draw millions).
    uniform, exp, floor = rng.random, math.exp, math.floor
    chosen, choose, take = len(long_distance), long_distance.append, taken.add
    while draws > 0 and chosen < wanted:
        draws -= 1
        # Eq. (1) as in draw_offset, with log n taken once per selection.
        offset = n * exp(log_n * (uniform() - 1.0))
        # The closest peer not beyond the target: ranks are dense, so it is the one at floor(offset).
        distance = floor(offset + _FLOOR_EPSILON)
        peer = ids[(origin + distance) % n]
        if distance >= d_c and peer not in taken and peer not in exclude:
            choose(peer)
            take(peer)
            chosen += 1
    return Selection(successors, tuple(long_distance))
