"""The servers a config names, every one asked at once, each under its own deadline.

    targets(config)      the STUN, TURN and XMPP servers of every overlay, duplicates once
    run_netcheck(...)    resolve names; then, concurrently:
                           bindings: one socket per family asks every STUN and TURN server, then a
                                     server's RFC 5780 OTHER-ADDRESS if one address alone answered, then
                                     the path MTU to each address that answered
                           TURN Allocate over UDP and TCP at the configured port and TLS at 5349
                           XMPP per overlay
                         -> Observations -> findings.classify

A server that is dead, slow or answers garbage costs its own deadline and nothing else: no step
waits for another server's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from evio.config.loader import turn_password
from evio.config.model import Config, SignalConfig, TurnServer, split_host_port
from evio.netcheck.findings import (
    BindingAnswer,
    Family,
    FamilyReach,
    Observations,
    PathMtu,
    Report,
    Transport,
    TurnAttempt,
    XmppCheck,
    classify,
)
from evio.netcheck.stun import BindingSocket, endpoint, path_mtu, route_source
from evio.netcheck.turn import TLS_PORT, allocate
from evio.netcheck.xmpp import check_xmpp, tls_context
from evio.tunnel.path.turn_credentials import rest_credentials

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TIMEOUT = 3.0
REST_USER = "netcheck"  # the user part of TURN REST credentials netcheck makes for itself
# Route lookups only (a UDP connect sends nothing): is there a route of this family at all?
_ROUTE_PROBES: dict[Family, tuple[str, int]] = {"ipv4": ("192.0.2.1", 3478), "ipv6": ("2001:db8::1", 3478)}
_FAMILIES: tuple[Family, ...] = ("ipv4", "ipv6")


@dataclass(frozen=True)
class StunTarget:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class TurnTarget:
    name: str
    host: str
    port: int
    server: TurnServer


@dataclass(frozen=True)
class XmppTarget:
    overlay: str
    host: str
    port: int
    domain: str
    mode: str
    signal: SignalConfig  # for its TLS files


def targets(config: Config) -> tuple[list[StunTarget], list[TurnTarget], list[XmppTarget]]:
    stun: dict[str, StunTarget] = {}
    turn: dict[tuple[str, str | None], TurnTarget] = {}
    xmpp = []
    for overlay in config.overlays.values():
        for entry in overlay.nat_traversal.stun:
            host, port = split_host_port(entry)
            stun.setdefault(entry, StunTarget(f"stun {entry}", host, port))
        for server in overlay.nat_traversal.turn:
            host, port = server.host_port
            turn.setdefault((server.server, server.username), TurnTarget(f"turn {server.server}", host, port, server))
        signal = overlay.signal
        mode = "plaintext" if signal.insecure_plaintext else signal.tls
        for host, port in signal.endpoints:  # several servers of one service: each (decision 0051)
            xmpp.append(XmppTarget(overlay.id, host, port, signal.domain, mode, signal))
    return list(stun.values()), list(turn.values()), xmpp


async def run_netcheck(config: Config, timeout: float = DEFAULT_TIMEOUT) -> Report:
    started = time.monotonic()
    stun, turn, xmpp = targets(config)
    hosts = {t.host for t in stun} | {t.host for t in turn}
    resolved = dict(zip(hosts, await asyncio.gather(*(_resolve(h, timeout) for h in hosts)), strict=True))
    resolved = {host: _routed(addresses) for host, addresses in resolved.items()}
    bindings_task = _bindings(stun, turn, resolved, timeout)
    turn_tasks = [_turn(t, resolved[t.host], timeout) for t in turn]
    xmpp_tasks = [_xmpp(t, timeout) for t in xmpp]
    (bindings, mtu), turn_results, xmpp_results = await asyncio.gather(
        bindings_task, asyncio.gather(*turn_tasks), asyncio.gather(*xmpp_tasks)
    )
    families = tuple(FamilyReach(f, _family_source(f, resolved)) for f in _FAMILIES)
    obs = Observations(
        families=families, bindings=tuple(bindings), turn=tuple(a for attempts in turn_results for a in attempts),
        turn_servers=tuple(t.name for t in turn), xmpp=tuple(xmpp_results), mtu=tuple(mtu),
        seconds=round(time.monotonic() - started, 2),
    )  # fmt: skip
    return classify(obs)


async def _or_error(probe: Awaitable[T], failed: T, reason_field: str) -> T:
    """A probe's result or, on an exception it did not expect, `failed` with the exception as its reason:
    one server's surprise is that server's verdict, never the end of the whole report."""
    try:
        return await probe
    except Exception as exc:
        log.debug("probe failed", exc_info=True)
        return dataclasses.replace(failed, **{reason_field: f"unexpected {type(exc).__name__}: {exc}"})  # type: ignore[type-var]


# -- names -----------------------------------------------------------------------------------------------

Resolved = dict[Family, str] | str  # an address per family, or why there is none


async def _resolve(host: str, timeout: float) -> Resolved:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return {"ipv6" if ip.version == 6 else "ipv4": str(ip)}
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, None, type=socket.SOCK_DGRAM), timeout)
    except TimeoutError:
        return f"cannot resolve {host}: no answer within {timeout:g} s"
    except OSError as exc:
        return f"cannot resolve {host}: {exc.strerror or exc}"
    found: dict[Family, str] = {}
    for family, _, _, _, sockaddr in infos:
        key: Family = "ipv6" if family == socket.AF_INET6 else "ipv4"
        found.setdefault(key, str(sockaddr[0]))
    return found or f"cannot resolve {host}: no address"


def _routed(addresses: Resolved) -> Resolved:
    """A name's addresses this host has a route to; when it has a route to none of them, why not. (An
    IPv6-only host asking a dual-stack server's IPv4 address only learns that it has no IPv4.)"""
    if isinstance(addresses, str):
        return addresses
    routed = {family: ip for family, ip in addresses.items() if route_source(family, (ip, 3478)) is not None}
    if routed:
        return routed
    families = " or ".join(sorted(f.replace("ipv", "IPv") for f in addresses))
    return f"no route to {', '.join(addresses.values())}: this host has no {families} route"


