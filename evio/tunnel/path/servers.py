"""Candidates from every STUN and TURN server, over UDP, TCP or TLS (decision 0049).

aioice asks one STUN server and one TURN server per connection, over one
transport, and waits up to 5 s for both. An ``IceAgent`` gathers instead:

    1. host      aioice's own gathering, with no server (no waiting);
    2. srflx     ``reflexive``: every host socket asks every STUN server at
                 once; identical mappings (an endpoint-independent NAT seen by
                 two servers) are one candidate;
    3. relay     ``_allocate``: every TURN server at once, each over its
                 transports in turn (``attempts``): with ``transport: auto``,
                 UDP first; when UDP has no allocation within ``STREAM_AFTER``
                 (a site that drops UDP) TCP on the same port joins, then TLS on
                 ``tls_port``, the first allocation taken (happy eyeballs); a
                 transport that fails outright lets the next start at once.
                 Each server that allocates adds a relayed candidate to the one
                 relay connection (its ufrag and password stay one, so the
                 offer's format does not change); ICE takes the first that works.

Every query has the gathering's deadline and no more: a server that does not
answer, refuses (401, 403, 486), answers garbage (aioice's parser is guarded:
the transaction just times out) or fails TLS (a wrong name) is reported by
name with the reason (``ServerProblem``, logged once a minute per server and
reason) and skipped; it never holds up the others. ``RelayMemory`` keeps,
per TURN server, the transport that last allocated, so on a site that drops
UDP the next tunnels start with TCP instead of waiting ``STREAM_AFTER`` again.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aioice
from aioice import Candidate, Connection

from evio.ratelimit import LogLimiter
from evio.tunnel.path.relay_standby import server_tag
from evio.tunnel.path.turn_credentials import TurnRelay

logger = logging.getLogger(__name__)

STREAM_AFTER = 0.5
"""Seconds a transport has to allocate before the next one (UDP, then TCP, then TLS) starts too.

A reachable TURN server allocates in a round trip or two (1-3 ms in the lab); 0.5 s also covers
a lost first request and its 0.1 s retransmission on a slow path."""
GRACE = 0.3
"""Seconds the other servers have, at least, once one has answered (as long again as it took, if longer)."""
PROBLEM_LOG_INTERVAL = 60.0


@dataclass(frozen=True)
class ServerProblem:
    """A STUN or TURN server that gave no candidate in a gathering, and why."""

    server: str
    """host:port as configured"""
    kind: str
    """"stun", or "turn/udp", "turn/tcp", "turn/tls\""""
    reason: str


@dataclass(frozen=True)
class Attempt:
    """One way to reach a TURN server."""

    transport: str
    """"udp", "tcp" or "tls"."""
    address: tuple[str, int]


def attempts(server: TurnRelay, first: str | None = None) -> list[Attempt]:
    """The ways to try ``server``, in order; ``first``: the transport that last allocated there, tried first."""
    address = (server.host, server.port)
    every = {"udp": Attempt("udp", address), "tcp": Attempt("tcp", address), "tls": Attempt("tls", (server.host, server.tls_port))}
    if server.transport != "auto":
        return [every[server.transport]]
    order = ["udp", "tcp", "tls"]
    if first in order:
        order.remove(first)
        order.insert(0, first)
    return [every[t] for t in order]


def parse_turn_uri(text: str) -> tuple[str, int, str]:
    """(host, port, transport) of a TURN URI (RFC 7065: "turn:HOST[:PORT][?transport=udp|tcp]", "turns:HOST[:PORT]",
    TLS) or of a plain "HOST:PORT" (transport auto). ValueError names what is wrong."""
    from evio.config.model import split_host_port

    scheme, _, rest = text.partition(":") if text.startswith(("turn:", "turns:")) else ("", "", text)
    rest, _, query = rest.partition("?")
    transport = "tls" if scheme == "turns" else "auto" if not scheme else "udp"
    if query:
        key, _, value = query.partition("=")
        if key != "transport" or value not in ("udp", "tcp") or (scheme == "turns" and value == "udp"):
            raise ValueError(f"{text!r}: the query may only be ?transport=udp or tcp (tcp for turns:)")
        if scheme == "turn":
            transport = value
    has_port = "]:" in rest if rest.startswith("[") else rest.count(":") == 1
    if scheme and not has_port:
        rest = f"{rest}:{5349 if scheme == 'turns' else 3478}"
    host, port = split_host_port(rest)
    return host, port, transport


