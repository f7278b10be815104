"""Sliding anti-replay window over 64-bit record counters (RFC 6479).

The bitmap is a ring of 64-bit blocks. Moving the window forward clears whole
blocks instead of shifting bits, so an update costs O(1) for in-order traffic
and at most one pass over the ring for a large jump.

Use ``check`` before decrypting (cheap rejection) and ``update`` only after
the record authenticated: a forged record must not move the window.
"""

from __future__ import annotations

ACCEPT = 0
REPLAYED = 1
STALE = 2
"""Verdicts of ``ReplayWindow.check`` (plain ints: it runs once per packet)."""

_BLOCK_BITS = 64


class ReplayWindow:
    """Accepts each counter at most once, and none older than ``size`` below the highest seen."""

    __slots__ = ("_bitmap", "_blocks", "_size", "top")

    def __init__(self, size: int = 2048) -> None:
        if size <= 0 or size % _BLOCK_BITS:
            raise ValueError("window size must be a positive multiple of 64")
        self._size = size
        # One spare block: the live range [top - size + 1, top] spans at most
        # size / 64 + 1 blocks.
        self._blocks = size // _BLOCK_BITS + 1
        self._bitmap = [0] * self._blocks
        self.top = -1
        """Highest counter accepted so far (-1 before the first)."""

    @property
    def size(self) -> int:
        return self._size

    def check(self, counter: int) -> int:
        """ACCEPT, REPLAYED or STALE, without changing the window."""
        top = self.top
        if counter > top:
            return ACCEPT
        if top - counter >= self._size:
            return STALE
        if (self._bitmap[(counter >> 6) % self._blocks] >> (counter & 63)) & 1:
            return REPLAYED
        return ACCEPT

    def update(self, counter: int) -> None:
        """Mark an authenticated counter as seen, sliding the window if it is new."""
        blocks = self._blocks
        bitmap = self._bitmap
        top = self.top
        if counter > top:
            top_block = top >> 6
            jump = (counter >> 6) - top_block
            for i in range(1, min(jump, blocks) + 1):
                bitmap[(top_block + i) % blocks] = 0
            self.top = counter
        bitmap[(counter >> 6) % blocks] |= 1 << (counter & 63)
