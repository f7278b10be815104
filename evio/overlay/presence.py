"""Our signaling session and the members it shows, as the orchestrator needs them: when to trust them.

- While our own signaling is down nothing is evaluated and every tunnel stays up (tunnels carry traffic
  without signaling). After login, evaluation waits for the membership to be re-learnt: until the
  members' presences have been quiet for `membership_debounce`, at most `settle_after_login` (`settled`).
- How long our own way back took (`rejoin_time`, from the loss of our session, or our start, to login) is
  how long a peer that dropped out is given before we ask whether it is still a member
  (`check_later`): a linked peer gone from signaling keeps its link while its tunnel lives, unless
  signaling, asked a little later (`CheckMembership`), says it was removed.
- A peer a check found still a member (back after it) is given twice as long at each absence after, up to
  `relogin_grace`, until it has stayed that long (`_FoundBack`): each check is a login of ours, and a member
  leaving for 2 s every 6 s made every node it linked to log in again every 6 s. A first absence is still
  checked after `absent_wait`, and the backoff is the peer's own while a check is for everyone: another peer's
  removal is seen as soon as before, whoever cycles meanwhile.

Pure: `now` comes in, actions come out. Owned by `evio.overlay.orchestrator`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from evio.overlay.actions import Action, CheckMembership
from evio.overlay.peer_links import Phase
from evio.overlay.timings import Timings
from evio.signal.events import RemovalCause

log = logging.getLogger(__name__)

RELOGIN_GRACE_STRETCH = 10  # a peer logging in again is never given longer than this many `relogin_grace`s


def absent_wait(cause: RemovalCause, rejoin_time: float, timings: Timings) -> float:
    """How long after a linked peer left signaling (`cause`) we ask whether it is still a member."""
    if cause is RemovalCause.RELOGIN:
        # ... given twice as long as our own way back took, when that was longer: in a 128-node
        # lab logins took 20-60 s, so peers logging in again were asked about after 30 s, each
        # check a re-login seen by the checker's own peers (675 in ten minutes, the ring never
        # closed). Bounded, so a revoked member is still found.
        return max(timings.relogin_grace, min(2 * rejoin_time, RELOGIN_GRACE_STRETCH * timings.relogin_grace))
    # A peer whose session dropped needs about as long to log in again as we did last time:
    # on a loaded host logins took 20 s, and checking after 1.5 s made every drop a re-login
    # of each linked peer (some 270 in four minutes of a 64-node lab). Unloaded, 1.5 s.
    return max(timings.revalidate_after, min(rejoin_time, timings.relogin_grace))


@dataclass
class _FoundBack:
    """A peer that a check, asked while it was gone, found still a member: it came back after it."""

    times: int  # checks in a row that found it back: its next absence is given 2**times as long ...
    back_at: float  # ... unless it stays from this return until `relogin_grace` has passed


class Presence:
    def __init__(self, node_id: int, timings: Timings, now: float, name: str = "") -> None:
        self.node_id = node_id
        self.timings = timings
        self.name = name  # the overlay id, for logs
        self.members: set[int] = set()
        self.connected = False
        # Our signaling session ended then ... (or we started then: the first login is a way back too, and
        # on a loaded host it is the only measure a node has before its peers' sessions start to drop)
        self._signal_lost_at: float | None = now
        self.rejoin_time = 0.0  # ... and the last time it came back, it took this long
        self.settle_until = now
        self._settle_deadline = now  # the latest settle_until may be after a login
        self._absent_check: dict[int, float] = {}  # linked peer gone from signaling -> when to ask about it
        self._asked: set[int] = set()  # peers gone when we last asked, not back since
        self._found_back: dict[int, _FoundBack] = {}

    def logged_in(self, now: float) -> float:
        """Our session is up: when the membership will have settled (evaluate then)."""
        if self._signal_lost_at is not None:
            # How long our own way back took: a peer that dropped out is given as long (see absent_wait).
            self.rejoin_time = now - self._signal_lost_at
            self._signal_lost_at = None
        self.connected = True
        self.settle_until = self._settle_deadline = now + self.timings.settle_after_login
        return self.settle_until

    def logged_out(self, now: float) -> None:
        if self.connected:
            self._signal_lost_at = now
        self.connected = False

    def add(self, peer: int, now: float) -> bool:
        """A member's presence: False if it is ourselves or known already."""
        if peer == self.node_id or peer in self.members:
            return False
        self.members.add(peer)
        if now < self.settle_until:
            # The presences a login brings arrive together (16 in 46 ms in a lab): once they pause, the
            # membership is known. Waiting the whole settle time kept a node that had just (re)joined
            # from asking its successors while its predecessors already linked to it and handed it
            # broadcasts it could not pass on (a 1.6 s outage for a pair crossing it, E8).
            self.settle_until = min(self._settle_deadline, now + self.timings.membership_debounce)
        was_away = self._absent_check.pop(peer, None) is not None  # back: still a member
        found = self._found_back.get(peer)
        if peer in self._asked:
            self._asked.discard(peer)
            self._found_back[peer] = _FoundBack(1 if found is None else found.times + 1, now)
        elif found is not None and was_away:
            found.back_at = now  # back before we asked: it stays backed off, from now
        return True

    def check_later(self, peer: int, cause: RemovalCause, now: float) -> None:
        """A linked peer left signaling: ask about it after `absent_wait`, longer if checks found it back before."""
        wait = absent_wait(cause, self.rejoin_time, self.timings)
        found = self._found_back.get(peer)
        if found is not None and now - found.back_at >= self.timings.relogin_grace:
            del self._found_back[peer]  # it stayed: its next absence is a first one again
        elif found is not None:
            # Doubling, not `evio.backoff.backoff_delay`: its jitter would halve the wait, and a check has no
            # crowd to spread. Capped at what a peer saying it logs in again is given: a removal by a group
            # edit the server does not push is still seen within `relogin_grace` (and at once by any check).
            wait = max(wait, min(wait * 2.0 ** min(found.times, 16), self.timings.relogin_grace))
        self._asked.discard(peer)
        self._absent_check[peer] = now + wait

    def forget(self, peer: int, revoked: bool = False) -> None:
        """Stop asking about `peer`; `revoked`: it is no member any more, so no backoff of its checks is kept
        either (a member that merely dropped a link keeps it: dropping one and asking for another must not
        buy a fresh, immediate check)."""
        self._absent_check.pop(peer, None)
        self._asked.discard(peer)
        if revoked:
            self._found_back.pop(peer, None)

    def check_absent(self, now: float, phase: Callable[[int], Phase]) -> list[Action]:
        """Checks that are due, while we can ask: one `CheckMembership` if a linked peer is still gone."""
        due = [p for p, at in self._absent_check.items() if at <= now]
        if not due or not self.connected:
            return []
        for peer in due:
            del self._absent_check[peer]
        linked = [p for p in due if p not in self.members and phase(p) is Phase.UP]
        if not linked:
            return []
        self._asked.update(linked)
        for peer in [p for p, f in self._found_back.items() if now - f.back_at >= self.timings.relogin_grace]:
            if peer not in self._asked:
                del self._found_back[peer]  # stayed long enough: kept no longer than it matters
        log.info("overlay %s %d linked peer(s) gone from signaling: checking membership", self.name, len(linked))
        return [CheckMembership()]

    def wakeups(self) -> Iterable[float]:
        return self._absent_check.values() if self.connected else ()

    def clear(self) -> None:
        self.members.clear()
        self._absent_check.clear()
        self._asked.clear()
        self._found_back.clear()