def server_name(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RelayMemory:
    """Per TURN server, the transport that allocated last; for a server not seen yet, the one that
    allocated last anywhere (a site that drops UDP drops it to every server). Process-wide: ``RELAY_MEMORY``."""

    def __init__(self, most: int = 256) -> None:
        self._worked: dict[tuple[str, int], str] = {}
        self._last: str | None = None
        self._most = most

    def first(self, server: TurnRelay) -> str | None:
        return self._worked.get((server.host, server.port), self._last)

    def worked(self, server: TurnRelay, transport: str) -> None:
        key = (server.host, server.port)
        if key not in self._worked and len(self._worked) >= self._most:
            self._worked.pop(next(iter(self._worked)))
        self._worked[key] = transport
        self._last = transport


RELAY_MEMORY = RelayMemory()
_problem_log = LogLimiter[tuple[str, str, str]](PROBLEM_LOG_INTERVAL)


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Verifies the TURN server's certificate and its name (the host in ``server``)."""
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def describe(exc: BaseException) -> str:
    """One line for a failed query: what the server (or the way to it) said."""
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | aioice.stun.TransactionTimeout):
        return "no answer"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not accepted: {exc.verify_message or exc}"
    if isinstance(exc, KeyError):
        return f"answer without {exc.args[0] if exc.args else 'a needed attribute'}"
    text = str(exc) or type(exc).__name__
    return text if not isinstance(exc, OSError) or exc.strerror is None else exc.strerror


