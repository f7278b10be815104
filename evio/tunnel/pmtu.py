"""Path MTU of one tunnel, found by padded probe records (DPLPMTUD, RFC 8899), sans I/O.

The flow (docs/decisions/0050-path-mtu-probed-and-too-big-answered.md)::

    1. search    a round sends one probe record per candidate size at once (the IP datagram
                 size on the underlay, padding included), DF set; the peer answers each with an
                 ack carrying its token (RFC 8899 section 4.1: a probe is confirmed by an ack)
    2. confirm   at the round's deadline, a size acked is confirmed; one not acked has lost a
                 probe, and after MAX_PROBES losses it fails (section 5.1.2); the path MTU is the
                 largest size confirmed, taken when the first round ends (never raised on a
                 partial answer: a small probe's ack arriving first must not lower the tunnel)
    3. refine    while the gap between the largest confirmed and the smallest failed size is
                 wider than REFINE_STEP, the next round probes sizes inside it (a binary search)
    4. complete  every CONFIRM_INTERVAL the current size is probed again; MAX_PROBES losses in a
                 row mean a black hole (section 4.3): search again from the base; every
                 RAISE_INTERVAL the search runs again from scratch to find a larger path
                 (PMTU_RAISE_TIMER, section 5.1.1)

A peer that acks no probe, not even the smallest (an older evio: it counts the opcode
``unknown-control`` and carries on), leaves the MTU ``assumed`` (the configured underlay).

``tick(now)`` returns the probes to send; ``on_ack(now, token)`` takes an answer. Sizes are
IP datagram sizes (what ``ip link`` and a router's MTU count), so ``mtu`` compares with links.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass

logger = logging.getLogger(__name__)

MAX_PROBES = 3
"""Losses of one size before it fails (RFC 8899 MAX_PROBES)."""
ROUND_SECONDS = 1.0
"""How long a round waits for acks: a probe not acked by then is lost."""
CONFIRM_INTERVAL = 30.0
"""How often the current size is probed again (black hole detection)."""
RAISE_INTERVAL = 600.0
"""How often a complete search runs again, to find a larger path (RFC 8899 PMTU_RAISE_TIMER)."""
REFINE_STEP = 16
"""The search stops when the largest confirmed and the smallest failed size are this close."""
MIN_PROBE = 576
"""The smallest size probed: the IPv4 minimum; its ack says the peer answers probes at all."""
BASE = 1280
"""RFC 8899's base in practice: the IPv6 minimum link MTU, which most paths carry."""
LADDER = (MIN_PROBE, BASE, 1400, 1450)
"""Sizes of the first round besides the tunnel's largest datagram."""


class PmtuSource(enum.Enum):
    ASSUMED = "assumed"
    """No probe confirmed yet (searching, or a peer that does not answer): the configured underlay."""
    PROBED = "probed"
    """The largest size a probe confirmed."""


@dataclass(frozen=True)
class Probe:
    """Send one probe record of ``size`` bytes of IP datagram, carrying ``token``."""

    token: int
    size: int


