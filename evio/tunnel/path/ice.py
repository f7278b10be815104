"""ICE with aioice, direct paths first.

Each side runs two aioice connections with separate credentials, both
gathered before the offer/answer exchange:

- ``direct``: host and server-reflexive candidates (STUN only);
- ``relay``: relayed candidates only (TURN, transport policy RELAY).

aioice uses aggressive nomination: the controlling agent keeps the first pair
that works, which is often the relay because the first direct probe is
dropped by the remote NAT before its own outbound probe opens the mapping. Keeping the two apart makes the
choice ours. Both run at once from the start, on both sides (docs/design.md,
"Relay first, then direct"). The controlling side (higher node id) is the DTLS
client and starts DTLS on the first connection that connects; the controlled
side takes whichever connection first both completes and delivers the
controlling side's first DTLS datagram. Both sides therefore always agree on
the first path. When that was the relay, the direct attempt goes on (``later``)
for ``direct_timeout`` seconds: once it connects, the tunnel moves its data
path there and lets the relay go.

aioice retransmits STUN requests after 0.5 s, doubling, and gives up after
about a minute. ``IceConfig.stun_rto`` lowers that first timeout (a dropped
first check then costs 0.1 s instead of 0.5 s) and the deadlines above bound
the whole attempt. A side's first check on a pair is usually dropped (by the
peer's NAT, or by the peer's TURN allocation that has no permission for us
yet) and aioice, as RFC 5245 had it, does not check again when the peer's
check arrives on a pair still in progress, so the controlled side waited out
its retransmission (up to 0.1 s, measured 78 ms) before it could take the
path. ``hasten_checks`` (aioice_patches.py) does what RFC 8445 section 7.3.1.4 asks instead: the
peer's authenticated check shows the way is open now, so the pending check
is sent again at once (the same transaction; at most once per check received).
aioice also paces checks one pair every 20 ms; our lists are a few pairs and
the one that works is rarely first, so they are all checked at once
(``check_at_once``).

Every datagram an aioice connection receives passes an ``InboundGate``
(inbound_gate.py) first (``_guard_connection``): STUN only if it is the peer's (a request with
our ufrag and our password's MESSAGE-INTEGRITY, or an answer to our own
transaction: ``stun_guard.screen``), rate-limited per source, then through
our checked parser; anything else (DTLS, records) is taken only from the
peer: a remote candidate's address until a pair is nominated, the nominated
pair's address after. An off-path sender can thus neither crash the receive
callback, nor inject DTLS into the handshake, nor get any answer (aioice
answers any request, with an unsigned 400 or 401); what it sends is counted.

The peer's candidates pass ``candidates.candidate_drop`` in ``set_remote``:
none at loopback, link-local, multicast, broadcast, this node's addresses,
the overlay's subnet or the deny list is tried; the gate applies the same
filter to a peer-reflexive source, with a cap, before aioice answers its check
(docs/design.md, "Candidates a node tries, and STUN it answers").

``IceConfig.exclude_networks`` (the overlays' own subnets) are left out
before gathering, not only from what is signalled: aioice binds a host
candidate, and asks STUN, on every local address, and a STUN answer for an
overlay address never comes back (no route to it behind the NAT), so
gathering would wait out aioice's 5 s per-address timeout on every tunnel.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aioice
from aioice import Candidate, Connection, TransportPolicy

from evio.config.model import NatTraversalConfig
from evio.tunnel.errors import GatherTimeout, IceFailed
from evio.tunnel.path.adopted_socket import AioiceUnderlay, adopt
from evio.tunnel.path.aioice_patches import check_at_once, configure_aioice, gathering, hasten_checks
from evio.tunnel.path.candidates import (
    CandidateDrop,
    CandidateDrops,
    CandidatePolicy,
    LocalNetworks,
    Network,
    candidate_drop,
    family_of,
    in_networks,
    local_networks,
)
from evio.tunnel.path.deadlines import MAX_PATIENCE, Lateness, LoopBudget
from evio.tunnel.path.inbound_gate import InboundGate, InboundReject
from evio.tunnel.path.offer_answer import IceParameters
from evio.tunnel.path.path_kind import PathKind
from evio.tunnel.path.relay_standby import StandbyKeeper, choose_standby, prune_crossing, surplus_protocols, tag_of
from evio.tunnel.path.servers import ServerGathering, ServerProblem, transport_of, turn_server_of
from evio.tunnel.path.stream_relay import StreamRelayUnderlay, adopt_stream, watch_stream
from evio.tunnel.path.stun_guard import StunDrop
from evio.tunnel.path.turn_credentials import TurnRelay

logger = logging.getLogger(__name__)


class RelayPolicy(enum.Enum):
    FALLBACK = "fallback"
    """Direct and relay at once; the relay carries traffic until direct connects, or for good."""
    NEVER = "never"
    ONLY = "only"
    """Always relay (tests, or when direct paths are known to be blocked)."""


@dataclass(frozen=True)
class IceConfig:
    stun: tuple[tuple[str, int], ...] = ()
    turn: tuple[TurnRelay, ...] = ()
    relay: RelayPolicy = RelayPolicy.FALLBACK
    direct_timeout: float = NatTraversalConfig.direct_timeout
    relay_timeout: float = 1.2
    move_grace: float = 2.0
    """After a move to the direct path, how long the relay is still read (records in flight, the
    peer until it follows) before its allocation is released; also how long the controlled side
    waits for the peer's first record on the direct path."""
    stun_rto: float = 0.1
    use_ipv4: bool = True
    use_ipv6: bool = False
    """The underlay families candidates are gathered and signalled in (nat_traversal.underlay_families,
    IPv6 only where the host has it: evio.node.plan); aioice pairs only candidates of one family."""
    exclude_networks: tuple[str, ...] = ()
    """Never gather, signal or try candidates in these networks (the overlays' own subnets)."""
    deny_candidates: tuple[str, ...] = NatTraversalConfig.deny_candidates
    """Never try a peer's candidates in these networks (nat_traversal.deny_candidates; candidates.py)."""
    candidate_drops: CandidateDrops | None = field(default=None, compare=False, repr=False)
    """Where dropped remote candidates are counted (the tunnel manager's, per overlay)."""
    gather_timeout: float = 3.0
    patience: float = 1.0
    """The direct and relay deadlines are multiplied by this (`evio.tunnel.path.deadlines`: it grows with load)."""


