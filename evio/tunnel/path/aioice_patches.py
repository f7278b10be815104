"""Every change evio makes to aioice (pinned to 0.13 in pyproject.toml), in one place.

aioice is a good ICE library for a browser's few connections; a daemon with
dozens of tunnels, open to the network on every socket, on hosts whose event
loops may run seconds late, needs it to behave differently in seven places.
Each is a replacement of an aioice name, installed by ``configure_aioice``
(process-wide, once per agent, idempotent) or per connection by ``IceAgent``:

Process-wide, by ``configure_aioice``:

1. ``aioice.stun.parse_message`` -> ``_guarded_parse``: every malformed STUN
   message is a ValueError, the one exception aioice's receive callbacks
   catch (stun_guard.py; lab-recipes 9), counted in ``STUN_REJECTED``. A
   TURN server's ALLOCATE or REFRESH answer granting less than
   ``MIN_TURN_LIFETIME`` is read as granting that much: aioice refreshes
   after 5/6 of the lifetime granted, so LIFETIME 0 was a REFRESH per round
   trip, forever (review21h H3); counted in ``TURN_LIFETIME_RAISED``.
2. ``aioice.ice.get_host_addresses`` -> ``_HostFilter``: the running agent's
   excluded networks (the overlays' subnets) are never gathered: a STUN
   answer for an overlay address never comes back, and gathering would wait
   out aioice's 5 s per-address timeout on every tunnel (``gathering``).
3. ``aioice.ice.server_reflexive_candidate`` / ``relayed_candidate`` ->
   ``_observed``: aioice leaves its STUN and TURN queries running unobserved
   when their gathering is cancelled; each query's outcome is retrieved
   (``GATHER_FAILED``) and its task handed to the agent, which closes a TURN
   allocation nobody took (``gathering``). The STUN query is ours
   (``_server_reflexive``): aioice resolves the server with
   ``gethostbyname``, IPv4 only, so a server given by IPv6 address or AAAA
   name was never asked; ours resolves it in the family of the socket that
   asks. Every host socket, IPv4 and IPv6, asks every STUN server
   (``servers.ServerGathering.reflexive``: an IPv6 mapping other than the
   host's own address, NPTv6 or NAT66, is a server-reflexive candidate).
4. Module constants: ``aioice.stun.RETRY_RTO`` (``IceConfig.stun_rto``: a
   dropped first check costs 0.1 s, not 0.5 s), ``aioice.ice.CONSENT_FAILURES``
   (never: liveness, on authenticated records and stretched with the loop's
   lag, says when a peer is gone) and ``aioice.ice.CONSENT_INTERVAL`` (30 s,
   not 5 s: ``CONSENT_INTERVAL``).

Per connection or protocol, by ``IceAgent`` and ``InboundGate``:

5. ``Connection.check_incoming`` -> ``hasten_checks``: the peer's
   authenticated check on a pair whose own check is pending sends that check
   again at once (RFC 8445 section 7.3.1.4), instead of waiting out its
   retransmission.
6. ``Connection._check_periodic`` -> ``check_at_once``: short check lists are
   checked all at once, not one pair every 20 ms.
7. ``StunProtocol.datagram_received`` (and that of a relayed candidate's TURN
   client protocol) -> ``intercept_datagrams``: every datagram passes an
   ``InboundGate`` (inbound_gate.py) before aioice sees it.

Elsewhere, and not patches but aioice's internals touched:
``aioice_mdns.defer_mdns`` stands in for aioice's mDNS module before aioice
is first imported; ``adopted_socket.adopt`` swaps the transport under a
selected pair's protocol for the data path's; ``IceAgent._path_of`` (ice.py)
sets a connection's nominated pair to the one the peer's DTLS came by (the
controlled side follows the controlling side).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import aioice
import aioice.candidate
import aioice.stun
from aioice import Candidate, Connection

from evio.ratelimit import LogLimiter
from evio.tunnel.path.candidates import Network, in_networks
from evio.tunnel.path.stun_guard import MalformedStun, StunReject, parse_stun

logger = logging.getLogger(__name__)


def configure_aioice(stun_rto: float) -> None:
    """Install patches 1 to 4 (module-level in aioice: read when each transaction or gathering starts)."""
    aioice.stun.RETRY_RTO = stun_rto
    # aioice closes a connection after 6 unanswered consent checks (RFC 7675), each allowed one
    # RTO: on a host whose loops run seconds late that kills live tunnels (hundreds in a 64-node
    # lab). The checks still run (they keep NAT bindings and TURN permissions fresh), but only the
    # tunnel's liveness, on authenticated records and stretched with the loop's lag, says a peer
    # is gone; it always says so before six checks could (dead_after, 5 s).
    aioice.ice.CONSENT_FAILURES = _NEVER
    aioice.ice.CONSENT_INTERVAL = CONSENT_INTERVAL
    _install_host_filter()
    _install_stun_guard()
    _install_query_observers()


# -- 1. the STUN parser ------------------------------------------------------------

STUN_REJECTED: collections.Counter[StunReject] = collections.Counter()
"""STUN-range datagrams aioice's receive paths were not given as messages, by reason (process-wide)."""