def _family_source(family: Family, resolved: dict[str, Resolved]) -> str | None:
    for addresses in resolved.values():
        if isinstance(addresses, dict) and family in addresses:
            return route_source(family, (addresses[family], 3478))
    return route_source(family, _ROUTE_PROBES[family])


# -- STUN bindings and path MTU --------------------------------------------------------------------------


async def _bindings(
    stun: list[StunTarget], turn: list[TurnTarget], resolved: dict[str, Resolved], timeout: float
) -> tuple[list[BindingAnswer], list[PathMtu]]:
    sockets: dict[Family, BindingSocket] = {}
    try:
        asks: list[Awaitable[BindingAnswer]] = []
        named: list[StunTarget | TurnTarget] = [*stun, *turn]
        for target in named:
            addresses = resolved[target.host]
            if isinstance(addresses, str):
                asks.append(_answer(BindingAnswer(target.name, error=addresses)))
                continue
            for family, ip in addresses.items():
                sock = sockets.get(family) or sockets.setdefault(family, _open(family))
                dest = (ip, target.port)
                failed = BindingAnswer(target.name, endpoint(*dest), family)
                asks.append(_or_error(sock.ask(target.name, dest, timeout), failed, "error"))
        answers = list(await asyncio.gather(*asks))
        answers += await _other_addresses(answers, sockets, timeout)
    finally:
        for sock in sockets.values():
            sock.close()
    seen: set[str] = set()
    probes = []
    for a in answers:
        if a.answered and a.address is not None and a.family is not None and a.address not in seen:
            seen.add(a.address)
            unknown = PathMtu(a.name, a.address, None, "unknown")
            probes.append(_or_error(path_mtu(a.name, a.family, _split(a.address), timeout, a.rtt_ms), unknown, "how"))
    return answers, list(await asyncio.gather(*probes))


def _open(family: Family) -> BindingSocket:
    return BindingSocket(family)


async def _answer(answer: BindingAnswer) -> BindingAnswer:
    return answer


async def _other_addresses(
    answers: list[BindingAnswer], sockets: dict[Family, BindingSocket], timeout: float
) -> list[BindingAnswer]:
    """With one server address answering per family, its OTHER-ADDRESS (RFC 5780) is a second destination
    to compare mappings with, from the same socket."""
    more = []
    for family, sock in sockets.items():
        answered = [a for a in answers if a.family == family and a.answered]
        if len({a.address for a in answered}) != 1 or answered[0].other_address is None:
            continue
        other = answered[0].other_address
        if other not in {a.address for a in answers}:
            more.append(sock.ask(f"{answered[0].name} (other address)", _split(other), timeout))
    return list(await asyncio.gather(*more))


def _split(address: str) -> tuple[str, int]:
    host, port = split_host_port(address)
    return host, port


# -- TURN ------------------------------------------------------------------------------------------------


async def _turn(target: TurnTarget, addresses: Resolved, timeout: float) -> list[TurnAttempt]:
    if isinstance(addresses, str):
        return [TurnAttempt(target.name, "udp", outcome="error", detail=addresses)]
    try:
        username, password = _credentials(target.server)
    except (OSError, ValueError) as exc:
        return [TurnAttempt(target.name, "udp", outcome="error", detail=f"credentials: {exc}")]
    tls_name = None if _is_ip(target.host) else target.host
    plans: list[tuple[Transport, tuple[str, int]]] = []
    for ip in addresses.values():
        plans += [("udp", (ip, target.port)), ("tcp", (ip, target.port)), ("tls", (ip, TLS_PORT))]
    return list(await asyncio.gather(*(
        _or_error(allocate(target.name, transport, dest, username, password, timeout, tls_name),
                  TurnAttempt(target.name, transport, endpoint(*dest), "error"), "detail")
        for transport, dest in plans
    )))  # fmt: skip


def _credentials(server: TurnServer) -> tuple[str | None, str | None]:
    if server.rest_secret is not None:
        made = rest_credentials(server.rest_secret, REST_USER, time.time(), float(server.ttl))
        return made.username, made.password
    return server.username, turn_password(server)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# -- XMPP ------------------------------------------------------------------------------------------------


async def _xmpp(target: XmppTarget, timeout: float) -> XmppCheck:
    signal = target.signal
    context = None
    if target.mode != "plaintext":
        try:
            context = tls_context(signal.ca_file, signal.client_cert, signal.client_key)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            return XmppCheck(target.overlay, endpoint(target.host, target.port), target.domain, target.mode,
                             tls="invalid", detail=f"cannot load the TLS files: {exc}")  # fmt: skip
    name = endpoint(target.host, target.port)
    return await _or_error(
        check_xmpp(target.overlay, target.host, target.port, target.domain, target.mode, context, timeout),
        XmppCheck(target.overlay, name, target.domain, target.mode, tls="invalid"),
        "detail",
    )
