"""STUN Binding over UDP for netcheck: mapped addresses from one socket, and path MTU by DF-set probes.

    binding_request(txid, size)         the datagram (pure): a Binding request padded to `size` bytes
    BindingSocket(family).ask(dest)     one socket per family, so the mappings compare (RFC 4787 4.1)
    path_mtu(dest)                      DF-set requests of falling sizes; the largest answered is the MTU

Answers are parsed by the tunnel's own guarded parser (evio.tunnel.path.stun_guard), so a server answering
garbage is named with the reason rather than tripping aioice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
from dataclasses import dataclass, field

from aioice import stun as aioice_stun

from evio.netcheck.findings import BindingAnswer, Family, PathMtu
from evio.tunnel.path.stun_guard import MalformedStun, parse_stun
from evio.tunnel.stun_framing import HEADER_LEN, MAGIC_COOKIE

BINDING_REQUEST = 0x0001
# A comprehension-optional attribute (RFC 8489 section 14: 0x8000-0xFFFF) a server must ignore: it pads
# an MTU probe without the 420 a comprehension-required PADDING could draw from a server without RFC 5780.
PROBE_PADDING = 0xC0DE
FIRST_RTO = 0.25  # RFC 8489 section 6.2.1 suggests 0.5 s; a check that waits a few seconds retries sooner
IP_HEADERS = {"ipv4": 28, "ipv6": 48}  # IP + UDP header bytes in front of the STUN message
MIN_MTU = {"ipv4": 576, "ipv6": 1280}  # RFC 791 and RFC 8200 minimums: always assumed to pass
ETHERNET_MTU = 1500  # probed up to at least this, whatever the kernel's route MTU says
ROUND_BASE, ROUND_RTTS = 0.1, 5  # a round of MTU probes waits 0.1 s and 5 round trips
# Linux socket options (linux/in.h, linux/in6.h); Python's socket module lacks some of them.
IP_MTU_DISCOVER, IP_PMTUDISC_PROBE, IP_MTU = 10, 3, 14
IPV6_MTU_DISCOVER, IPV6_PMTUDISC_PROBE, IPV6_MTU, IPV6_DONTFRAG = 23, 3, 24, 62


def endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def binding_request(transaction_id: bytes, size: int = 0) -> bytes:
    """A Binding request; with `size`, padded so that the STUN message is `size` bytes (a multiple of 4)."""
    attributes = b""
    if size:
        pad = size - HEADER_LEN - 4
        if pad < 0 or size % 4:
            raise ValueError(f"a padded request is at least {HEADER_LEN + 4} bytes and a multiple of 4, not {size}")
        attributes = struct.pack("!HH", PROBE_PADDING, pad) + bytes(pad)
    return struct.pack("!HHI", BINDING_REQUEST, len(attributes), MAGIC_COOKIE) + transaction_id + attributes


def describe_reply(message: aioice_stun.Message) -> tuple[str | None, str | None, str | None]:
    """(mapped, other address, error) of a Binding response."""
    if message.message_class == aioice_stun.Class.ERROR:
        code, reason = message.attributes.get("ERROR-CODE", (0, "no ERROR-CODE"))
        return None, None, f"answered error {code} {reason}"
    mapped = message.attributes.get("XOR-MAPPED-ADDRESS") or message.attributes.get("MAPPED-ADDRESS")
    if mapped is None:
        return None, None, "answered without a mapped address"
    other = message.attributes.get("OTHER-ADDRESS")
    return endpoint(*mapped), endpoint(*other) if other else None, None


@dataclass
class _Pending:
    dest: tuple[str, int]
    answer: asyncio.Future[tuple[aioice_stun.Message, float]]
    sent: dict[bytes, float] = field(default_factory=dict)  # transaction id -> when sent
    garbage: str | None = None


class BindingSocket:
    """One UDP socket of one family, its requests told apart by transaction id."""

    def __init__(self, family: Family) -> None:
        self.family = family
        af = socket.AF_INET6 if family == "ipv6" else socket.AF_INET
        self._sock = socket.socket(af, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._sock.bind(("::", 0) if family == "ipv6" else ("0.0.0.0", 0))
        self.port = self._sock.getsockname()[1]
        self._pending: dict[bytes, _Pending] = {}
        self._by_source: dict[tuple[str, int], list[_Pending]] = {}
        self._reader: asyncio.Task[None] | None = None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._sock.close()

    async def ask(self, name: str, dest: tuple[str, int], timeout: float) -> BindingAnswer:
        """A Binding request to `dest`, sent again at growing intervals until an answer or `timeout`."""
        loop = asyncio.get_running_loop()
        if self._reader is None:
            self._reader = loop.create_task(self._read())
        address = endpoint(*dest)
        local = endpoint(route_source(self.family, dest) or "?", self.port)
        pending = _Pending(dest, answer=loop.create_future())
        self._by_source.setdefault(dest, []).append(pending)
        deadline = time.monotonic() + timeout
        rto = FIRST_RTO
        try:
            while True:
                txid = os.urandom(12)
                self._pending[txid] = pending
                pending.sent[txid] = time.monotonic()
                try:
                    await loop.sock_sendto(self._sock, binding_request(txid), dest)
                except OSError as exc:
                    return BindingAnswer(name, address, self.family, local=local, error=f"cannot send: {exc.strerror}")
                wait = min(rto, deadline - time.monotonic())
                if wait <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    message, rtt = await asyncio.wait_for(asyncio.shield(pending.answer), wait)
                    mapped, other, error = describe_reply(message)
                    return BindingAnswer(name, address, self.family, round(rtt * 1000, 2), mapped, local, other, error)
                rto *= 2
        finally:
            for txid in pending.sent:
                self._pending.pop(txid, None)
            self._by_source[dest].remove(pending)
        if pending.garbage is not None:
            return BindingAnswer(name, address, self.family, local=local, error=f"answered garbage: {pending.garbage}")
        return BindingAnswer(name, address, self.family, local=local, error=f"no answer within {timeout:g} s")

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data, source = await loop.sock_recvfrom(self._sock, 2048)
            except OSError:
                continue  # an ICMP error queued on the socket: the asking side times out
            _deliver(data, (source[0], source[1]), self._pending, self._by_source.get((source[0], source[1]), []))


def _deliver(data: bytes, source: tuple[str, int], pending: dict[bytes, _Pending], from_source: list[_Pending]) -> None:
    """An answer to the transaction it names; anything unparsable is charged to the requests to its source."""
    try:
        message = parse_stun(data)
    except MalformedStun as exc:
        for waiting in from_source:
            waiting.garbage = f"{len(data)} bytes that are not STUN ({exc})"
        return
    p = pending.get(message.transaction_id)
    if p is None or p.answer.done():
        return
    if message.message_class not in (aioice_stun.Class.RESPONSE, aioice_stun.Class.ERROR):
        return
    p.answer.set_result((message, time.monotonic() - p.sent[message.transaction_id]))


def route_source(family: Family, dest: tuple[str, int]) -> str | None:
    """The address the kernel would send to `dest` from (None: no route); no packet is sent."""
    af = socket.AF_INET6 if family == "ipv6" else socket.AF_INET
    with socket.socket(af, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(dest)
        except OSError:
            return None
        return str(sock.getsockname()[0])


# -- path MTU --------------------------------------------------------------------------------------------


async def path_mtu(
    name: str, family: Family, dest: tuple[str, int], timeout: float, rtt_ms: float | None = None, per_round: int = 12
) -> PathMtu:
    """The largest IP packet that reaches `dest` and is answered, by DF-set Binding requests (the kernel's
    PMTU cache ignored: IP_PMTUDISC_PROBE). Rounds of `per_round` sizes, sent at once and again for those
    unanswered: the first spans the minimum MTU to the route's MTU, each next the gap the last left, until
    it is 4 bytes (STUN's granularity). A round waits a few round trips, and all of them `timeout` at most."""
    address = endpoint(*dest)
    headers = IP_HEADERS[family]
    try:
        sock = _probe_socket(family)
        route = _route_mtu(family, dest)
    except OSError as exc:
        return PathMtu(name, address, None, f"unknown: cannot open a DF-set socket ({exc.strerror})")
    deadline = time.monotonic() + timeout
    wait = min(timeout / 3, ROUND_BASE + ROUND_RTTS * (rtt_ms or 100.0) / 1000)
    # The kernel's route MTU may be one it learnt from ICMP (an earlier run's probes): 1500 is probed all
    # the same, so that the answer is measured, not remembered.
    ceiling = max(route, ETHERNET_MTU)
    with sock:
        low, high = MIN_MTU[family], ceiling
        if high <= low:
            return PathMtu(name, address, ceiling, "the minimum MTU (no larger size to probe)")
        answered, failed = await _probe_round(sock, dest, _sizes(low, high, per_round), headers, wait)
        if not answered:
            return PathMtu(name, address, None, "unknown: no DF-set probe was answered (large UDP filtered?)")
        best = max(answered)
        gap_top = min((s for s in failed if s > best), default=None)  # the smallest size seen failing
        rounds = 1
        while gap_top is not None and gap_top - best > 4 and time.monotonic() + wait <= deadline:
            sizes = [s for s in _sizes(best, gap_top, per_round) if best < s < gap_top]
            if not sizes:
                break
            more, failed = await _probe_round(sock, dest, sizes, headers, wait)
            best = max([best, *more])
            gap_top = min([s for s in failed if s > best], default=gap_top)
            rounds += 1
        if best >= ceiling - ceiling % 4:
            return PathMtu(name, address, ceiling, f"a DF-set probe of the route's full {ceiling} bytes was answered")
        return PathMtu(name, address, best, f"largest DF-set probe answered, {rounds} round(s) (route MTU {route})")


def _sizes(low: int, high: int, count: int) -> list[int]:
    """`count` sizes from `low` to `high` inclusive, multiples of 4 (STUN lengths are)."""
    step = max((high - low) / max(count - 1, 1), 4)
    sizes = {low - low % 4, high - high % 4}
    value = float(low)
    while value < high:
        sizes.add(int(value) - int(value) % 4)
        value += step
    return sorted(s for s in sizes if low - 4 < s <= high)


def _probe_socket(family: Family) -> socket.socket:
    """Unconnected: an ICMP "fragmentation needed" for one probe is then not reported as the error of the
    next send or receive (as it is on a connected UDP socket), which would lose that probe."""
    if family == "ipv6":
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_PROBE)
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 1)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)
    sock.setblocking(False)
    return sock


