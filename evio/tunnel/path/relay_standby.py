"""A standby relayed path on a second TURN server, for failover without a new ICE round (decision 0057).

A relayed pair runs through TURN servers: this node's allocation, then the
peer's. With several servers configured, each tunnel allocates on every one
(servers.py) and, without more, ICE takes the first pair that answers: often
one that crosses two servers (ours on A, the peer's on B), which dies with
either. This module makes those allocations a standby instead of waste:

- **Tags.** A relayed candidate's foundation names its TURN server
  (``server_tag``: a hash of host:port as configured; an overlay's members
  share the list). RFC 8445 lets foundations differ per server; a peer that
  does not tag (an older release) leaves everything as before.
- **One server per pair** (``prune_crossing``). When the peer's tags are
  known and some pair has both ends on one server, pairs that cross two
  servers are not checked: every path then rests on one server, as it did
  with one TURN server configured.
- **The standby** (``choose_standby``): the pair on the first server (by tag)
  other than the primary's on which both ends allocated. Both ends compute
  the same one from the same tags, so each knows where the other will go.
- **Kept fresh** (``StandbyKeeper``): a Binding request on the standby pair
  every ``KEEP_EVERY`` seconds (and at once): the first answer shows the way
  open both ways and binds the channel; later ones keep its channel and
  permission fresh (aioice re-binds the channel when it is due, as it does
  for the primary's consent checks).

The tunnel (session.py) lets the data path read the standby beside the
primary; when the primary's TURN server is lost (its stream closed), it moves
sending there, and the peer's data path follows the first authenticated record
that arrives on its end of the standby. Allocations on servers that neither
path uses are released once the standby is chosen (``MAX_RELAYS`` a tunnel).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aioice
from aioice import Candidate, Connection
from aioice.ice import CandidatePair

logger = logging.getLogger(__name__)

TAG_PREFIX = "evt"
MAX_RELAYS = 2
"""Allocations a relayed tunnel keeps once it is up: its path's and its standby's."""
KEEP_EVERY = 60.0
"""Seconds between checks of the standby: well within a TURN permission's 5 minutes."""
CHECK_TRIES = 4
"""A check is sent this many times (aioice's retransmissions, 0.1 s apart and doubling) before it counts as failed."""


def server_tag(host: str, port: int) -> str:
    """The foundation of a relayed candidate from TURN server ``host:port`` (ICE characters, 15 of them)."""
    return TAG_PREFIX + hashlib.sha256(f"{host}:{port}".lower().encode()).hexdigest()[:12]


def tag_of(candidate: Candidate) -> str | None:
    """The TURN server tag of a relayed candidate, None when it carries none (another implementation)."""
    foundation = str(candidate.foundation)
    return foundation if candidate.type == "relay" and foundation.startswith(TAG_PREFIX) and len(foundation) == 15 else None


def same_server(pair: CandidatePair) -> bool:
    local = tag_of(pair.local_candidate)
    return local is not None and local == tag_of(pair.remote_candidate)


def prune_crossing(conn: Connection) -> int:
    """Leave out of ``conn``'s check list the pairs that cross two tagged servers, when at least one pair
    rests on one server (module doc); how many went."""
    pairs = list(conn._check_list)
    if not any(same_server(p) for p in pairs):
        return 0
    crossing = [p for p in pairs if tag_of(p.local_candidate) is not None and tag_of(p.remote_candidate) is not None
                and not same_server(p)]  # fmt: skip
    for pair in crossing:
        conn._check_list.remove(pair)
    return len(crossing)


def _pairs_on(conn: Connection, tag: str) -> CandidatePair | None:
    """The pair with both ends on server ``tag``: our protocol there and the peer's candidate there."""
    protocol = next((p for p in conn._protocols if p.local_candidate is not None and tag_of(p.local_candidate) == tag), None)
    remote = next((c for c in conn._remote_candidates if tag_of(c) == tag), None)
    if protocol is None or remote is None:
        return None
    found = next((p for p in conn._check_list if p.protocol is protocol and p.remote_addr == (remote.host, remote.port)), None)
    return found if found is not None else CandidatePair(protocol, remote)


def choose_standby(conn: Connection, primary: CandidatePair) -> CandidatePair | None:
    """The standby of ``primary`` (module doc), None without one: untagged, or no second server both ends reached."""
    used = {tag_of(primary.local_candidate), tag_of(primary.remote_candidate)}
    if None in used:
        return None
    local = {tag_of(p.local_candidate) for p in conn._protocols if p.local_candidate is not None}
    remote = {tag_of(c) for c in conn._remote_candidates}
    for tag in sorted(t for t in (local & remote) - used if t is not None):
        pair = _pairs_on(conn, tag)
        if pair is not None:
            return pair
    return None


def surplus_protocols(conn: Connection, keep: list[CandidatePair]) -> list[Any]:
    """``conn``'s relayed protocols that none of ``keep`` uses: their allocations are not needed."""
    kept = {id(p.protocol) for p in keep}
    return [p for p in conn._protocols if id(p) not in kept]


class StandbyKeeper:
    """Checks the standby pair now and every ``KEEP_EVERY`` seconds (module doc); ``ready`` once one was answered."""

    def __init__(self, conn: Connection, pair: CandidatePair, on_ready: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic, every: float = KEEP_EVERY) -> None:  # fmt: skip
        self.pair = pair
        self.ready = False
        self.checks = self.answered = 0
        self.last_answer: float | None = None
        self.rtt: float | None = None
        """The last answered check's round trip (retransmissions included): the relayed paths' order of magnitude."""
        self._conn = conn
        self._on_ready = on_ready
        self._clock = clock
        self._every = every
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tunnel-relay-standby")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def check(self) -> bool:
        """One Binding request on the standby pair, retransmitted a few times; True when answered."""
        conn, pair = self._conn, self.pair
        if conn.remote_password is None:
            return False
        self.checks += 1
        asked = self._clock()
        try:
            await pair.protocol.request(conn.build_request(pair, nominate=False), pair.remote_addr,
                                        integrity_key=conn.remote_password.encode("utf8"), retransmissions=CHECK_TRIES - 1)  # fmt: skip
        except (aioice.stun.TransactionError, ConnectionError, OSError) as exc:
            logger.info("tunnel relay standby %s -> %s: no answer (%s)", pair.local_addr, pair.remote_addr,
                        str(exc) or type(exc).__name__)  # fmt: skip
            return False
        self.answered += 1
        self.last_answer = self._clock()
        self.rtt = self.last_answer - asked
        return True

    async def _run(self) -> None:
        while True:
            if await self.check() and not self.ready:
                self.ready = True
                self._on_ready()
            # Until the first answer, again soon (the peer's end may not have been ready for ours yet).
            await asyncio.sleep(self._every if self.ready else min(1.0, self._every))
