"""Announce the node's overlay addresses with gratuitous ARP when they appear (asyncio side).

Watches the IPv4 addresses of the bridges' internal ports; when one is added
(and once for every address present at start) it sends a gratuitous ARP,
request and reply form (`evio.sdn.garp`), out of that interface, then repeats
it `repeats - 1` times `repeat_interval` apart in case one is lost. The node
asks for the same again (`announce_again`) when a bridge gets its first
tunnel port: what was sent while it had none reached nobody, and a peer that
knew the address under the bridge's former MAC (a node restarted with a new
bridge, as E11's relocation does) would otherwise keep sending to that MAC
until its own ARP entry failed (the likely cause of one E11 relocation of 32 s). The frame
enters the bridge by its internal port, so the Bounded Flood controller
floods it to the whole overlay as an FRB like any broadcast, and every switch
it reaches re-learns the MAC (deleting flows towards an old place).

Two narrow interfaces, each with a real implementation here:
`AddressSource` (an rtnetlink socket of our own, parsed by `parse_address_messages`:
a few lines that spare the daemon pyroute2's 10 MB of modules) and
`FrameSender` (an AF_PACKET socket).
Which addresses to announce is decided by the pure `AnnouncedAddresses`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import logging
import socket
import struct
from collections.abc import AsyncIterator, Set
from dataclasses import dataclass
from typing import Any, Protocol

from evio.clock import REAL_CLOCK, Clock
from evio.ratelimit import LogLimiter
from evio.sdn.frb import format_mac
from evio.sdn.garp import ArpOp, gratuitous_arp

log = logging.getLogger(__name__)

SEND_ERROR_LOG_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class AddressEvent:
    ifname: str
    address: ipaddress.IPv4Address
    added: bool  # False: removed


class AddressSource(Protocol):
    async def current(self) -> list[AddressEvent]:
        """The IPv4 addresses present now, as `added` events."""
        ...

    def changes(self) -> AsyncIterator[AddressEvent]:
        """Additions and removals from now on (subscribed before `current` was taken)."""
        ...


class FrameSender(Protocol):
    def hardware_address(self, ifname: str) -> str:
        """The interface's MAC, "aa:bb:cc:dd:ee:ff"; OSError if it is gone."""
        ...

    def send(self, ifname: str, frame: bytes) -> None:
        """Send one Ethernet frame out of `ifname`; OSError if it cannot."""
        ...


class AnnouncedAddresses:
    """Which address events call for an announcement: an address new on a watched interface."""

    def __init__(self, interfaces: Set[str]) -> None:
        self.interfaces = frozenset(interfaces)
        self._present: set[tuple[str, ipaddress.IPv4Address]] = set()

    def update(self, event: AddressEvent) -> bool:
        """Record `event`; True if its address should be announced now."""
        if event.ifname not in self.interfaces:
            return False
        key = (event.ifname, event.address)
        if not event.added:
            self._present.discard(key)
            return False
        if key in self._present:
            return False  # the kernel re-reports an address when its flags or lifetimes change
        self._present.add(key)
        return True

    def present(self, ifname: str) -> list[ipaddress.IPv4Address]:
        """The addresses `ifname` has now, as far as the events told."""
        return sorted(address for name, address in self._present if name == ifname)


class PacketSocketSender:
    """Frames out of an interface through an AF_PACKET socket, opened per use (interfaces come and go)."""

    def hardware_address(self, ifname: str) -> str:
        with self._socket(ifname) as sock:
            return format_mac(sock.getsockname()[4][:6])

    def send(self, ifname: str, frame: bytes) -> None:
        with self._socket(ifname) as sock:
            sock.send(frame)

    @staticmethod
    def _socket(ifname: str) -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: send only, receive nothing
        try:
            sock.setblocking(False)
            sock.bind((ifname, 0))
        except OSError:
            sock.close()
            raise
        return sock


# rtnetlink (linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h)
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
RTMGRP_IPV4_IFADDR = 0x10
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_LABEL = 3
_NLMSGHDR = struct.Struct("=IHHII")
_IFADDRMSG = struct.Struct("=BBBBI")
_RTATTR = struct.Struct("=HH")
RECEIVE_SIZE = 65536


@dataclass(frozen=True, slots=True)
class AddressMessage:
    seq: int
    event: AddressEvent | None  # None: not an IPv4 address message we can use
    done: bool = False  # the end of a dump (or the kernel's error answer to it)


def parse_address_messages(data: bytes, ifname_of: Any = socket.if_indextoname) -> list[AddressMessage]:
    """The rtnetlink messages in one datagram from the kernel; malformed tails are ignored."""
    messages: list[AddressMessage] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            break
        body = data[offset + _NLMSGHDR.size:offset + length]
        offset += (length + 3) & ~3
        if kind in (NLMSG_DONE, NLMSG_ERROR):
            messages.append(AddressMessage(seq, None, done=True))
        elif kind in (RTM_NEWADDR, RTM_DELADDR):
            messages.append(AddressMessage(seq, _address_event(body, kind == RTM_NEWADDR, ifname_of)))
    return messages


def _address_event(body: bytes, added: bool, ifname_of: Any) -> AddressEvent | None:
    if len(body) < _IFADDRMSG.size:
        return None
    family, _prefixlen, _flags, _scope, index = _IFADDRMSG.unpack_from(body)
    if family != socket.AF_INET:
        return None
    attrs: dict[int, bytes] = {}
    offset = _IFADDRMSG.size
    while offset + _RTATTR.size <= len(body):
        length, kind = _RTATTR.unpack_from(body, offset)
        if length < _RTATTR.size or offset + length > len(body):
            break
        attrs[kind] = body[offset + _RTATTR.size:offset + length]
        offset += (length + 3) & ~3
    raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)  # IFA_LOCAL is ours; IFA_ADDRESS may be a peer's
    if raw is None or len(raw) != 4:
        return None
    label = attrs.get(IFA_LABEL, b"").split(b"\0", 1)[0].decode(errors="replace")
    ifname = label.partition(":")[0]
    if not ifname:
        try:
            ifname = ifname_of(index)
        except OSError:  # the interface went meanwhile
            return None
    return AddressEvent(ifname, ipaddress.IPv4Address(raw), added)


