"""Announce the node's overlay addresses with gratuitous ARP when they appear (asyncio side).

Watches the IPv4 addresses of the bridges' internal ports; when one is added
(and once for every address present at start) it sends a gratuitous ARP,
request and reply form (`evio.sdn.garp`), out of that interface, then repeats
it `repeats - 1` times `repeat_interval` apart in case one is lost. The frame
enters the bridge by its internal port, so the Bounded Flood controller
floods it to the whole overlay as an FRB like any broadcast, and every switch
it reaches re-learns the MAC (deleting flows towards an old place).

Two narrow interfaces, each with a real implementation here:
`AddressSource` (netlink through pyroute2's AsyncIPRoute: its sync API must
not be used inside a running loop) and `FrameSender` (an AF_PACKET socket).
Which addresses to announce is decided by the pure `AnnouncedAddresses`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Set
from dataclasses import dataclass
from typing import Any, Protocol

from evio.clock import REAL_CLOCK, Clock
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


class NetlinkAddresses:
    """IPv4 address events from rtnetlink via pyroute2's AsyncIPRoute; use as `async with`."""

    def __init__(self) -> None:
        self._ipr: Any = None

    async def __aenter__(self) -> NetlinkAddresses:
        from pyroute2 import AsyncIPRoute
        from pyroute2.netlink.rtnl import RTMGRP_IPV4_IFADDR

        self._ipr = AsyncIPRoute()
        await self._ipr.bind(groups=RTMGRP_IPV4_IFADDR)  # before the dump, so nothing falls between
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None

    async def current(self) -> list[AddressEvent]:
        events = []
        async for msg in await self._ipr.addr("dump", family=socket.AF_INET):
            event = await self._event(msg, added=True)
            if event is not None:
                events.append(event)
        return events

    async def changes(self) -> AsyncIterator[AddressEvent]:
        while True:
            async for msg in self._ipr.get():
                kind = msg.get("event")
                if kind not in ("RTM_NEWADDR", "RTM_DELADDR") or msg.get("family") != socket.AF_INET:
                    continue
                event = await self._event(msg, added=kind == "RTM_NEWADDR")
                if event is not None:
                    yield event

    async def _event(self, msg: Any, added: bool) -> AddressEvent | None:
        text = msg.get("local") or msg.get("address")  # IFA_LOCAL is ours; IFA_ADDRESS may be a peer's
        if not text:
            return None
        label = msg.get("label")
        ifname = label.partition(":")[0] if label else await self._ifname(msg.get("index"))
        if not ifname:
            return None
        return AddressEvent(ifname, ipaddress.IPv4Address(text), added)

    async def _ifname(self, index: int | None) -> str | None:
        if index is None:
            return None
        try:
            for link in await self._ipr.link("get", index=index):
                name: str | None = link.get("ifname")
                return name
        except Exception:  # noqa: BLE001 - the interface went meanwhile
            return None
        return None


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
        self._error_logged: dict[str, float] = {}
        self._pending: dict[tuple[str, ipaddress.IPv4Address], asyncio.Task[None]] = {}

    async def run(self) -> None:
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
        previous = self._pending.pop(key, None)
        if previous is not None:
            previous.cancel()
        task = asyncio.get_running_loop().create_task(self._announce(event.ifname, event.address))
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
            last = self._error_logged.get(ifname)
            if last is None or now - last >= SEND_ERROR_LOG_INTERVAL:
                self._error_logged[ifname] = now
                log.warning("gratuitous ARP not sent interface=%s address=%s: %s (errors so far: %d)",
                            ifname, address, err, self.send_errors)
