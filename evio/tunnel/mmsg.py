"""Bursts of datagrams with one system call (sendmmsg(2), recvmmsg(2)), for the data path.

Python's socket module has neither. A TAP read burst becomes up to ``slots``
records sealed in place into a ring of preallocated slots, then one call
sends them all; on the way in, one call fills a ring with whatever datagrams
are queued. One kernel crossing per burst instead of one per frame: the
largest per-packet cost left in the Python data path (see the data path
baseline notes).

``SendBatch`` / ``RecvBatch`` call libc through ctypes; ``SendtoBatch`` /
``RecvfromBatch`` are the same interfaces over the socket module, for
platforms without them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
import struct
from typing import Any, Protocol


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.c_void_p),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


def _load(name: str, argtypes: list[Any]) -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


_sendmmsg = _load("sendmmsg", [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int])
_recvmmsg = _load("recvmmsg", [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p])
MSG_DONTWAIT = 0x40
_SOCKADDR_STORAGE = 128


def parse_sockaddr(raw: bytes | memoryview) -> tuple[Any, ...]:
    """A Python socket address from struct sockaddr_in / sockaddr_in6."""
    (family,) = struct.unpack_from("=H", raw, 0)
    if family == socket.AF_INET:
        port, packed = struct.unpack_from("!H4s", raw, 2)
        return socket.inet_ntop(socket.AF_INET, packed), port
    port, flowinfo, packed = struct.unpack_from("!HI16s", raw, 2)
    (scope,) = struct.unpack_from("=I", raw, 24)
    return socket.inet_ntop(socket.AF_INET6, packed), port, flowinfo, scope


def sockaddr(address: Any) -> bytes:
    """struct sockaddr_in / sockaddr_in6 for a Python socket address."""
    host, port = address[0], address[1]
    try:
        return struct.pack("=H", socket.AF_INET) + struct.pack("!H4s8x", port, socket.inet_pton(socket.AF_INET, host))
    except OSError:
        flowinfo = address[2] if len(address) > 2 else 0
        scope = address[3] if len(address) > 3 else 0
        packed = socket.inet_pton(socket.AF_INET6, host)
        return struct.pack("=H", socket.AF_INET6) + struct.pack("!HI16s", port, flowinfo, packed) + struct.pack("=I", scope)


class DatagramBatch(Protocol):
    @property
    def slots(self) -> int: ...

    @property
    def slot_size(self) -> int: ...

    @property
    def view(self) -> memoryview:
        """The whole ring, writable: slot i starts at i * slot_size."""

    def set_length(self, slot: int, length: int) -> None: ...

    def length(self, slot: int) -> int: ...

    def send(self, sock: socket.socket, count: int) -> int:
        """Send slots 0..count-1 as datagrams; returns how many left (the rest are dropped)."""


class SendBatch:
    """A ring of ``slots`` datagram buffers to one destination, flushed by one sendmmsg(2)."""

    def __init__(self, slots: int, slot_size: int, destination: Any) -> None:
        if _sendmmsg is None:
            raise OSError("sendmmsg is not available")
        self._slots = slots
        self._slot_size = slot_size
        self._ring = (ctypes.c_char * (slots * slot_size))()
        self._view = memoryview(self._ring).cast("B")
        name = sockaddr(destination)
        self._name = ctypes.create_string_buffer(name, len(name))
        self._iov = (_Iovec * slots)()
        self._msgs = (_Mmsghdr * slots)()
        base = ctypes.addressof(self._ring)
        for i in range(slots):
            self._iov[i].base = base + i * slot_size
            hdr = self._msgs[i].hdr
            hdr.name = ctypes.addressof(self._name)
            hdr.namelen = len(name)
            hdr.iov = ctypes.addressof(self._iov[i])
            hdr.iovlen = 1
        # iovec i's length is 64-bit word 2i + 1 of the iovec array.
        self._lengths = memoryview(self._iov).cast("B").cast("Q")
        self._msgs_address = ctypes.addressof(self._msgs)

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_size(self) -> int:
        return self._slot_size

    @property
    def view(self) -> memoryview:
        return self._view

    def set_length(self, slot: int, length: int) -> None:
        self._lengths[2 * slot + 1] = length

    def length(self, slot: int) -> int:
        return int(self._lengths[2 * slot + 1])

    def send(self, sock: socket.socket, count: int) -> int:
        sent = _sendmmsg(sock.fileno(), self._msgs_address, count, 0)
        return max(sent, 0)


class SendtoBatch:
    """``DatagramBatch`` over one sendto per datagram (no sendmmsg)."""

    def __init__(self, slots: int, slot_size: int, destination: Any) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._destination = destination
        self._view = memoryview(bytearray(slots * slot_size))
        self._lengths = [0] * slots

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_size(self) -> int:
        return self._slot_size

    @property
    def view(self) -> memoryview:
        return self._view

    def set_length(self, slot: int, length: int) -> None:
        self._lengths[slot] = length

    def length(self, slot: int) -> int:
        return self._lengths[slot]

    def send(self, sock: socket.socket, count: int) -> int:
        for i in range(count):
            start = i * self._slot_size
            try:
                sock.sendto(self._view[start : start + self._lengths[i]], self._destination)
            except OSError:
                return i
        return count


def make_batch(slots: int, slot_size: int, destination: Any) -> DatagramBatch:
    """sendmmsg where the platform has it and the destination is an IP address, else sendto."""
    if _sendmmsg is not None and isinstance(destination, tuple):
        try:
            return SendBatch(slots, slot_size, destination)
        except OSError:
            pass
    return SendtoBatch(slots, slot_size, destination)


class ReceiveBatch(Protocol):
    @property
    def slots(self) -> int: ...

    @property
    def slot_size(self) -> int: ...

    @property
    def view(self) -> memoryview:
        """The whole ring: datagram i starts at i * slot_size."""

    def recv(self, sock: socket.socket) -> int:
        """Receive what is queued, up to ``slots`` datagrams; 0 when nothing is (never blocks)."""

    def length(self, slot: int) -> int: ...

    def source(self, slot: int) -> tuple[Any, ...]: ...


class RecvBatch:
    """A ring of ``slots`` receive buffers, filled by one recvmmsg(2)."""

    def __init__(self, slots: int, slot_size: int) -> None:
        if _recvmmsg is None:
            raise OSError("recvmmsg is not available")
        self._slots = slots
        self._slot_size = slot_size
        self._ring = (ctypes.c_char * (slots * slot_size))()
        self._view = memoryview(self._ring).cast("B")
        self._names = (ctypes.c_char * (slots * _SOCKADDR_STORAGE))()
        self._names_view = memoryview(self._names).cast("B")
        self._iov = (_Iovec * slots)()
        self._msgs = (_Mmsghdr * slots)()
        base = ctypes.addressof(self._ring)
        names = ctypes.addressof(self._names)
        for i in range(slots):
            self._iov[i].base = base + i * slot_size
            self._iov[i].len = slot_size
            hdr = self._msgs[i].hdr
            hdr.name = names + i * _SOCKADDR_STORAGE
            hdr.namelen = _SOCKADDR_STORAGE
            hdr.iov = ctypes.addressof(self._iov[i])
            hdr.iovlen = 1
        # Per message (64 bytes): namelen is 32-bit word 2, msg_len 32-bit word 14.
        self._words = memoryview(self._msgs).cast("B").cast("I")
        self._msgs_address = ctypes.addressof(self._msgs)

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_size(self) -> int:
        return self._slot_size

    @property
    def view(self) -> memoryview:
        return self._view

    def recv(self, sock: socket.socket) -> int:
        received = _recvmmsg(sock.fileno(), self._msgs_address, self._slots, MSG_DONTWAIT, None)
        if received <= 0:
            return 0
        words = self._words
        for i in range(received):  # the kernel shortened them to the actual address length
            words[16 * i + 2] = _SOCKADDR_STORAGE
        return received

    def length(self, slot: int) -> int:
        return int(self._words[16 * slot + 14])

    def source(self, slot: int) -> tuple[Any, ...]:
        start = slot * _SOCKADDR_STORAGE
        return parse_sockaddr(self._names_view[start : start + _SOCKADDR_STORAGE])


class RecvfromBatch:
    """``ReceiveBatch`` over one recvfrom_into per datagram."""

    def __init__(self, slots: int, slot_size: int) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._view = memoryview(bytearray(slots * slot_size))
        self._slot_views = [self._view[i * slot_size : (i + 1) * slot_size] for i in range(slots)]
        self._lengths = [0] * slots
        self._sources: list[tuple[Any, ...]] = [()] * slots

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_size(self) -> int:
        return self._slot_size

    @property
    def view(self) -> memoryview:
        return self._view

    def recv(self, sock: socket.socket) -> int:
        for i in range(self._slots):
            try:
                self._lengths[i], self._sources[i] = sock.recvfrom_into(self._slot_views[i])
            except BlockingIOError:
                return i
            except OSError:
                return i  # an ICMP error report: what came before it is still good
        return self._slots

    def length(self, slot: int) -> int:
        return self._lengths[slot]

    def source(self, slot: int) -> tuple[Any, ...]:
        return self._sources[slot]


def make_receive_batch(slots: int, slot_size: int) -> ReceiveBatch:
    if _recvmmsg is not None:
        return RecvBatch(slots, slot_size)
    return RecvfromBatch(slots, slot_size)