@dataclass
class SelectedPath:
    kind: PathKind
    connection: Connection
    local_type: str
    remote_type: str
    remote_addr: tuple[str, int]
    _protocol: aioice.ice.StunProtocol = field(repr=False)

    async def send(self, data: bytes) -> None:
        await self.connection.send(data)

    async def recv(self) -> bytes:
        return await self.connection.recv()

    gate: InboundGate | None = None
    transport: str = "udp"
    """How this node's end of the path travels: "udp", or "tcp" / "tls" to its TURN server."""

    def on_relay_lost(self, callback: Callable[[], None]) -> None:
        """``callback`` when this node's connection to the TURN server carrying the path is gone (TURN
        over TCP or TLS: the stream closed; the server died, say). Nothing for a path over UDP."""
        watch_stream(self._protocol, callback)

    def take_underlay(self) -> AioiceUnderlay | StreamRelayUnderlay:
        if self.transport != "udp":
            # TURN over a stream: records reach the data path's socket through a bridge (stream_relay.py).
            return adopt_stream(self._protocol, self.remote_addr)
        return adopt(self._protocol, self.remote_addr)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class IceAgent:
    """Both aioice connections of one tunnel attempt, and the path chosen between them."""

    def __init__(self, config: IceConfig, controlling: bool, user: str, now: float, lateness: Lateness | None = None,
                 peer: int | None = None) -> None:
        """``lateness``: told how late the loop woke while a deadline was waited out (`LoopLag.record`);
        ``peer``: whose candidates ``set_remote`` takes (for the log of those it drops)."""
        configure_aioice(config.stun_rto)
        self._config = config
        self._lateness = lateness
        self._peer = peer
        self.controlling = controlling
        self._excluded: list[Network] = [ipaddress.ip_network(n, strict=False) for n in config.exclude_networks]
        self._denied = tuple(ipaddress.ip_network(n, strict=False) for n in config.deny_candidates)
        self._versions = frozenset(v for v, used in ((4, config.use_ipv4), (6, config.use_ipv6)) if used)
        self.dropped_candidates: collections.Counter[CandidateDrop] = collections.Counter()
        self.direct: Connection | None = None
        self.relay: Connection | None = None
        # No server for aioice itself: every STUN and TURN server is asked by ``_servers`` (servers.py).
        self._servers = ServerGathering()
        self._user, self._now = user, now
        if config.relay is not RelayPolicy.ONLY:
            self.direct = Connection(ice_controlling=controlling, use_ipv4=config.use_ipv4, use_ipv6=config.use_ipv6)
        if config.turn and config.relay is not RelayPolicy.NEVER:
            self.relay = Connection(ice_controlling=controlling, transport_policy=TransportPolicy.RELAY,
                                    use_ipv4=config.use_ipv4, use_ipv6=config.use_ipv6)
        if self.direct is None and self.relay is None:
            raise IceFailed("no ICE connection possible: relay only, but no TURN server configured")
        for conn in (self.direct, self.relay):
            if conn is not None:
                hasten_checks(conn)
                check_at_once(conn)
        if self.relay is not None:
            _one_server_pairs(self.relay)
        self._standby: StandbyKeeper | None = None
        self._relay_rtt: float | None = None
        self.relay_failovers = 0
        self._closers: set[asyncio.Task[None]] = set()
        self._gates: dict[int, InboundGate] = {}
        self._filter: tuple[CandidatePolicy, LocalNetworks] | None = None
        """How the peer's candidates are judged (``_candidate_filter``): set by ``set_remote``, or by the
        first peer-reflexive source that comes before it."""
        # One connect() per connection (aioice's may run only once), shared by whoever waits on it.
        self._connects: dict[int, asyncio.Task[None]] = {}
        self._later: asyncio.Task[None] | None = None
        self._queries: list[asyncio.Task[Any]] = []  # aioice's STUN and TURN queries of our gathering

    async def gather(self, stretch: float = 1.0, most: float | None = None) -> tuple[IceParameters | None, IceParameters | None]:
        """Gather both connections' candidates; returns (direct, relay) parameters to signal.

        ``stretch`` scales the deadline: on a host whose loops run late the STUN and TURN answers
        are late too (the tunnel's patience factor), and it is counted in the time the loop ran
        (`LoopBudget`), at most ``most`` seconds (default `MAX_PATIENCE` times the base)."""
        base = self._config.gather_timeout
        timeout = base * max(stretch, 1.0)
        budget = self._budget(timeout, base * MAX_PATIENCE if most is None else most)
        conns = [c for c in (self.direct, self.relay) if c is not None]
        # The gathering tasks copy the context as they are created: they see this agent's exclusions.
        with gathering(tuple(self._excluded), self._queries):
            gathered = asyncio.ensure_future(self._gather_all())
        try:
            await budget.run(gathered)
        except TimeoutError:
            # Servers that did not answer in time are reported by name (servers.py) and left out;
            # what the others gave is used.
            self._abandon_queries()
            if not any(c.local_candidates for c in conns):
                raise GatherTimeout(
                    f"ICE candidates not gathered within {timeout:g} s"
                    + (f" and {budget.lost:.2f} s the loop ran late" if budget.lost >= 0.01 else "") + " "
                    "(a STUN or TURN server that does not answer?)"
                ) from None
        self._queries.clear()  # the outcome of every one is known: done, or cancelled
        if self.relay is not None and not self.relay.local_candidates:
            logger.warning("tunnel relay candidate gathering failed: no TURN server allocated (%s)",
                           "; ".join(f"{p.server} {p.kind}: {p.reason}" for p in self._servers.problems if p.kind != "stun") or "?")
        for conn in conns:
            self._guard_connection(conn)
        return self._parameters(self.direct), self._parameters(self.relay)

    async def _gather_all(self) -> None:
        """Host candidates (aioice, no server), then every STUN and TURN server at once (servers.py)."""
        if self.direct is not None:
            await self.direct.gather_candidates()
        if self.relay is not None:
            # Its candidates all come from ``_servers``: aioice's gathering has nothing to do.
            self.relay._local_candidates_start = self.relay._local_candidates_end = True

        def credentials(server: TurnRelay) -> tuple[str, str]:
            creds = server.credentials(self._user, self._now)
            return creds.username, creds.password

        await self._servers.gather(self.direct, self._config.stun, self.relay, self._config.turn, credentials)

    @property
    def server_problems(self) -> list[ServerProblem]:
        """The STUN and TURN servers that gave no candidate in this attempt, and why."""
        return list(self._servers.problems)

    def _parameters(self, conn: Connection | None) -> IceParameters | None:
        if conn is None or not conn.local_candidates:
            return None
        # A TURN server may relay in a family this overlay does not use (coturn allocates by the client's
        # family or its default): such a relayed candidate is not signalled.
        cands = tuple("candidate:" + c.to_sdp() for c in conn.local_candidates
                      if not self._is_excluded(c.host) and family_of(c.host) in self._versions)
        return IceParameters(conn.local_username, conn.local_password, cands)

    async def set_remote(self, direct: IceParameters | None, relay: IceParameters | None) -> None:
        """Hand the peer's parameters to the matching connection; unmatched connections are closed.

        Candidates this node must not send to (candidates.py: loopback, link-local, the overlay's
        subnet, the deny list, ...) are left out, counted and logged."""
        policy, local = self._filter = self._candidate_filter()
        for conn, params in ((self.direct, direct), (self.relay, relay)):
            if conn is None:
                continue
            if params is None or not conn.local_candidates:
                self._drop(conn)
                continue
            conn.remote_username = params.ufrag
            conn.remote_password = params.pwd
            for cand in params.parsed_candidates():
                drop = candidate_drop(cand.host, conn is self.relay, policy, local)
                if drop is not None:
                    self._candidate_dropped(drop, f"{cand.host} port {cand.port} ({cand.type})")
                    continue
                await conn.add_remote_candidate(cand)
            await conn.add_remote_candidate(None)
        if self.direct is None and self.relay is None:
            raise IceFailed("no usable ICE parameters in common with the peer")

    async def select_controlling(self) -> SelectedPath:
        """Direct (for ``direct_timeout``) and relay (for ``relay_timeout``, each times ``patience``) at
        once: the first that connects, direct if both have. A direct attempt still running is left to ``later``."""
        attempts: dict[asyncio.Task[None], Connection] = {}
        c = self._config
        for conn, timeout in ((self.direct, c.direct_timeout * c.patience), (self.relay, c.relay_timeout * c.patience)):
            if conn is not None:
                budget = self._budget(timeout, timeout / c.patience * MAX_PATIENCE)
                attempts[asyncio.create_task(budget.run(self._connecting(conn)))] = conn
        chosen: Connection | None = None
        pending = set(attempts)
        try:
            while pending and chosen is None:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: attempts[t] is not self.direct):
                    conn = attempts[task]
                    if task.exception() is None:
                        chosen = chosen or conn
                        continue
                    logger.info("tunnel ice %s attempt failed: %s", self._kind(conn).value, task.exception() or "timeout")
                    self._drop(conn)
        except BaseException:
            for task in attempts:
                task.cancel()
            await asyncio.gather(*attempts, return_exceptions=True)
            raise
        for task in pending:
            conn = attempts[task]
            if chosen is self.relay and conn is self.direct:
                self._later = task
            else:
                task.cancel()
                self._drop(conn)
        if chosen is None:
            raise IceFailed("no candidate pair worked, direct or relayed")
        return self._select(chosen)

    async def select_controlled(self) -> tuple[SelectedPath, bytes]:
        """Follow the controlling side: the path on which its first DTLS datagram arrives."""
        c = self._config
        # The controlling side's patience is not signalled: allow for the most it may take.
        deadline = max(c.direct_timeout, c.relay_timeout) * max(c.patience, MAX_PATIENCE) + 2.0
        # Counted in loop time too: the answer's way to the controlling side (signaling) is slow on a
        # loaded host as well, and this wait started when the answer left.
        budget = self._budget(deadline, 2 * deadline)
        attempts: dict[asyncio.Future[Any], Connection] = {asyncio.create_task(self._await_first_dtls(conn)): conn for conn in (self.direct, self.relay) if conn is not None}
        try:
            pending: set[asyncio.Future[Any]] = set(attempts)
            while pending:
                done, pending = await budget.first(pending)
                if not done:
                    break
                for task in done:
                    if task.exception() is None:
                        chosen = attempts[task]
                        direct = self.direct
                        if chosen is self.relay and direct is not None:
                            # The direct attempt goes on: the controlling side moves there when it connects.
                            patience = max(self._config.patience, MAX_PATIENCE)
                            self._later = asyncio.create_task(
                                self._budget(self._config.direct_timeout * patience + 1.0).run(self._connecting(direct)))
                        return self._select(chosen), task.result()
            raise IceFailed("the controlling side did not start DTLS on any path in time")
        finally:
            for task in attempts:
                task.cancel()
            await asyncio.gather(*attempts, return_exceptions=True)

    async def later(self) -> SelectedPath | None:
        """The direct path, when the relay was taken first and direct connects after all; None when
        it does not (or was never left to try). Either way the attempt is over when this returns."""
        task, self._later = self._later, None
        direct = self.direct
        if task is None or direct is None:
            return None
        try:
            await task
        except (TimeoutError, ConnectionError) as exc:
            logger.info("tunnel ice direct attempt (after the relay) failed: %s", str(exc) or type(exc).__name__)
            self._drop(direct)
            return None
        finally:
            task.cancel()
        if self.direct is not direct:
            return None
        return self._path_of(direct)

    def release(self, path: SelectedPath) -> None:
        """A path the tunnel has moved away from: close its connection (the TURN allocation goes)."""
        if path.connection is self.direct or path.connection is self.relay:
            self._drop(path.connection)

    # -- a standby relayed path on another TURN server (relay_standby.py, decision 0057) --------------

    def arm_standby(self, path: SelectedPath, on_ready: Callable[[SelectedPath], None]) -> bool:
        """Choose the standby of relayed ``path``, release the allocations neither uses, and check the
        standby until it answers: then ``on_ready(standby)``. False without a standby (untagged peer, one server)."""
        conn = self.relay
        primary = conn._nominated.get(1) if conn is not None else None
        if conn is None or primary is None or path.connection is not conn or self._standby is not None:
            return False
        pair = choose_standby(conn, primary)
        surplus = surplus_protocols(conn, [primary] if pair is None else [primary, pair])
        for protocol in surplus:
            self._release_protocol(conn, protocol)
        if pair is None:
            return False
        if pair not in conn._check_list:
            conn._check_list.append(pair)
        self._guard_connection(conn)
        keeper = self._standby = StandbyKeeper(conn, pair, lambda: on_ready(self._relay_path(conn, pair)))
        keeper.start()
        logger.info("tunnel ice relay standby %s -> %s (server %s); %d allocation(s) released", pair.local_addr, pair.remote_addr,
                    tag_of(pair.local_candidate), len(surplus))  # fmt: skip
        return True

    def switch_to_standby(self, standby: SelectedPath) -> None:
        """The data path now runs on ``standby``: aioice's consent checks and the gate follow it."""
        conn = standby.connection
        keeper, self._standby = self._standby, None
        if keeper is not None:
            self._relay_rtt = keeper.rtt  # the path's order of magnitude still, for a doubt's deadline
            closer = asyncio.create_task(keeper.stop())
            self._closers.add(closer)
            closer.add_done_callback(self._closers.discard)
        pair = next((p for p in conn._check_list if p.protocol is standby._protocol and p.remote_addr == standby.remote_addr), None)
        if pair is not None:
            conn._nominated[pair.component] = pair
        if standby.gate is not None:
            standby.gate.selected = standby.remote_addr
        self.relay_failovers += 1

    def release_relayed(self, old: SelectedPath) -> None:
        """A relayed path the tunnel failed over from, no longer read: its allocation goes (``release`` would
        close the whole relay connection, the standby's too)."""
        conn = old.connection
        if conn is self.relay and conn._nominated and all(p.protocol is not old._protocol for p in conn._nominated.values()):
            self._release_protocol(conn, old._protocol)

    def standby_rtt(self) -> float | None:
        """The standby's last check's round trip, None before one was answered."""
        return self._standby.rtt if self._standby is not None else self._relay_rtt

    def relay_status(self) -> dict[str, Any] | None:
        """The relay connection's allocations, its standby and the failovers so far; None without a relay."""
        if self.relay is None:
            return None
        keeper = self._standby
        standby = None if keeper is None else "ready" if keeper.ready else "checking"
        primary = self.relay._nominated.get(1)
        return {"allocations": len(self.relay._protocols), "server": turn_server_of(primary.protocol) if primary else None,
                "standby": standby, "standby_server": turn_server_of(keeper.pair.protocol) if keeper else None,
                "failovers": self.relay_failovers}  # fmt: skip

    def _relay_path(self, conn: Connection, pair: Any) -> SelectedPath:
        return SelectedPath(PathKind.RELAY, conn, pair.local_candidate.type, pair.remote_candidate.type, pair.remote_addr,
                            pair.protocol, self._guard_connection(conn), transport_of(pair.protocol))  # fmt: skip

    def _release_protocol(self, conn: Connection, protocol: Any) -> None:
        """One allocation of ``conn`` that no path uses: out of its lists, deleted on the server in the background."""
        if protocol in conn._protocols:
            conn._protocols.remove(protocol)
        conn._check_list[:] = [p for p in conn._check_list if p.protocol is not protocol]
        closer = asyncio.create_task(protocol.close())
        self._closers.add(closer)
        closer.add_done_callback(self._closers.discard)

    def rejected(self) -> collections.Counter[InboundReject | StunDrop]:
        """Datagrams the gates turned away, over both connections."""
        total: collections.Counter[InboundReject | StunDrop] = collections.Counter()
        for gate in self._gates.values():
            total.update(gate.rejected)
        return total

    def _abandon_queries(self) -> None:
        """Our gathering ended without aioice: cancel its queries still running; a TURN allocation one
        finished meanwhile, whose candidate no connection took, is closed."""
        taken = {id(p) for c in (self.direct, self.relay) if c is not None for p in c._protocols}
        for task in self._queries:
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is None:
                _, protocol = task.result()
                if protocol is not None and id(protocol) not in taken:
                    closer = asyncio.create_task(protocol.close())
                    self._closers.add(closer)
                    closer.add_done_callback(self._closers.discard)

    async def close(self) -> None:
        keeper, self._standby = self._standby, None
        if keeper is not None:
            await keeper.stop()
        self._abandon_queries()
        queries, self._queries = self._queries, []
        if queries:
            await asyncio.gather(*queries, return_exceptions=True)
        if self._later is not None:
            self._later.cancel()
            await asyncio.gather(self._later, return_exceptions=True)
            self._later = None
        conns = [c for c in (self.direct, self.relay) if c is not None]
        self.direct = self.relay = None
        connects = list(self._connects.values())
        self._connects.clear()
        for task in connects:
            task.cancel()
        await asyncio.gather(*(c.close() for c in conns), *connects, return_exceptions=True)
        await self._servers.close()
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)

    # -- internals -----------------------------------------------------------------

    def _budget(self, seconds: float, most: float | None = None) -> LoopBudget:
        return LoopBudget(seconds, most, lateness=self._lateness)

    def _connecting(self, conn: Connection) -> asyncio.Future[None]:
        """``conn.connect()``, started once; waiters cancelled do not cancel it (``_drop`` ends it)."""
        task = self._connects.get(id(conn))
        if task is None:
            task = self._connects[id(conn)] = asyncio.create_task(conn.connect())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # observed by its waiters
        return asyncio.shield(task)

    async def _await_first_dtls(self, conn: Connection) -> bytes:
        await self._connecting(conn)
        self._guard_connection(conn)  # protocols made after gathering (none expected; cheap to be sure)
        while True:
            data = await conn.recv()
            if data and 20 <= data[0] <= 63:
                return data

    def _kind(self, conn: Connection) -> PathKind:
        return PathKind.DIRECT if conn is self.direct else PathKind.RELAY

    def _select(self, conn: Connection) -> SelectedPath:
        kind = self._kind(conn)
        other = self.relay if kind is PathKind.DIRECT else self.direct
        if other is not None and self._later is None:
            self._drop(other)
        return self._path_of(conn)

    def _path_of(self, conn: Connection) -> SelectedPath:
        kind = self._kind(conn)
        pair = conn._nominated[1]  # aioice keeps the selected pair only here
        gate = self._guard_connection(conn)
        if not self.controlling and gate.first_source is not None:
            # The controlled side answers where the controlling side's DTLS came from: with aggressive
            # nomination that pair may not be the one nominated here first, and an answer from another
            # socket or to another address would be dropped by the controlling side's gate.
            protocol, source = gate.first_source
            followed = next((p for p in conn._check_list if p.protocol is protocol and p.remote_addr == source), None)
            if followed is not None and followed is not pair:
                logger.info("tunnel ice %s: following the peer's DTLS to %s (nominated here: %s)", kind.value, source, pair.remote_addr)
                conn._nominated[followed.component] = followed  # where aioice sends, and checks consent
                pair = followed
        gate.selected = (pair.remote_addr[0], pair.remote_addr[1])
        path = SelectedPath(
            kind,
            conn,
            pair.local_candidate.type,
            pair.remote_candidate.type,
            pair.remote_addr,
            pair.protocol,
            gate,
            transport_of(pair.protocol),
        )
        logger.info("tunnel ice selected %s path %s -> %s %s over %s", kind.value, path.local_type, path.remote_type,
                    path.remote_addr, path.transport)
        return path

    def _drop(self, conn: Connection) -> None:
        """Close a connection we will not use, in the background (TURN deallocation takes a round trip)."""
        if conn is self.direct:
            self.direct = None
        if conn is self.relay:
            self.relay = None
        connecting = self._connects.pop(id(conn), None)
        if connecting is not None:
            connecting.cancel()
        task = asyncio.create_task(conn.close())
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    def _guard_connection(self, conn: Connection) -> InboundGate:
        gate = self._gates.get(id(conn))
        if gate is None:
            gate = self._gates[id(conn)] = InboundGate(conn, "direct" if conn is self.direct else "relay")
            gate.candidate_filter = functools.partial(self._peer_reflexive_drop, conn is self.relay)
            gate.candidate_dropped = self._candidate_dropped
        for protocol in conn._protocols:
            gate.guard(protocol)
        return gate

    def _candidate_filter(self) -> tuple[CandidatePolicy, LocalNetworks]:
        """What ``candidate_drop`` judges the peer's candidates by now (this host's addresses change)."""
        # An agent whose every candidate is loopback (aioice never gathers 127.0.0.1, and a TURN server's
        # relayed address is never loopback) runs on one host with its peers: unit tests, not a node.
        ours = [c.host for conn in (self.direct, self.relay) if conn is not None for c in conn.local_candidates]
        one_host = bool(ours) and all(_is_loopback(host) for host in ours)
        return CandidatePolicy(self._denied, tuple(self._excluded), allow_local=one_host), local_networks()

    def _peer_reflexive_drop(self, relayed: bool, host: str) -> CandidateDrop | None:
        """``candidate_drop`` for the source of a peer's check that is no signalled candidate (inbound_gate.py)."""
        if self._filter is None:
            self._filter = self._candidate_filter()
        return candidate_drop(host, relayed, *self._filter)

    def _candidate_dropped(self, reason: CandidateDrop, candidate: str) -> None:
        self.dropped_candidates[reason] += 1
        sink = self._config.candidate_drops
        if sink is not None:
            sink.dropped(self._peer, reason, candidate)

    def _is_excluded(self, host: str) -> bool:
        return in_networks(host, self._excluded)


def _one_server_pairs(conn: Connection) -> None:
    """``conn`` pairs its relayed candidates only on one TURN server when it can (relay_standby.prune_crossing):
    aioice sorts its check list after each pairing, and pruning follows."""
    sort = conn.sort_check_list

    def sort_check_list() -> None:
        sort()
        prune_crossing(conn)

    conn.sort_check_list = sort_check_list  # type: ignore[method-assign]


def candidate_types(params: IceParameters | None) -> list[str]:
    return [c.type for c in params.parsed_candidates()] if params else []


__all__ = [
    "Candidate", "IceAgent", "IceConfig", "PathKind", "RelayPolicy",
    "SelectedPath", "TurnRelay", "candidate_types",
]
