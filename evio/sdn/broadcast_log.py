"""Which FRB broadcasts a switch received: per root and per inner frame (the paper's E1 check).

Bounded Flood promises that a node receives each broadcast at most once (and
exactly once when successor links close the ring). To observe that on a live
overlay every switch keeps totals, a count per root node, and the latest
broadcasts it received, each named by a digest of the inner frame: the same
broadcast has the same digest at every node, so whoever collects the logs of
all nodes can count how often each node saw it. Pure and bounded in size.
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from dataclasses import dataclass

FRAME_DIGEST_BYTES = 8  # 64 bits: no accidental collision among the few frames kept
DEFAULT_KEEP = 128
# Roots are node ids taken from FRBs, which adjacent peers write: without a cap a peer
# inventing roots grows `by_root` without end. Far above a real overlay's node count;
# when full, the root heard from least recently makes room (its count restarts if it returns).
MAX_ROOTS = 4096
# Inner ethertypes counted apart (issue 23: which broadcasts keep the switches busy); a peer may invent any of the
# 65,536, so past these the rest are counted under OTHER_ETHERTYPE.
MAX_ETHERTYPES = 32
OTHER_ETHERTYPE = -1


def frame_digest(frame: bytes) -> str:
    """A short name for a frame's exact bytes, the same at every node that sees it."""
    return hashlib.blake2b(frame, digest_size=FRAME_DIGEST_BYTES).hexdigest()


@dataclass(frozen=True, slots=True)
class BroadcastReceived:
    seq: int  # 1, 2, ... in the order this switch received broadcasts
    root: int  # the node that originated it
    frame: str  # `frame_digest` of the inner frame
    ethertype: int  # of the inner frame
    peer: int  # the neighbour it came from
    hop_count: int


class BroadcastLog:
    def __init__(self, keep: int = DEFAULT_KEEP, max_roots: int = MAX_ROOTS) -> None:
        self.received = 0
        self.own_returned = 0  # broadcasts rooted here that came back: a bound violation if ever non-zero
        self.by_root: Counter[int] = Counter()  # least recently heard root first
        self.max_roots = max_roots
        self.roots_evicted = 0
        self.recent: deque[BroadcastReceived] = deque(maxlen=keep)
        self.by_ethertype: Counter[int] = Counter()  # of the inner frame; OTHER_ETHERTYPE past MAX_ETHERTYPES

    def record(self, root: int, inner: bytes, peer: int, hop_count: int) -> BroadcastReceived:
        self.received += 1
        self.by_root[root] = self.by_root.pop(root, 0) + 1  # re-inserted: most recent last
        if len(self.by_root) > self.max_roots:
            del self.by_root[next(iter(self.by_root))]
            self.roots_evicted += 1
        ethertype = int.from_bytes(inner[12:14], "big") if len(inner) >= 14 else 0
        counted = ethertype if ethertype in self.by_ethertype or len(self.by_ethertype) < MAX_ETHERTYPES else OTHER_ETHERTYPE
        self.by_ethertype[counted] += 1
        entry = BroadcastReceived(self.received, root, frame_digest(inner), ethertype, peer, hop_count)
        self.recent.append(entry)
        return entry

    def record_own_return(self) -> None:
        self.own_returned += 1
