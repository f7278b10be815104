"""Outstanding requests: transaction ids, response matching, deadlines.

Pure: ``now`` is passed in and randomness comes from a ``random.Random``. The
adapter keeps one timer armed at ``next_deadline()`` and calls ``expire(now)``
when it fires. ``waiter`` is whatever the adapter needs to wake the caller (an
asyncio future); the table never touches it.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from evio.signal.errors import SignalError

W = TypeVar("W")


@dataclass
class Pending(Generic[W]):
    txid: str
    overlay: str
    peer: int  # node id the request went to: only it may answer
    action: str
    deadline: float
    waiter: W
    sent_at: float = field(default=0.0)


class TransactionTable(Generic[W]):
    def __init__(self, rng: random.Random, max_outstanding: int = 1024) -> None:
        self._rng = rng
        self._max = max_outstanding
        self._pending: dict[str, Pending[W]] = {}
        self._deadlines: list[tuple[float, str]] = []  # heap; stale entries skipped lazily
        self._prefix = f"{rng.getrandbits(32):08x}"  # distinguishes restarts of the same node
        self._counter = 0

    def __len__(self) -> int:
        return len(self._pending)

    def start(self, overlay: str, peer: int, action: str, now: float, timeout: float, waiter: W) -> Pending[W]:
        """Open a transaction; ``TransactionLimit`` if too many are outstanding."""
        if len(self._pending) >= self._max:
            raise TransactionLimit(f"{self._max} requests already outstanding")
        self._counter += 1
        # Counter for uniqueness, random suffix so ids are not guessable by other members.
        txid = f"{self._prefix}-{self._counter:x}-{self._rng.getrandbits(48):012x}"
        pending = Pending(txid, overlay, peer, action, now + timeout, waiter, sent_at=now)
        self._pending[txid] = pending
        heapq.heappush(self._deadlines, (pending.deadline, txid))
        return pending

    def resolve(self, txid: str, overlay: str, peer: int) -> Pending[W] | None:
        """Close the transaction a response or error answers; None if it matches none.

        The overlay and the responding node must be the ones the request went to,
        so another member cannot answer in a peer's place.
        """
        pending = self._pending.get(txid)
        if pending is None or pending.overlay != overlay or pending.peer != peer:
            return None
        del self._pending[txid]
        return pending

    def get(self, txid: str) -> Pending[W] | None:
        return self._pending.get(txid)

    def cancel(self, txid: str) -> Pending[W] | None:
        return self._pending.pop(txid, None)

    def fail_peer(self, overlay: str, peer: int) -> list[Pending[W]]:
        """Close every transaction waiting on `peer` (it left, or its server bounced us)."""
        gone = [p for p in self._pending.values() if p.overlay == overlay and p.peer == peer]
        for p in gone:
            del self._pending[p.txid]
        return gone

    def expire(self, now: float) -> list[Pending[W]]:
        """Close and return every transaction whose deadline is at or before `now`."""
        expired: list[Pending[W]] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, txid = heapq.heappop(self._deadlines)
            pending = self._pending.get(txid)
            if pending is not None and pending.deadline <= now:
                del self._pending[txid]
                expired.append(pending)
        return expired

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def close_all(self) -> list[Pending[W]]:
        closed = list(self._pending.values())
        self._pending.clear()
        self._deadlines.clear()
        return closed


class TransactionLimit(SignalError):
    """Too many outstanding requests."""
