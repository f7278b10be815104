"""When this node may ask a peer for a link: failure backoff, short retries, refusals remembered, setup slots.

- A peer whose tunnel failed, or that did not answer, or that is full, is backed off (`failed`): not asked,
  and left out of the ring meanwhile, so the next peers take its place. A ring successor's backoff is capped
  at `successor_backoff_cap`: the ring is retried within seconds until it closes.
- A refusal for a passing reason (already linked, link closing, no link) is retried after `refused_retry`
  (`retry_soon`); a peer that refused a long-distance link is not asked for one for
  `long_distance_refusal_ttl` (`refuse_long_distance`), unless the ring moves.
- Every tunnel added or removed spends a token of a `TokenBucket` (the change budget); new links are
  set up `setup_slots` at a time.
- A successor whose link has not been up for `successor_overdue` is warned about once a minute
  (`warn_overdue`), with its last setback: every retry may be quiet.

Pure: times come in as `now`, draws from the given `random.Random`. Built on `peer_backoff` and
`evio.ratelimit`. The orchestrator (`evio.overlay.orchestrator`) owns one `Pacing` per overlay;
`evaluation` reads it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable

from evio.overlay.adjacency import LinkType
from evio.overlay.peer_backoff import PeerBackoff
from evio.overlay.peer_links import Phase
from evio.overlay.timings import Timings
from evio.ratelimit import Rate, TokenBucket

log = logging.getLogger(__name__)

OVERDUE_REPEAT = 60.0  # seconds between warnings about the same overdue successor


def setup_slots(max_setups: int, load: float | None) -> int:
    """New links of each kind set up at once: `max_setups`, divided by the host's load (at least one).

    On a host whose loops run late every setup slows the others; with as many at once as unloaded,
    they missed their deadlines together and were retried together."""
    stretch = max(1.0, load) if load is not None else 1.0
    return max(1, math.ceil(max_setups / stretch))


class Pacing:
    def __init__(self, timings: Timings, now: float, name: str = "") -> None:
        self.timings = timings
        self.name = name  # the overlay id, for logs
        self.backoff = PeerBackoff(timings.backoff_base, timings.backoff_cap)
        self.budget = TokenBucket(Rate(timings.change_rate, timings.change_burst), now)
        self.successors: frozenset[int] = frozenset()  # our ring successors, backed-off ones included
        self._retry_at: dict[int, float] = {}  # refused for a passing reason: not before then
        self._refused_long_distance: dict[int, float] = {}  # peer -> until
        # A successor whose link is not up: since when, when it was last warned about, the last setback. Kept
        # for our successors only (a few peers), so a refusal that is retried quietly still shows in the log.
        self._overdue: dict[int, tuple[float, float | None]] = {}
        self._setback: dict[int, str] = {}

    # -- what happened ------------------------------------------------------------------------------

    def failed(self, peer: int, why: str, now: float, rng: random.Random, link_type: LinkType | None) -> float:
        """Back the peer off; when it may be asked again."""
        self.note_setback(peer, why)
        # A successor is retried within seconds for ever: while it is left out, the next peer stands in,
        # but the ring is only whole once this link is up (the "retried until it exists").
        successor = link_type is LinkType.SUCCESSOR or peer in self.successors
        cap = self.timings.successor_backoff_cap if successor else None
        retry_at = self.backoff.failed(peer, now, rng, cap)
        log.info(
            "overlay %s peer=%032x backed off for %.1f s after %s failure(s): %s",
            self.name, peer, retry_at - now, self.backoff.failures(peer), why,
        )
        return retry_at

    def note_setback(self, peer: int, why: str) -> None:
        if peer in self.successors:
            self._setback[peer] = why

    def retry_soon(self, peer: int, why: str, now: float) -> None:
        self._retry_at[peer] = now + self.timings.refused_retry
        self.note_setback(peer, why)

    def refuse_long_distance(self, peer: int, now: float) -> None:
        self._refused_long_distance[peer] = now + self.timings.long_distance_refusal_ttl

    def ring_moved(self) -> None:
        self._refused_long_distance.clear()  # everyone may be asked again

    def forget(self, peer: int) -> None:
        """The peer left the overlay: nothing to pace any more."""
        self.backoff.forget(peer)
        self._retry_at.pop(peer, None)
        self._refused_long_distance.pop(peer, None)

    # -- what may be done ---------------------------------------------------------------------------

    def may_ask(self, peer: int, now: float) -> bool:
        """Not within `refused_retry` of a refusal for a passing reason."""
        return self._retry_at.get(peer, now) <= now

    def refused_long_distance(self, now: float) -> set[int]:
        return {p for p, until in self._refused_long_distance.items() if until > now}

    def warn_overdue(self, successors: Iterable[int], phase: Callable[[int], Phase], now: float) -> list[int]:
        """Warn about each successor whose link has not been up for `successor_overdue`, once a minute:
        the ring has a gap here although every retry may be quiet (a refusal for a passing reason).
        Returns the peers warned about."""
        missing = {p for p in successors if phase(p) is not Phase.UP}
        for peer in self._overdue.keys() - missing:
            del self._overdue[peer]
        for peer in self._setback.keys() - missing:
            del self._setback[peer]
        warned_now = []
        for peer in missing:
            since, warned = self._overdue.setdefault(peer, (now, None))
            if now - since < self.timings.successor_overdue or (warned is not None and now - warned < OVERDUE_REPEAT):
                continue
            self._overdue[peer] = (since, now)
            warned_now.append(peer)
            log.warning(
                "overlay %s successor peer=%032x has had no link for %.0f s (phase %s, last setback: %s)",
                self.name, peer, now - since, phase(peer).value, self._setback.get(peer, "none"),
            )
        return warned_now

    # -- time ---------------------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        for table in (self._retry_at, self._refused_long_distance):
            for peer in [p for p, until in table.items() if until <= now]:
                del table[peer]

    def wakeups(self, now: float) -> list[float]:
        """When a backed-off peer rejoins the ring, or a retry or refusal ends."""
        expiry = self.backoff.next_expiry(now)
        return [
            *(() if expiry is None else (expiry,)), *self._retry_at.values(), *self._refused_long_distance.values()
        ]

    def tracked(self) -> set[int]:
        return self.backoff.peers() | self._retry_at.keys()

    def clear(self) -> None:
        self._retry_at.clear()
        self._refused_long_distance.clear()
        self.successors = frozenset()
        self.backoff.clear()
