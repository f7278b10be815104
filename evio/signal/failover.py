"""Several servers of one XMPP service: which one the next login goes to, and after how long (pure).

The servers are the nodes of one service (an ejabberd cluster: one domain, one
set of accounts and groups), in the order the config lists them
(docs/decisions/0051-several-xmpp-servers.md):

* A login goes to the current server. A login that fails (refused, TLS,
  timed out) moves on to the next at once, as long as this round of the list
  has servers not yet tried; once every server failed in a row, the rounds
  are spaced by `evio.backoff.backoff_delay`, as one server's attempts are.
* A session that was up and ended without our asking (the server dropped it,
  died, or stopped answering pings) moves on to the next too: that server is
  the likely cause. Coming back is spread as after any session
  (`evio.signal.pacing.return_delay`): the members of a cluster node that died
  arrive at the others spread out, not in one instant.
* A session we ended to log in again (a membership check) stays: the server is fine.
* No fail-back: a member stays on the server that works. Returning to the
  first would cost a login (a presence to every member) and buy nothing in a cluster.

With one server all of this is what the client did before: the backoff over
failed logins, the spread after a session.
"""

from __future__ import annotations

import random

from evio.backoff import backoff_delay
from evio.signal.pacing import return_delay

Endpoint = tuple[str, int]  # host, TCP port


class ServerRotation:
    def __init__(self, servers: tuple[Endpoint, ...]) -> None:
        if not servers:
            raise ValueError("at least one server is required")
        self.servers = servers
        self.index = 0
        self.failed = 0  # logins failed in a row, on any server
        self.moves = 0  # times the login moved to another server

    @property
    def current(self) -> Endpoint:
        return self.servers[self.index]

    def _next(self) -> None:
        if len(self.servers) > 1:
            self.index = (self.index + 1) % len(self.servers)
            self.moves += 1

    def login_failed(self, rng: random.Random, base: float, cap: float) -> float:
        """A login failed: move on; seconds to wait before the next (0 while this round has untried servers)."""
        self.failed += 1
        self._next()
        if self.failed % len(self.servers):
            return 0.0
        return backoff_delay(self.failed // len(self.servers), rng, base, cap)

    def session_ended(self, rng: random.Random, last_login: float | None, members: int, base: float, cap: float,
                      by_us: bool = False) -> float:  # fmt: skip
        """A session that was up ended (`by_us`: to log in again at once): seconds before the next login."""
        self.failed = 0
        if by_us:
            return 0.0
        self._next()
        return return_delay(rng, last_login, members, base, cap)
