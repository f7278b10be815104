"""Whom a member tells it is online when presence goes to linked peers only (decisions 0052, 0059).

Pure. With the overlay CA's member list, a member does not need every other member's presence, only
that of the peers it may link with: its ring neighbours (successors and predecessors, which close
the ring) and peers at halving distances around it (candidates for its long-distance links, as
Chord's fingers and Symphony's harmonic choices). It sends its presence to those alone, and answers
whoever sends it theirs, so each member's presence goes to O(width + log n) peers, not n.

A neighbour that stays silent (offline, or not yet back) is skipped (`skip`): the window then
reaches past it to the next member, so the ring closes over the members online.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence, Set

RING = 1 << 128
WIDTH = 4  # neighbours each way: twice evio's default successors, so a silent one or two leave the ring whole


def contacts(listed: Sequence[int], own: int, skip: Set[int] = frozenset(), width: int = WIDTH) -> frozenset[int]:
    """The node ids of `listed` (sorted, unique) that `own` sends its presence to.

    Mutual (but for `skip`): the neighbours are, and `own` also tells the members whose finger it is. So
    of two members, whichever comes online second tells the first, whose word went to nobody then."""
    others = [n for n in listed if n != own]
    if not others:
        return frozenset()
    chosen: set[int] = set()
    start = bisect.bisect_right(others, own)
    size = len(others)
    for direction in (1, -1):
        found = 0
        first = start if direction == 1 else start - 1
        for step in range(size):
            node = others[(first + direction * step) % size]
            if node in skip:
                continue
            chosen.add(node)
            found += 1
            if found == width:
                break
    for j in range(1, _fingers(size) + 1):
        finger = _first_from(listed, (own + (RING >> j)) % RING, own, skip)
        if finger is not None:
            chosen.add(finger)
        chosen.update(x for x in _fingered_by(listed, own, j) if x not in skip)
    return frozenset(chosen)


def _fingers(others: int) -> int:
    """Fingers at RING / 2^j for j = 1 .. log2 n: the first member at or past own + RING / 2^j."""
    return max(1, others.bit_length())


def _first_from(listed: Sequence[int], target: int, exclude: int, skip: Set[int]) -> int | None:
    at = bisect.bisect_left(listed, target)
    for step in range(len(listed)):
        node = listed[(at + step) % len(listed)]
        if node != exclude and node not in skip:
            return node
    return None


def _fingered_by(listed: Sequence[int], own: int, j: int) -> list[int]:
    """The members whose finger j is `own`: those X with X + RING / 2^j in (own's predecessor, own]."""
    distance = RING >> j
    at = bisect.bisect_left(listed, own)
    predecessor = listed[at - 1] if at > 0 else listed[-1]
    low, high = (predecessor - distance) % RING, (own - distance) % RING
    if low < high:
        candidates = list(listed[bisect.bisect_right(listed, low) : bisect.bisect_right(listed, high)])
    else:  # the interval wraps past zero
        candidates = [*listed[bisect.bisect_right(listed, low) :], *listed[: bisect.bisect_right(listed, high)]]
    candidates.append(predecessor)  # its own finger skips itself: checked as the others are
    return [x for x in candidates if x != own and _first_from(listed, (x + distance) % RING, x, frozenset()) == own]
