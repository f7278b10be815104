"""What an aioice connection receives, and from whom: the gate every datagram passes first.

Anyone who knows a tunnel's UDP port can send it datagrams. Before aioice
sees one (aioice_patches, patch 7), the connection's ``InboundGate`` lets
through STUN only if it is the peer's (a request with our ufrag and our
password's MESSAGE-INTEGRITY, or an answer to our own transaction:
``stun_guard.screen``), rate-limited per source, and anything else (DTLS,
records) only from the peer: a remote candidate's address until a pair is
nominated, the nominated pair's address after. An off-path sender can thus
neither crash the receive callback, nor inject DTLS into the handshake, nor
get any answer (aioice answers any request, with an unsigned 400 or 401);
what it sends is counted.

A check that passes from an address that is no signalled candidate is the
peer's from a NAT mapping it could not know (RFC 8445 section 7.3.1.3): aioice
answers it, learns the address as a peer-reflexive candidate and sends it
checks, retransmitted. Whoever holds the ICE password (the peer, the XMPP
server that carried it) and can send from, or spoof, an address could aim the
node at it. So such a source passes only the peer's candidate filter
(candidates.py: ``candidate_filter``), and only while the connection has no
selected path, and a connection learns ``PRFLX_PER_CONNECTION`` at most; the
rest is dropped unanswered and counted with the dropped candidates
(``candidate_dropped``).
"""

from __future__ import annotations

import collections
import enum
import logging
import time
from collections.abc import Callable, Container
from typing import Any

import aioice
from aioice import Connection

from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate
from evio.tunnel.path.aioice_patches import intercept_datagrams
from evio.tunnel.path.candidates import CandidateDrop
from evio.tunnel.path.stun_guard import StunDrop, is_request, screen

logger = logging.getLogger(__name__)


class InboundReject(enum.Enum):
    """Why a datagram never reached an aioice connection."""

    FOREIGN_SOURCE = "foreign-source"
    """Not STUN, and not from the peer's address (DTLS or records injected by a third party)."""
    RECEIVER_FAILED = "receiver-failed"
    """aioice raised while taking the datagram (a bug, or input our checks missed)."""


_REJECT_LOG_INTERVAL = 10.0
STUN_REQUESTS_PER_SOURCE = Rate(per_second=20.0, burst=64)
"""Checks one source address may have answered on one connection: a peer's setup checks (a few pairs,
each retransmitted at 0.1 s doubling) stay within the burst."""
_STUN_SOURCES = 64  # sources one connection's limiter remembers (a peer has a few candidates)
PRFLX_PER_CONNECTION = 4
"""Peer-reflexive sources one connection learns: a peer behind a symmetric NAT has one mapping per socket
towards us (a host socket or two, IPv4 and IPv6), so 4 leaves room and bounds what a password holder adds."""


