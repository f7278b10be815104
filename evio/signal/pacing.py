"""Sign-ins that settle (issue 24): when to come back after a session ended, and when to give up a login (pure).

A server restart with every member online ends every session at once, and
every member signs in again. What the server must do then grows with the
square of the members (each login fans presence out to all who are back), so
at 1,000 members a login took tens of seconds. Two rules keep that a burst the
server works through rather than a retry storm:

* `return_delay`: after a session that was up ends, a member comes back at a
  uniformly random moment within a spread that grows with the members its
  roster lists (`SPREAD_PER_MEMBER` each) and with the time its own last
  login took (at least `base`, at most `cap`). Members of a small overlay are
  back within half a second; 1,000 members arrive over 25 s, and members of a
  server that needed L seconds to log them in arrive over L seconds, not in
  the same instant.
* `LoginWatch`: a login is given up when the server has been silent for
  longer than it is patient, not after a fixed time from the start. Every
  answer the server sends restarts the wait, and the wait grows with the
  slowest answer seen in this login (`FOLLOW` times it): a server that answers
  slowly but answers is waited for; starting over would only repeat the work
  it has done (and make it do that work for other members later). `limit`
  still bounds the whole login. The next login starts with the patience the
  last one ended with (`login_patience`), so after a storm even the first
  answer of the next is waited for as long.

Failed logins in a row are still spaced by `evio.backoff.backoff_delay`.
"""

from __future__ import annotations

import random

SPREAD_PER_MEMBER = 0.025  # seconds of spread per member we know of: 1,000 members come back over 25 s
FOLLOW = 3.0  # patience after an answer: at least this many times the slowest answer of the login so far
LIMIT_FACTOR = 10.0  # a login ends after this many login timeouts whatever the server sends


def login_patience(login_timeout: float, failed_before: int, last_slowest: float) -> float:
    """How long a new login waits for each answer: `login_timeout`, longer after logins that failed (up to
    3x), and at least `FOLLOW` times the slowest answer of our last login (`last_slowest`): a server that
    took 25 s to answer during the last storm is given that again, from its first answer on."""
    return max(login_timeout * min(3, 1 + failed_before), FOLLOW * last_slowest)


def return_delay(rng: random.Random, last_login: float | None, members: int, base: float, cap: float) -> float:
    """Seconds before signing in again after a session that was up ended.

    `last_login`: the seconds that session's login took; `members`: how many members our roster lists
    (a restart brings all of them back with us)."""
    spread = min(cap, max(base, last_login or 0.0, members * SPREAD_PER_MEMBER))
    return rng.uniform(0.0, spread)


class LoginWatch:
    """When a login under way is given up (times in the caller's clock; the caller reports the server's answers)."""

    def __init__(self, now: float, patience: float, limit: float) -> None:
        if patience <= 0 or limit < patience:
            raise ValueError("a login watch needs 0 < patience <= limit")
        self.started = now
        self.patience = patience
        self.limit = limit
        self.last_heard = now
        self.slowest = 0.0  # the longest silence of the server so far in this login
        self.answers = 0

    def heard(self, now: float) -> None:
        """The server sent something (any stanza: stream features, a SASL step, a result)."""
        self.slowest = max(self.slowest, now - self.last_heard)
        self.last_heard = max(self.last_heard, now)
        self.answers += 1

    def deadline(self) -> float:
        waited = max(self.patience, FOLLOW * self.slowest)
        return min(self.started + self.limit, self.last_heard + waited)

    def expired(self, now: float) -> bool:
        return now >= self.deadline()