class PathMtu:
    """The DPLPMTUD state of one tunnel (module doc). ``largest``: the largest IP datagram the tunnel
    ever sends (its TAP MTU's record on this path): there is no use in probing above it."""

    def __init__(self, largest: int, now: float, rng: random.Random | None = None) -> None:
        if largest < MIN_PROBE:
            raise ValueError(f"largest datagram {largest} is below {MIN_PROBE}")
        self.largest = largest
        self._rng = rng or random.Random()
        self.mtu: int | None = None  # confirmed, in use
        self.searches = 0
        self.black_holes = 0
        self._confirmed: set[int] = set()
        self._failed: set[int] = set()
        self._losses: dict[int, int] = {}
        self._outstanding: dict[int, int] = {}  # token -> size, this round
        self._acked: set[int] = set()  # sizes acked this round
        self._round_ends: float | None = None
        self._pending = self._first_round()
        self._next_confirm: float | None = None
        self._next_raise = now + RAISE_INTERVAL
        self._gave_up = False

    @property
    def source(self) -> PmtuSource:
        return PmtuSource.PROBED if self.mtu is not None else PmtuSource.ASSUMED

    @property
    def searching(self) -> bool:
        return bool(self._pending) or self._round_ends is not None

    def _first_round(self) -> list[int]:
        return sorted({size for size in LADDER if size < self.largest} | {self.largest})

    # -- events ------------------------------------------------------------------

    def tick(self, now: float) -> list[Probe]:
        """The probes due now (a new round), after closing the round whose deadline passed."""
        if self._round_ends is not None:
            if now < self._round_ends:
                return []
            self._close_round()
        if not self._pending:
            self._schedule(now)
        if not self._pending:
            return []
        probes = [Probe(self._rng.getrandbits(64), size) for size in self._pending]
        self._outstanding = {probe.token: probe.size for probe in probes}
        self._acked = set()
        self._pending = []
        self._round_ends = now + ROUND_SECONDS
        return probes

    def on_ack(self, now: float, token: int) -> None:
        size = self._outstanding.pop(token, None)
        if size is None:
            return  # a late ack of an earlier round, or a token never sent: nothing to learn
        self._acked.add(size)
        if not self._outstanding:
            self._round_ends = now  # every probe answered: the round may close at the next tick

    # -- rounds ------------------------------------------------------------------

    def _close_round(self) -> None:
        for size in self._acked:
            self._confirmed.add(size)
            self._losses.pop(size, None)
        for size in self._outstanding.values():
            losses = self._losses.get(size, 0) + 1
            self._losses[size] = losses
            if losses >= MAX_PROBES:
                self._failed.add(size)
                self._losses.pop(size)
        self._outstanding = {}
        self._round_ends = None
        if self.mtu is not None and self.mtu in self._failed:
            # The size in use stopped passing (a route change): a black hole (RFC 8899 section 4.3).
            self.black_holes += 1
            self._restart()
            return
        top = max(self._confirmed, default=None)
        if top is not None and (self.mtu is None or top > self.mtu):
            logger.info("path MTU %d confirmed", top)
            self.mtu = top
        retry = sorted(size for size in self._losses if top is None or size > top)
        self._pending = retry or self._refine(top)
        if not self._pending and top is None and not self._gave_up:
            self._gave_up = True  # not even the smallest probe answered: an older peer, or no path
            logger.info("no probe answered: the path MTU stays assumed")

    def _refine(self, top: int | None) -> list[int]:
        if top is None:
            return []
        above = [size for size in self._failed if size > top]
        if not above:
            return []
        low, high = top, min(above)
        if high - low <= REFINE_STEP:
            return []
        step = (high - low) / 4
        return sorted({low + int(step * k) // 4 * 4 for k in (1, 2, 3)} - {low, high} - self._failed)

    def _schedule(self, now: float) -> None:
        """Between rounds: the periodic confirmation and raise."""
        if now >= self._next_raise:
            self._next_raise = now + RAISE_INTERVAL
            self.searches += 1
            self._confirmed.clear()
            self._failed.clear()
            self._losses.clear()
            self._gave_up = False
            # The current size stays in use until a round says otherwise.
            self._pending = self._first_round()
            return
        if self.mtu is None:
            return
        if self._next_confirm is None:
            self._next_confirm = now + CONFIRM_INTERVAL
        elif now >= self._next_confirm:
            self._next_confirm = now + CONFIRM_INTERVAL
            self._confirmed.discard(self.mtu)
            self._pending = [self.mtu]

    def _restart(self) -> None:
        """Fall back to the base, if it was confirmed (else the largest size confirmed below it; none:
        assumed), and search up again (RFC 8899 section 5.2: a black hole returns to BASE_PLPMTU)."""
        below = [size for size in self._confirmed if size <= BASE and self.mtu is not None and size < self.mtu]
        logger.info("path MTU %s no longer passes: %s while searching again", self.mtu, max(below, default="assumed"))
        self.mtu = max(below, default=None)
        self.searches += 1
        self._confirmed.clear()
        self._failed.clear()
        self._losses.clear()
        self._next_confirm = None
        self._pending = self._first_round()