def _route_mtu(family: Family, dest: tuple[str, int]) -> int:
    """The MTU of the route to `dest` (the kernel's: the interface's, or a PMTU it has learnt)."""
    af = socket.AF_INET6 if family == "ipv6" else socket.AF_INET
    with socket.socket(af, socket.SOCK_DGRAM) as sock:
        sock.connect(dest)  # IP_MTU needs a connected socket; nothing is sent
        if family == "ipv6":
            return int(sock.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU))
        return int(sock.getsockopt(socket.IPPROTO_IP, IP_MTU))


async def _probe_round(
    sock: socket.socket, dest: tuple[str, int], sizes: list[int], headers: int, wait: float
) -> tuple[list[int], list[int]]:
    """Send one probe of each IP size, again after `wait / 2` for those unanswered; (answered, failed)."""
    loop = asyncio.get_running_loop()
    by_txid: dict[bytes, int] = {}
    answered: set[int] = set()

    def send(size: int) -> None:
        txid = os.urandom(12)
        by_txid[txid] = size
        try:
            sock.sendto(binding_request(txid, size - headers), dest)
        except OSError:
            pass  # EMSGSIZE: larger than the interface; it stays unanswered

    async def collect(until: float) -> None:
        while len(answered) < len(sizes) and (left := until - time.monotonic()) > 0:
            try:
                data, source = await asyncio.wait_for(loop.sock_recvfrom(sock, 2048), left)
            except TimeoutError:
                return
            except OSError:
                continue  # an ICMP error the kernel queued after all: the next datagram may be an answer
            if source[:2] != dest:
                continue
            try:
                message = parse_stun(data)
            except MalformedStun:
                continue
            size = by_txid.get(message.transaction_id)
            if size is not None:
                answered.add(size)

    for size in sizes:
        send(size)
    await collect(time.monotonic() + wait / 2)
    for size in sizes:
        if size not in answered:
            send(size)
    await collect(time.monotonic() + wait / 2)
    return sorted(answered), [s for s in sizes if s not in answered]