MIN_TURN_LIFETIME = 30  # seconds: RFC 8656 servers grant at least their minimum, 600 s by default
TURN_LIFETIME_RAISED = 0
"""TURN answers whose LIFETIME was below ``MIN_TURN_LIFETIME`` (process-wide; a deletion's answer counts too)."""
_LIFETIMES = (aioice.stun.Method.ALLOCATE, aioice.stun.Method.REFRESH)


def _guarded_parse(data: bytes) -> aioice.stun.Message:
    """Replaces ``aioice.stun.parse_message``: every failure is a ValueError, the one aioice expects."""
    global TURN_LIFETIME_RAISED
    try:
        message = parse_stun(data)
    except MalformedStun as exc:
        if data and data[0] <= 3:  # STUN range; anything else is aioice asking "is this STUN?"
            STUN_REJECTED[exc.reason] += 1
        raise
    lifetime = message.attributes.get("LIFETIME")
    if (message.message_class == aioice.stun.Class.RESPONSE and message.message_method in _LIFETIMES
            and isinstance(lifetime, int) and lifetime < MIN_TURN_LIFETIME):  # fmt: skip
        # MESSAGE-INTEGRITY is checked over the bytes received, not these attributes
        message.attributes["LIFETIME"] = MIN_TURN_LIFETIME
        TURN_LIFETIME_RAISED += 1
    return message


def _install_stun_guard() -> None:
    # ice.py and turn.py call ``stun.parse_message`` through the module: one replacement covers
    # every receive path of aioice (ICE checks, TURN responses, data indications).
    if aioice.stun.parse_message is not _guarded_parse:
        aioice.stun.parse_message = _guarded_parse


# -- 2. host addresses, 3. candidate queries -----------------------------------------

# The networks the agent whose gathering is running excludes. aioice has no
# per-connection address filter: `Connection.gather_candidates` calls the
# module function `aioice.ice.get_host_addresses`. `_HostFilter` replaces that
# function once for the process and reads this variable, which each gathering
# task inherits from the agent that started it: every agent gets its own list.
_gathering_excludes: contextvars.ContextVar[tuple[Network, ...]] = contextvars.ContextVar(
    "evio_ice_gathering_excludes", default=()
)