class InboundGate:
    """Stands in front of one connection's protocols: what aioice receives, and from whom.

    STUN (first byte 0-3) passes only what ``stun_guard.screen`` lets through:
    requests naming this connection's ufrag with its password's
    MESSAGE-INTEGRITY, at most ``STUN_REQUESTS_PER_SOURCE`` from one source, and
    responses to our own transactions; a stranger is answered nothing (aioice
    would answer any request with an unsigned 400 or 401). Anything else is accepted only from the
    selected pair's remote address once there is one; before, from an address
    that passed an authenticated check on that socket (``_checked``: the peer's
    first DTLS may come from a peer-reflexive address, or from a pair other
    than the one nominated here first), from a nominated pair's, or, before
    nomination, from a remote candidate's. Rejections are counted by reason and logged at most once per
    ``_REJECT_LOG_INTERVAL``.
    """

    def __init__(self, connection: Connection, label: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._connection = connection
        self._label = label
        self._clock = clock
        self._reject_log = LogLimiter[None](_REJECT_LOG_INTERVAL)
        self.selected: tuple[str, int] | None = None
        self.first_source: tuple[aioice.ice.StunProtocol, tuple[str, int]] | None = None
        """Where the first datagram that is not STUN came from (the controlled side follows it)."""
        self.rejected: collections.Counter[InboundReject | StunDrop] = collections.Counter()
        self._stun_sources = PeerRateLimiter[str](STUN_REQUESTS_PER_SOURCE, max_peers=_STUN_SOURCES)
        """Binding requests that passed ``screen``, per source address: a peer's checks need a few dozen
        at setup and one every ``CONSENT_INTERVAL`` after; a replayed check from a spoofed source no more."""
        self.candidate_filter: Callable[[str], CandidateDrop | None] | None = None
        """Why the peer's candidates at an address are not tried (the agent's ``candidate_drop``), for
        peer-reflexive sources; None: no filter (only the cap and the selected path hold)."""
        self.candidate_dropped: Callable[[CandidateDrop, str], None] | None = None
        """Where a peer-reflexive source turned away is counted (the agent's dropped candidates)."""
        self._prflx: set[tuple[str, int]] = set()
        """Peer-reflexive sources let through: aioice learned, or will learn, each as a candidate."""

    def guard(self, protocol: aioice.ice.StunProtocol) -> None:
        """Put the gate in front of ``protocol`` (aioice_patches.intercept_datagrams)."""
        intercept_datagrams(protocol, self, self.receive,
                            lambda addr: self._reject(InboundReject.RECEIVER_FAILED, addr, exc_info=True))

    def allows(self, addr: tuple[Any, ...], protocol: aioice.ice.StunProtocol | None = None) -> bool:
        source = (addr[0], addr[1])
        if self.selected is not None:
            return source == self.selected
        conn = self._connection
        if protocol is not None and self._checked(conn, protocol, source):
            return True
        nominated = [pair.remote_addr for pair in conn._nominated.values()]
        if nominated:
            return source in nominated
        return any((getattr(c, "_network_host", c.host), c.port) == source for c in conn.remote_candidates)

    @staticmethod
    def _checked(conn: Connection, protocol: aioice.ice.StunProtocol, source: tuple[str, int]) -> bool:
        """Has ``source`` proved on ``protocol`` that it is the peer? A pair whose check it answered, one
        it nominated with a check of its own, or a check of its own not yet handled (before ``connect``).
        Each of those is a STUN message aioice authenticated with the ICE password from the signaling;
        a peer-reflexive address (the peer's NAT mapping, learned from its check) passes only so."""
        for pair in conn._check_list:
            if pair.protocol is protocol and pair.remote_addr == source and (
                    pair.state is aioice.ice.CandidatePair.State.SUCCEEDED or pair.remote_nominated):
                return True
        return any(p is protocol and (a[0], a[1]) == source for _, a, p in conn._early_checks)

    def receive(self, inner: Callable[[bytes | str, tuple[Any, ...]], None], data: bytes | str, addr: tuple[Any, ...],
                protocol: aioice.ice.StunProtocol | None = None) -> None:
        if data and isinstance(data, bytes) and data[0] <= 3:
            drop = self._screen(data, addr, protocol)
            if drop is not None:
                self._reject(drop, addr)
                return
            if is_request(data):
                unlearned = self._peer_reflexive((addr[0], addr[1]))
                if unlearned is not None:
                    if self.candidate_dropped is not None:
                        self.candidate_dropped(unlearned, f"{addr[0]} port {addr[1]} (prflx)")
                    return
        elif data and isinstance(data, bytes):
            if not self.allows(addr, protocol):
                self._reject(InboundReject.FOREIGN_SOURCE, addr)
                return
            # The path the controlled side follows: a DTLS record (RFC 7983: 20-63) from a source an authenticated
            # check vouches for, never a datagram anyone could spoof from a signalled address (review21h H10).
            if (self.first_source is None and protocol is not None and 20 <= data[0] <= 63
                    and self._checked(self._connection, protocol, (addr[0], addr[1]))):  # fmt: skip
                self.first_source = (protocol, (addr[0], addr[1]))
        try:
            inner(data, addr)
        except Exception:  # noqa: BLE001 - nothing from the network may escape into the loop
            self._reject(InboundReject.RECEIVER_FAILED, addr, exc_info=True)

    def _screen(self, data: bytes, addr: tuple[Any, ...], protocol: aioice.ice.StunProtocol | None) -> StunDrop | None:
        """STUN is answered only for this connection's peer (stun_guard.screen), and not too often per source."""
        conn = self._connection
        pending: Container[bytes] = protocol.transactions if protocol is not None else ()
        drop = screen(data, conn.local_username, conn.local_password, pending)
        if drop is None and is_request(data) and not self._stun_sources.allow(addr[0], self._clock()):
            drop = StunDrop.RATE_LIMITED
        return drop

    def _peer_reflexive(self, source: tuple[str, int]) -> CandidateDrop | None:
        """None when an authenticated check from ``source`` may reach aioice, otherwise why it may not: a
        signalled candidate's address, or a peer-reflexive one already learned, always may; a new one only
        through the candidate filter, before the path is selected, and up to ``PRFLX_PER_CONNECTION``."""
        signalled = {(c._network_host, c.port): c.type for c in self._connection._remote_candidates}
        kind = signalled.get(source)
        if (kind is not None and kind != "prflx") or source in self._prflx:
            return None
        if self.candidate_filter is not None:
            drop = self.candidate_filter(source[0])
            if drop is not None:
                return drop
        if self.selected is not None:
            # Up: the path moves only by the tunnel's own rules (a new attempt, relay to direct), not here.
            return CandidateDrop.PRFLX_AFTER_UP
        # Sources learned before the peer's candidates were set (early checks) may since have been signalled.
        learned = sum(1 for s in self._prflx if signalled.get(s, "prflx") == "prflx")
        if learned >= PRFLX_PER_CONNECTION:
            return CandidateDrop.PRFLX_LIMIT
        self._prflx.add(source)
        return None

    def _reject(self, reason: InboundReject | StunDrop, addr: tuple[Any, ...], exc_info: bool = False) -> None:
        self.rejected[reason] += 1
        if self._reject_log.should_log(None, self._clock()):
            logger.info(
                "tunnel ice %s: datagram from %s dropped (%s; %d so far)",
                self._label, addr, reason.value, self.rejected[reason], exc_info=exc_info,
            )