class NetlinkAddresses:
    """IPv4 address events from an rtnetlink socket; use as `async with` on a selector (plain asyncio) loop."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._seq = 0
        self._early: list[AddressEvent] = []  # changes that arrived while a dump was read

    async def __aenter__(self) -> NetlinkAddresses:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, socket.NETLINK_ROUTE)
        try:
            sock.bind((0, RTMGRP_IPV4_IFADDR))  # before the dump, so nothing falls between
        except OSError:
            sock.close()
            raise
        self._sock = sock
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    async def current(self) -> list[AddressEvent]:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        self._seq += 1
        request = _NLMSGHDR.pack(_NLMSGHDR.size + _IFADDRMSG.size, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP,
                                 self._seq, 0) + _IFADDRMSG.pack(socket.AF_INET, 0, 0, 0, 0)  # fmt: skip
        await loop.sock_sendall(self._sock, request)
        events: list[AddressEvent] = []
        while True:
            for message in parse_address_messages(await loop.sock_recv(self._sock, RECEIVE_SIZE)):
                if message.seq != self._seq:
                    if message.event is not None:
                        self._early.append(message.event)
                elif message.done:
                    return events
                elif message.event is not None:
                    events.append(message.event)

    async def changes(self) -> AsyncIterator[AddressEvent]:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        while True:
            while self._early:
                yield self._early.pop(0)
            try:
                data = await loop.sock_recv(self._sock, RECEIVE_SIZE)
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                # Events were lost: what is present now stands in for them (re-reported ones are not re-announced).
                log.warning("address events lost (netlink receive buffer full): reading the addresses again")
                for event in await self.current():
                    yield event
                continue
            for message in parse_address_messages(data):
                if message.event is not None:
                    yield message.event


class GarpAnnouncer:
    """Runs until cancelled: announces addresses of `interfaces` present at start and added later."""

    def __init__(
        self,
        interfaces: Set[str],
        source: AddressSource | None = None,
        sender: FrameSender | None = None,
        repeats: int = 3,
        repeat_interval: float = 1.0,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.tracker = AnnouncedAddresses(interfaces)
        self._clock = clock
        self._source = source
        self.sender: FrameSender = sender if sender is not None else PacketSocketSender()
        self.repeats = repeats
        self.repeat_interval = repeat_interval
        self.sent = 0
        self.send_errors = 0
        self._error_logged = LogLimiter[str](SEND_ERROR_LOG_INTERVAL)  # interface
        self._pending: dict[tuple[str, ipaddress.IPv4Address], asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def announce_again(self, ifname: str) -> None:
        """Announce `ifname`'s addresses anew, from any thread (the node calls it when a bridge that had no
        tunnel port gets one). Before `run` has started, nothing: its own announcement is still to come;
        nor for an address whose announcement still repeats: its next frames take the new port."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the node is stopping
            loop.call_soon_threadsafe(self._again, ifname)

    def _again(self, ifname: str) -> None:
        for address in self.tracker.present(ifname):
            if (ifname, address) in self._pending:
                continue  # a start of 64 nodes floods enough broadcasts already
            log.info("interface=%s has its first tunnel port: announcing address=%s again", ifname, address)
            self._start(ifname, address)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._source is not None:
            await self._watch(self._source)
            return
        async with NetlinkAddresses() as source:
            await self._watch(source)

    async def _watch(self, source: AddressSource) -> None:
        try:
            for event in await source.current():
                self._handle(event)
            async for event in source.changes():
                self._handle(event)
        finally:
            for task in self._pending.values():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._pending.values(), return_exceptions=True)

    def _handle(self, event: AddressEvent) -> None:
        key = (event.ifname, event.address)
        if not event.added:
            self.tracker.update(event)
            task = self._pending.pop(key, None)
            if task is not None:
                task.cancel()  # no more announcements for an address that left
            return
        if not self.tracker.update(event):
            return
        log.info("address appeared interface=%s address=%s: announcing", event.ifname, event.address)
        self._start(event.ifname, event.address)

    def _start(self, ifname: str, address: ipaddress.IPv4Address) -> None:
        key = (ifname, address)
        previous = self._pending.pop(key, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.get_running_loop().create_task(self._announce(ifname, address))
        self._pending[key] = task
        task.add_done_callback(functools.partial(self._done, key))

    def _done(self, key: tuple[str, ipaddress.IPv4Address], task: asyncio.Task[None]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("announcing %s on %s failed", key[1], key[0], exc_info=task.exception())

    async def _announce(self, ifname: str, address: ipaddress.IPv4Address) -> None:
        for attempt in range(self.repeats):
            if attempt:
                await self._clock.sleep(self.repeat_interval)
            self._send(ifname, address)

    def _send(self, ifname: str, address: ipaddress.IPv4Address) -> None:
        now = self._clock.now()
        try:
            mac = self.sender.hardware_address(ifname)
            for op in (ArpOp.REQUEST, ArpOp.REPLY):
                self.sender.send(ifname, gratuitous_arp(mac, address, op))
                self.sent += 1
        except (OSError, ValueError) as err:
            self.send_errors += 1
            if self._error_logged.should_log(ifname, now):
                log.warning("gratuitous ARP not sent interface=%s address=%s: %s (errors so far: %d)",
                            ifname, address, err, self.send_errors)