class ServerGathering:
    """The server-dependent candidates of one tunnel attempt (module doc): queries, problems, cleanup."""

    def __init__(self, memory: RelayMemory = RELAY_MEMORY, clock: Callable[[], float] = time.monotonic) -> None:
        self.problems: list[ServerProblem] = []
        self._memory = memory
        self._clock = clock
        self._spares: list[Any] = []  # allocations made after their server's first: closed
        self._stun_queries: dict[asyncio.Task[Any], tuple[str, int]] = {}
        self._first_at: float | None = None
        self._first = asyncio.Event()

    async def gather(self, direct: Connection | None, stun: Sequence[tuple[str, int]], relay: Connection | None,
                     turn: Sequence[TurnRelay], credentials: Callable[[TurnRelay], tuple[str, str]]) -> None:
        """Every server at once (module doc); once one has answered, the others have as long again
        (``GRACE`` at least), then are cut off and reported. The caller's deadline bounds it all."""
        start = self._clock()
        tasks: set[asyncio.Task[None]] = set()
        if direct is not None and stun:
            tasks.add(asyncio.create_task(self.reflexive(direct, stun)))
        if relay is not None:
            tasks.update(asyncio.create_task(self._allocate(relay, server, credentials)) for server in turn)
        waiter = asyncio.create_task(self._first.wait())
        pending: set[asyncio.Task[Any]] = set(tasks)
        try:
            while pending:
                if self._first_at is None:
                    done, _ = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
                    pending -= done
                    continue
                first = self._first_at - start
                left = self._first_at + max(GRACE, first) - self._clock()
                done, pending = await asyncio.wait(pending, timeout=max(left, 0.0), return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break
        finally:
            waiter.cancel()
            for task in pending:
                task.cancel()
            await asyncio.gather(waiter, *pending, return_exceptions=True)
            self.unanswered()

    def _answered(self) -> None:
        if self._first_at is None:
            self._first_at = self._clock()
            self._first.set()

    def report(self, server: str, kind: str, reason: str) -> None:
        problem = ServerProblem(server, kind, reason)
        self.problems.append(problem)
        if _problem_log.should_log((server, kind, reason), self._clock()):
            logger.warning("tunnel ice: %s server %s gave no candidate: %s", kind, server, reason)

    # -- 2. server-reflexive --------------------------------------------------------

    async def reflexive(self, conn: Connection, servers: Sequence[tuple[str, int]]) -> None:
        """Ask every STUN server from every host socket of ``conn``, IPv4 and IPv6 (each server resolved in the
        asking socket's family: aioice_patches 3); add the mappings as candidates. An IPv6 mapping that is the
        host's own address (no NAT66 or NPTv6 on the way, the usual case) adds nothing.

        Runs until every query is answered or failed: the caller's deadline cancels the rest (``unanswered``)."""
        protocols = [p for p in conn._protocols if p.local_candidate is not None and p.local_candidate.type == "host"]

        async def ask(protocol: Any, server: tuple[str, int]) -> tuple[Candidate, Candidate]:
            # Through aioice's module: its query observer (aioice_patches 3) and any later patch apply.
            candidate, _ = await aioice.ice.server_reflexive_candidate(protocol, server)
            return candidate, protocol.local_candidate

        queries: dict[asyncio.Task[Any], tuple[str, int]] = {}
        for server in servers:
            for protocol in protocols:
                queries[asyncio.create_task(ask(protocol, server))] = server
        self._stun_queries = queries
        for task in asyncio.as_completed(list(queries)):
            try:
                candidate, host = await task
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reported below, by server, once all are in
                continue
            self._answered()
            if ":" in host.host and (candidate.host, candidate.port) == (host.host, host.port):
                continue
            _add_candidate(conn, candidate)
        self._report_stun(queries)

    def unanswered(self) -> None:
        """Gathering is over: the STUN queries still running are cancelled and reported."""
        self._report_stun(self._stun_queries, cancel=True)

    def _report_stun(self, queries: dict[asyncio.Task[Any], tuple[str, int]], cancel: bool = False) -> None:
        failed: dict[tuple[str, int], str] = {}
        answered: set[tuple[str, int]] = set()
        for task, server in queries.items():
            if not task.done():
                if cancel:
                    task.cancel()
                    failed.setdefault(server, "no answer in time")
                continue
            if task.cancelled():
                failed.setdefault(server, "no answer in time")
            elif task.exception() is not None:
                failed.setdefault(server, describe(task.exception()))  # type: ignore[arg-type]
            else:
                answered.add(server)
        for server, reason in failed.items():
            if server not in answered:
                self.report(server_name(*server), "stun", reason)
        queries.clear()

    # -- 3. relayed -------------------------------------------------------------------

    async def _allocate(self, conn: Connection, server: TurnRelay, credentials: Callable[[TurnRelay], tuple[str, str]]) -> None:
        name = server_name(server.host, server.port)
        try:
            username, password = credentials(server)
        except ValueError as exc:
            self.report(name, "turn", str(exc))
            return
        ways = attempts(server, self._memory.first(server))
        running: dict[asyncio.Task[Any], Attempt] = {}
        tried: list[str] = []
        taken = False
        try:
            while ways or running:
                if ways:
                    way = ways.pop(0)
                    tried.append(way.transport)
                    running[asyncio.create_task(self._relay_query(conn, way, username, password, server.ca_file))] = way
                done, _ = await asyncio.wait(running, timeout=STREAM_AFTER if ways else None, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    continue  # no allocation yet: the next transport joins
                for task in done:
                    way = running.pop(task)
                    failure = task.exception()
                    if failure is not None:
                        self.report(name, f"turn/{way.transport}", describe(failure))
                        continue
                    candidate, protocol = task.result()
                    if taken:
                        self._spare(protocol)
                        continue
                    taken = True
                    _bound_deallocation(protocol)
                    # Its foundation names the server: both ends then know which pairs rest on one (relay_standby.py).
                    candidate.foundation = server_tag(server.host, server.port)
                    _add_candidate(conn, candidate, protocol)
                    self._answered()
                    self._memory.worked(server, way.transport)
                    passed = [w.transport for w in running.values()] + [w for w in tried if w != way.transport]
                    if passed and _problem_log.should_log((name, way.transport, "allocated"), self._clock()):
                        # Worth a line: this site does not reach the server the first way (UDP blocked, say).
                        logger.info("tunnel ice: TURN server %s allocated over %s (%s: no allocation first)",
                                    name, way.transport, ", ".join(dict.fromkeys(passed)))
                if taken:
                    return
        finally:
            for task, way in running.items():
                task.cancel()
                if not taken:
                    self.report(name, f"turn/{way.transport}", "no allocation in time")
            if running:
                outcomes = await asyncio.gather(*running, return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, tuple):
                        self._spare(outcome[1])

    async def _relay_query(self, conn: Connection, way: Attempt, username: str, password: str, ca_file: str | None) -> tuple[Candidate, Any]:
        # Through aioice's module: its query observer (aioice_patches 3) owns the task, and an
        # allocation that completes after the gathering was abandoned is closed by the agent.
        return await aioice.ice.relayed_candidate(
            component=1,
            hide_related_address=True,
            protocol_factory=lambda: aioice.ice.StunProtocol(conn),
            turn_server=way.address,
            turn_username=username,
            turn_password=password,
            turn_ssl=tls_context(ca_file) if way.transport == "tls" else False,  # type: ignore[arg-type]
            turn_transport="udp" if way.transport == "udp" else "tcp",
        )

    def _spare(self, protocol: Any) -> None:
        """An allocation no candidate took (a second transport of the same server): released."""
        task = asyncio.ensure_future(protocol.close())
        self._spares.append(task)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def close(self) -> None:
        spares, self._spares = self._spares, []
        if spares:
            await asyncio.gather(*spares, return_exceptions=True)


DEALLOCATE_WITHIN = 0.5
"""Seconds a TURN allocation's deletion may take when a tunnel closes: a live server answers in a round trip;
a dead one (killed, say) would hold the teardown, and with it the link's re-making, for aioice's retries."""


def _bound_deallocation(protocol: Any) -> None:
    """aioice's TURN client deletes its allocation on close with up to 6 retransmissions (6.3 s); bounded here.
    Cancelled, aioice still closes the client's socket; the allocation then expires on the server by itself."""
    inner = getattr(getattr(protocol, "transport", None), "_TurnTransport__inner_protocol", None)
    if inner is None:
        return
    delete = inner.delete

    async def bounded_delete() -> None:
        try:
            await asyncio.wait_for(delete(), DEALLOCATE_WITHIN)
        except TimeoutError:
            logger.info("tunnel ice: TURN allocation %s not deleted within %g s (server gone?)", inner.relayed_address,
                        DEALLOCATE_WITHIN)  # fmt: skip

    inner.delete = bounded_delete


def _add_candidate(conn: Connection, candidate: Candidate, protocol: Any = None) -> None:
    """Add a candidate aioice's own gathering did not make (it asks one server): to its list, and
    a relayed one's protocol to the connection's sockets; an srflx mapping already known is not added again."""
    for known in conn._local_candidates:
        if (known.host, known.port, known.type, known.related_address, known.related_port) == (
                candidate.host, candidate.port, candidate.type, candidate.related_address, candidate.related_port):
            return
    conn._local_candidates.append(candidate)
    if protocol is not None:
        conn._protocols.append(protocol)


def transport_of(protocol: Any) -> str:
    """"udp", "tcp" or "tls": how a selected pair's local socket reaches its peer (or its TURN server)."""
    inner = getattr(getattr(protocol, "transport", None), "_TurnTransport__inner_protocol", None)
    if inner is None or isinstance(inner, aioice.turn.TurnClientUdpProtocol):
        return "udp"
    stream = getattr(inner, "transport", None)
    return "tls" if stream is not None and stream.get_extra_info("ssl_object") is not None else "tcp"


def turn_server_of(protocol: Any) -> str | None:
    """"host:port" as configured of the TURN server relaying ``protocol``'s candidate; None for one not relayed."""
    inner = getattr(getattr(protocol, "transport", None), "_TurnTransport__inner_protocol", None)
    server = getattr(inner, "server", None)
    return server_name(str(server[0]), int(server[1])) if isinstance(server, tuple) else None
