"""Fakes for the tunnel data path: a TAP made of a Unix socketpair, an underlay on loopback UDP, a wire between two.

They use real fds, so ``FdDatapath`` runs unchanged on them, without root and
without a network: a ``SOCK_DGRAM`` socketpair keeps frame boundaries just as
a TAP fd does (one frame per read), and loopback UDP never leaves the host.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any


class FakeTap:
    """``fd`` is what the data path reads and writes; the test uses ``send_frame`` / ``frames``."""

    def __init__(self) -> None:
        self._datapath_end, self._test_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._test_end.setblocking(False)
        self.fd = self._datapath_end.fileno()

    def send_frame(self, frame: bytes) -> None:
        """A frame the kernel would hand to the tunnel."""
        self._test_end.send(frame)

    def frames(self) -> list[bytes]:
        """Frames the tunnel wrote since the last call."""
        out = []
        while True:
            try:
                out.append(self._test_end.recv(1 << 17))  # a vnet header and a 64 KiB super-frame
            except BlockingIOError:
                return out

    def close(self) -> None:
        self._datapath_end.close()
        self._test_end.close()


class FakeUnderlay:
    """An ``Underlay`` on an unconnected UDP socket on loopback; ``wire_end`` is its counterpart."""

    def __init__(self, channel: int | None = None) -> None:
        self._sock = _loopback_udp_socket()
        self.wire_end = _loopback_udp_socket()
        self.wire_end.setblocking(False)
        self._channel = channel
        self.foreign: list[bytes] = []
        self.owner_paused = False

    @property
    def sock(self) -> socket.socket:
        return self._sock

    @property
    def peer(self) -> Any:
        return self.wire_end.getsockname()

    @property
    def channel(self) -> int | None:
        return self._channel

    def pause_owner(self) -> None:
        self.owner_paused = True

    def resume_owner(self) -> None:
        self.owner_paused = False

    def deliver_foreign(self, data: bytes, addr: Any) -> None:
        self.foreign.append(data)

    def send_to_datapath(self, datagram: bytes) -> None:
        """A datagram arriving from the wire."""
        self.wire_end.sendto(datagram, self._sock.getsockname())

    def close(self) -> None:
        self._sock.close()
        self.wire_end.close()


def _loopback_udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


Filter = Callable[[bytes], list[bytes]]


class DatagramWire:
    """Carries datagrams between two ``FakeUnderlay``s, through optional filters.

    A filter maps one datagram to the datagrams to deliver (none to drop it,
    two to duplicate it, a changed one to tamper with it). Every datagram seen
    is kept in ``a_to_b`` / ``b_to_a`` for replay tests.
    """

    def __init__(self, a: FakeUnderlay, b: FakeUnderlay) -> None:
        self._a = a
        self._b = b
        self.a_to_b: list[bytes] = []
        self.b_to_a: list[bytes] = []
        self.filter_a_to_b: Filter = lambda d: [d]
        self.filter_b_to_a: Filter = lambda d: [d]
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._a.wire_end.fileno(), self._pump, self._a, self._b, True)
        self._loop.add_reader(self._b.wire_end.fileno(), self._pump, self._b, self._a, False)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._a.wire_end.fileno())
            self._loop.remove_reader(self._b.wire_end.fileno())

    def deliver_to_b(self, datagram: bytes) -> None:
        self._b.send_to_datapath(datagram)

    def _pump(self, src: FakeUnderlay, dst: FakeUnderlay, a_to_b: bool) -> None:
        while True:
            try:
                data = src.wire_end.recv(65536)
            except BlockingIOError:
                return
            (self.a_to_b if a_to_b else self.b_to_a).append(data)
            for out in (self.filter_a_to_b if a_to_b else self.filter_b_to_a)(data):
                dst.send_to_datapath(out)


class FakeTapDevice:
    """``evio.tunnel.datapath.tap.TapDevice`` over a FakeTap: what a tunnel's tap factory returns in tests."""

    def __init__(self, name: str, mtu: int) -> None:
        self.tap = FakeTap()
        self._name = name
        self._mtu = mtu
        self.closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def fd(self) -> int:
        return self.tap.fd

    @property
    def mtu(self) -> int:
        return self._mtu

    @property
    def vnet_hdr(self) -> bool:
        return False  # a socketpair has no virtio-net header

    async def close(self) -> None:
        if not self.closed:
            self.tap.close()
            self.closed = True