# The query tasks of the agent whose gathering is running (as `_gathering_excludes`): aioice starts
# each query as a task of its own and, when its gathering is cancelled (our deadline), leaves them
# running unobserved; one failing later was "Task exception was never retrieved" with a traceback.
_gathering_queries: contextvars.ContextVar[list[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "evio_ice_gathering_queries", default=None
)


@contextlib.contextmanager
def gathering(excluded: tuple[Network, ...], queries: list[asyncio.Task[Any]]) -> Iterator[None]:
    """Gatherings started inside leave out ``excluded`` and add aioice's query tasks to ``queries``.

    The gathering tasks copy the context as they are created: start them inside, await them anywhere."""
    excludes_token = _gathering_excludes.set(excluded)
    queries_token = _gathering_queries.set(queries)
    try:
        yield
    finally:
        _gathering_excludes.reset(excludes_token)
        _gathering_queries.reset(queries_token)


class _HostFilter:
    """aioice's host address lookup, minus the running agent's excluded networks."""

    def __init__(self, lookup: Callable[[bool, bool], list[str]]) -> None:
        self.lookup = lookup

    def __call__(self, use_ipv4: bool, use_ipv6: bool) -> list[str]:
        addresses = self.lookup(use_ipv4, use_ipv6)
        excluded = _gathering_excludes.get()
        return [a for a in addresses if not in_networks(a, excluded)] if excluded else addresses


def _install_host_filter() -> None:
    # Checked at every gathering, not once: tests replace aioice's function and restore it.
    current = aioice.ice.get_host_addresses
    if not isinstance(current, _HostFilter):
        aioice.ice.get_host_addresses = _HostFilter(current)


GATHER_FAILED: collections.Counter[str] = collections.Counter()
"""aioice's candidate queries (``srflx``: STUN, ``relay``: a TURN allocation) that failed, by kind (process-wide)."""

_QUERY_LOG_INTERVAL = 10.0
_query_log = LogLimiter[None](_QUERY_LOG_INTERVAL)


def _query_done(kind: str, task: asyncio.Task[Any]) -> None:
    """Every query's outcome is retrieved here; a failure is counted, and logged at most once per interval."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is None:
        return
    GATHER_FAILED[kind] += 1
    if _query_log.should_log(None, time.monotonic()):
        logger.info("tunnel ice %s candidate query failed: %s (%d %s failures so far)",
                    kind, exc or type(exc).__name__, GATHER_FAILED[kind], kind)


def _observed(kind: str, query: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``query`` (aioice's server-reflexive or relayed candidate coroutine), its task observed and owned."""

    async def observed(*args: Any, **kwargs: Any) -> Any:
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(functools.partial(_query_done, kind))
            owner = _gathering_queries.get()
            if owner is not None:
                owner.append(task)
        return await query(*args, **kwargs)

    observed._evio_observed = True  # type: ignore[attr-defined]
    return observed


def _install_query_observers() -> None:
    # aioice looks both up in its module when it starts a gathering.
    for name, kind, query in (("server_reflexive_candidate", "srflx", _server_reflexive),
                              ("relayed_candidate", "relay", None)):
        if not getattr(getattr(aioice.ice, name), "_evio_observed", False):
            setattr(aioice.ice, name, _observed(kind, query or getattr(aioice.ice, name)))


async def _server_reflexive(protocol: aioice.ice.StunProtocol, stun_server: tuple[str, int]) -> tuple[Candidate, None]:
    """aioice's ``server_reflexive_candidate``, the server resolved in the family of ``protocol``'s socket."""
    local = protocol.local_candidate
    family = socket.AF_INET6 if ipaddress.ip_address(local.host.partition("%")[0]).version == 6 else socket.AF_INET
    infos = await asyncio.get_running_loop().getaddrinfo(stun_server[0], stun_server[1], family=family,
                                                         type=socket.SOCK_DGRAM)
    server = (str(infos[0][4][0]), int(infos[0][4][1]))
    request = aioice.stun.Message(message_method=aioice.stun.Method.BINDING, message_class=aioice.stun.Class.REQUEST)
    response, _ = await protocol.request(request, server)
    mapped = response.attributes["XOR-MAPPED-ADDRESS"]
    return Candidate(
        foundation=aioice.candidate.candidate_foundation("srflx", "udp", local.host),
        component=local.component,
        transport=local.transport,
        priority=aioice.candidate.candidate_priority(local.component, "srflx"),
        host=mapped[0],
        port=mapped[1],
        type="srflx",
        related_address=local.host,
        related_port=local.port,
    ), None


# -- 4. consent ----------------------------------------------------------------------

_NEVER = 2**31
# aioice checks consent (RFC 7675) every 5 s (+-20 %) from each end of every connection: a check and
# its answer are two datagrams, two event-loop wake-ups at each end of every idle tunnel every 5 s.
# Nothing here needs them that often: the tunnel's liveness records keep NAT bindings fresh every
# keepalive interval and say when a peer is gone, and consent expiry closes nothing (CONSENT_FAILURES).
# What they still do is carry aioice's TURN channel refresh, due 500 s after a bind within the
# channel's 600 s life (turn.DEFAULT_CHANNEL_REFRESH_TIME): every 30 s (36 s at most) leaves that
# two checks and more.
CONSENT_INTERVAL = 30  # seconds (aioice keeps an int)


# -- 5. checks answered at once, 6. checks unpaced -------------------------------------


def hasten_checks(conn: Connection) -> None:
    """A check from the peer on a pair whose own check is in progress: send that check again now.

    aioice looks ``check_incoming`` up on the connection for every authenticated check it takes."""
    receive = conn.check_incoming

    def check_incoming(message: aioice.stun.Message, addr: tuple[str, int], protocol: aioice.ice.StunProtocol) -> None:
        receive(message, addr, protocol)
        for transaction in list(protocol.transactions.values()):
            if getattr(transaction, "_Transaction__addr", None) == addr:
                request = getattr(transaction, "_Transaction__request", None)
                if request is not None:
                    protocol.send_stun(request, addr)

    conn.check_incoming = check_incoming  # type: ignore[method-assign]


_UNPACED_PAIRS = 8  # check lists up to this long are checked all at once


def check_at_once(conn: Connection) -> None:
    """Start every pair's check at once instead of one every 20 ms (aioice's Ta pacing in ``connect``).

    Our check lists are a few pairs (a host socket or two against the peer's host and server-reflexive
    candidates), and the pair that works is rarely the first by priority (a private host address behind
    the peer's NAT comes first): paced, its check started 20 ms or more after the first. RFC 8445's pacing
    is there for lists of hundreds of pairs; a longer list than ``_UNPACED_PAIRS`` stays paced."""
    periodic = conn._check_periodic

    def check_periodic() -> bool:
        more = periodic()
        if more and len(conn._check_list) <= _UNPACED_PAIRS:
            for pair in list(conn._check_list):
                if pair.task is None and pair.state in (aioice.ice.CandidatePair.State.WAITING, aioice.ice.CandidatePair.State.FROZEN):
                    conn.check_start_task(pair)
        return more

    conn._check_periodic = check_periodic  # type: ignore[method-assign]


# -- 7. every datagram through a gate ---------------------------------------------------

Receiver = Callable[[bytes | str, tuple[Any, ...]], None]


def intercept_datagrams(
    protocol: aioice.ice.StunProtocol,
    owner: object,
    receive: Callable[[Receiver, bytes | str, tuple[Any, ...], aioice.ice.StunProtocol], None],
    turn_failed: Callable[[tuple[Any, ...]], None],
) -> None:
    """Every datagram ``protocol`` receives goes to ``receive(aioice's own receiver, data, addr, protocol)``
    instead; once per ``owner`` (transports look the callback up per datagram). A relayed candidate's
    socket belongs to aioice's TURN client protocol, which parses what the TURN server sends before
    anything reaches ``protocol``: an exception from it is contained and reported to ``turn_failed``."""
    if getattr(protocol, "_evio_gate", None) is owner:
        return
    inner_receive = protocol.datagram_received

    def datagram_received(data: bytes | str, addr: tuple[Any, ...]) -> None:
        receive(inner_receive, data, addr, protocol)

    protocol.datagram_received = datagram_received  # type: ignore[method-assign]
    protocol._evio_gate = owner  # type: ignore[attr-defined]
    inner = getattr(protocol.transport, "_TurnTransport__inner_protocol", None) if hasattr(protocol, "transport") else None
    if inner is not None and getattr(inner, "_evio_gate", None) is not owner:
        turn_receive = inner.datagram_received

        def turn_datagram_received(data: bytes | str, addr: tuple[Any, ...]) -> None:
            try:
                turn_receive(data, addr)
            except Exception:  # noqa: BLE001 - nothing from the network may escape into the loop
                turn_failed(addr)

        inner.datagram_received = turn_datagram_received
        inner._evio_gate = owner
