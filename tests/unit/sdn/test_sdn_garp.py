"""Gratuitous ARP: the frame builder, and the announcer against a fake address feed and a fake sender."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections.abc import AsyncIterator

import pytest

from evio.sdn import address_announcer
from evio.sdn.address_announcer import AddressEvent, AnnouncedAddresses, GarpAnnouncer
from evio.sdn.garp import ArpOp, gratuitous_arp, parse_arp
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

MAC = "02:11:22:33:44:55"
IP = ipaddress.IPv4Address("10.10.0.7")


def test_request_form_is_an_rfc5227_announcement() -> None:
    frame = gratuitous_arp(MAC, "10.10.0.7")
    assert len(frame) == 60
    assert frame[:6] == b"\xff" * 6 and frame[6:12] == bytes.fromhex("021122334455") and frame[12:14] == b"\x08\x06"
    arp = parse_arp(frame)
    assert arp is not None
    assert (arp.op, arp.sender_mac, arp.sender_ip, arp.target_mac, arp.target_ip) == (
        ArpOp.REQUEST, MAC, IP, "00:00:00:00:00:00", IP)
    assert arp.is_gratuitous


def test_reply_form_repeats_the_sender_mac_as_target_as_linux_requires() -> None:
    arp = parse_arp(gratuitous_arp(MAC, IP, ArpOp.REPLY))
    assert arp is not None and arp.op is ArpOp.REPLY and arp.target_mac == MAC and arp.is_gratuitous


@pytest.mark.parametrize("mac", ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01", "00:00:00:00:00:00"])
def test_no_announcement_from_a_group_or_zero_mac(mac: str) -> None:
    with pytest.raises(ValueError):
        gratuitous_arp(mac, IP)


def test_parse_rejects_what_is_not_ethernet_ipv4_arp() -> None:
    frame = gratuitous_arp(MAC, IP)
    assert parse_arp(frame[:30]) is None
    assert parse_arp(frame[:12] + b"\x08\x00" + frame[14:]) is None  # IPv4, not ARP
    assert parse_arp(frame[:20] + b"\x00\x09" + frame[22:]) is None  # op 9


def test_only_new_addresses_on_watched_interfaces_are_announced() -> None:
    seen = AnnouncedAddresses({"evobr"})
    assert seen.update(AddressEvent("evobr", IP, True))
    assert not seen.update(AddressEvent("evobr", IP, True))  # re-reported: lifetimes, flags
    assert not seen.update(AddressEvent("eth0", IP, True))
    assert not seen.update(AddressEvent("evobr", IP, False))
    assert seen.update(AddressEvent("evobr", IP, True))  # came back: announce again


class FakeAddresses:
    """Present addresses, then changes fed by the test."""

    def __init__(self, present: list[AddressEvent]) -> None:
        self.present = present
        self.queue: asyncio.Queue[AddressEvent] = asyncio.Queue()

    async def current(self) -> list[AddressEvent]:
        return list(self.present)

    async def changes(self) -> AsyncIterator[AddressEvent]:
        while True:
            yield await self.queue.get()


class FakeSender:
    def __init__(self, macs: dict[str, str]) -> None:
        self.macs = macs
        self.sent: list[tuple[str, bytes]] = []
        self.arrived = asyncio.Event()

    def hardware_address(self, ifname: str) -> str:
        if ifname not in self.macs:
            raise OSError(19, "No such device")
        return self.macs[ifname]

    def send(self, ifname: str, frame: bytes) -> None:
        self.sent.append((ifname, frame))
        self.arrived.set()


async def test_announcer_announces_at_start_and_on_every_new_address_repeating_each() -> None:
    other = ipaddress.IPv4Address("10.10.0.9")
    source = FakeAddresses([AddressEvent("evobr", IP, True), AddressEvent("eth0", other, True)])
    sender = FakeSender({"evobr": MAC})
    clock = VirtualClock()
    announcer = GarpAnnouncer({"evobr"}, source=source, sender=sender, repeats=2, repeat_interval=0.05, clock=clock)
    task = asyncio.create_task(announcer.run())
    try:
        await wait_until(lambda: len(sender.sent) == 4, clock=clock)  # two rounds of request + reply
        packets = [parse_arp(frame) for _, frame in sender.sent]
        assert all(p is not None and p.sender_ip == IP and p.sender_mac == MAC for p in packets)
        assert [p.op for p in packets if p] == [ArpOp.REQUEST, ArpOp.REPLY] * 2

        source.queue.put_nowait(AddressEvent("evobr", other, True))  # the address moved here
        await wait_until(lambda: len(sender.sent) >= 5, clock=clock)
        first = parse_arp(sender.sent[4][1])
        assert first is not None and first.sender_ip == other and first.is_gratuitous
        await wait_until(lambda: len(sender.sent) == 8, clock=clock)
        assert all(name == "evobr" for name, _ in sender.sent)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_removed_address_stops_its_repeats_and_send_errors_are_counted_not_raised() -> None:
    source = FakeAddresses([])
    sender = FakeSender({"evobr": MAC})
    clock = VirtualClock()
    announcer = GarpAnnouncer(
        {"evobr", "evogone"}, source=source, sender=sender, repeats=5, repeat_interval=0.05, clock=clock
    )
    task = asyncio.create_task(announcer.run())
    try:
        source.queue.put_nowait(AddressEvent("evobr", IP, True))
        await wait_until(lambda: len(sender.sent) == 2, clock=clock)
        source.queue.put_nowait(AddressEvent("evobr", IP, False))
        source.queue.put_nowait(AddressEvent("evogone", IP, True))  # no such interface
        await wait_until(lambda: announcer.send_errors >= 1, clock=clock)
        await clock.advance(0.2)  # four repeat intervals: none may come now
        assert len(sender.sent) == 2
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_announce_again_repeats_the_present_addresses_whose_announcement_ended_from_any_thread() -> None:
    other = ipaddress.IPv4Address("10.10.0.9")
    source = FakeAddresses([AddressEvent("evobr", IP, True), AddressEvent("evobr", other, True)])
    sender = FakeSender({"evobr": MAC})
    clock = VirtualClock()
    announcer = GarpAnnouncer({"evobr"}, source=source, sender=sender, repeats=2, repeat_interval=0.05, clock=clock)
    announcer.announce_again("evobr")  # not running yet: nothing to do, nothing raised
    task = asyncio.create_task(announcer.run())
    try:
        await wait_until(lambda: len(sender.sent) == 4, clock=clock)  # the first round: 2 addresses, 2 frames
        announcer.announce_again("evobr")  # still repeating: its second round carries it
        await wait_until(lambda: len(sender.sent) == 8, clock=clock)
        await clock.advance(0.2)
        assert len(sender.sent) == 8
        source.queue.put_nowait(AddressEvent("evobr", other, False))  # gone: not announced again
        await wait_until(lambda: announcer.tracker.present("evobr") == [IP], clock=clock)

        # The node calls it from its own loop's thread when the bridge gets its first tunnel port.
        await asyncio.to_thread(announcer.announce_again, "evobr")
        await asyncio.to_thread(announcer.announce_again, "eth0")  # not watched: nothing
        await wait_until(lambda: len(sender.sent) == 12, clock=clock)
        await clock.advance(0.2)
        again = [parse_arp(frame) for _, frame in sender.sent[8:]]
        assert len(again) == 4
        assert all(a is not None and a.sender_ip == IP and a.sender_mac == MAC and a.is_gratuitous for a in again)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def _rtattr(kind: int, value: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(value), kind) + value
    return data + b"\0" * (-len(data) % 4)


def _address_message(kind: int, seq: int, family: int, index: int, attrs: bytes) -> bytes:
    body = struct.pack("=BBBBI", family, 24, 0, 0, index) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body


def test_rtnetlink_address_messages_are_parsed_into_events_and_a_dump_end() -> None:
    ipv4 = _address_message(address_announcer.RTM_NEWADDR, 7, socket.AF_INET, 3,
                            _rtattr(address_announcer.IFA_ADDRESS, bytes([10, 1, 0, 9]))
                            + _rtattr(address_announcer.IFA_LOCAL, bytes([10, 1, 0, 5]))
                            + _rtattr(address_announcer.IFA_LABEL, b"brov1:0\0"))  # fmt: skip
    removed = _address_message(address_announcer.RTM_DELADDR, 0, socket.AF_INET, 4,
                               _rtattr(address_announcer.IFA_ADDRESS, bytes([10, 1, 0, 6])))  # fmt: skip
    ipv6 = _address_message(address_announcer.RTM_NEWADDR, 7, socket.AF_INET6, 3,
                            _rtattr(address_announcer.IFA_ADDRESS, bytes(16)))  # fmt: skip
    done = struct.pack("=IHHII", 20, address_announcer.NLMSG_DONE, 0, 7, 0) + bytes(4)
    messages = address_announcer.parse_address_messages(ipv4 + removed + ipv6 + done, ifname_of={4: "eth1"}.__getitem__)
    assert [(m.seq, m.event, m.done) for m in messages] == [
        (7, AddressEvent("brov1", ipaddress.IPv4Address("10.1.0.5"), True), False),  # the local address, not the peer's
        (0, AddressEvent("eth1", ipaddress.IPv4Address("10.1.0.6"), False), False),  # no label: the name by index
        (7, None, False),
        (7, None, True),
    ]


def test_truncated_rtnetlink_data_is_ignored_not_raised() -> None:
    good = _address_message(address_announcer.RTM_NEWADDR, 1, socket.AF_INET, 3,
                            _rtattr(address_announcer.IFA_LOCAL, bytes([10, 1, 0, 5]))
                            + _rtattr(address_announcer.IFA_LABEL, b"brov1\0"))  # fmt: skip
    bad_attr = _address_message(address_announcer.RTM_NEWADDR, 1, socket.AF_INET, 3, struct.pack("=HH", 200, 2))
    for data in (good[:-3], good[:10], bad_attr, struct.pack("=IHHII", 3, 20, 0, 0, 0)):
        events = [m.event for m in address_announcer.parse_address_messages(data, ifname_of=lambda i: "x")]
        assert all(e is None for e in events)
