"""Bursts of datagrams with one system call (sendmmsg(2), recvmmsg(2)), for the data path.

Python's socket module has neither. A TAP read burst becomes up to ``slots``
records sealed in place into a ring of preallocated slots, then one call
sends them all; on the way in, one call fills a ring with whatever datagrams
are queued. One kernel crossing per burst instead of one per frame: the
largest per-packet cost left in the Python data path (docs/design.md,
"Data path").

``SendBatch`` / ``RecvBatch`` call libc through ctypes; ``SendtoBatch`` /
``RecvfromBatch`` are the same interfaces over the socket module, for
platforms without them.

UDP GSO (Linux 4.18+): ``SendBatch`` hands each run of equal-sized records
(a bulk TCP stream's full frames) to the kernel as ONE message with
``UDP_SEGMENT`` set to the record size. It leaves as the same datagrams, but
the kernel routes, filters, NATs and forwards it as one packet until it is
split, at the receiving socket or at a device that cannot carry it: the
per-datagram cost of the sending host's stack is paid once per run. The wire
is unchanged, so the peer needs nothing. Where a route cannot do it (no
checksum offload: EIO), the batch is sent again one datagram per message and
GSO stays off for that ring.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import socket
import struct
from typing import Any, Protocol

from evio.tunnel.datapath.buffers import release, zeroed

logger = logging.getLogger(__name__)


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
SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
GRO_SLOT_SIZE = 65536
"""A GRO message is up to 64 KiB of equal datagrams back to back (at most one shorter, last)."""
UDP_MAX_SEGMENTS = 64  # the kernel takes up to 128 per message; 64 keeps a message under 64 KiB at 1 KiB
_GSO_MAX_BYTES = 65000  # a GSO message is one IP packet to the kernel: under 64 KiB with headers
_CMSG_SPACE = 24  # struct cmsghdr (len 8, level 4, type 4) + a u16, aligned to 8


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


class SlotRing:
    """A ring of ``slots`` buffers of ``slot_size`` bytes, seen as one writable view (every batch kind).

    The ring's memory is ``buffers.zeroed``: pages are taken as traffic writes them."""

    _slots: int
    _slot_size: int
    _view: memoryview
    _memory: bytearray | mmap.mmap | None = None

    def release(self) -> None:
        """Hand the pages written so far back to the kernel (the ring stays usable)."""
        release(self._memory)

    @property
    def memory(self) -> bytearray | mmap.mmap | None:
        """The buffer behind the ring (None: the ring keeps its bytes elsewhere)."""
        return self._memory

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def slot_size(self) -> int:
        return self._slot_size

    @property
    def view(self) -> memoryview:
        """The whole ring, writable: slot i starts at i * slot_size."""
        return self._view


class Slotted(Protocol):
    """What every batch kind offers of its ring (``SlotRing`` implements it)."""

    @property
    def slots(self) -> int: ...

    @property
    def slot_size(self) -> int: ...

    @property
    def view(self) -> memoryview:
        """The whole ring, writable: slot i starts at i * slot_size."""

    @property
    def memory(self) -> bytearray | mmap.mmap | None: ...

    def release(self) -> None: ...


class DatagramBatch(Slotted, Protocol):
    def set_length(self, slot: int, length: int) -> None: ...

    def length(self, slot: int) -> int: ...

    def send(self, sock: socket.socket, count: int) -> int:
        """Send slots 0..count-1 as datagrams; returns how many left (the rest are dropped)."""


class SendBatch(SlotRing):
    """A ring of ``slots`` datagram buffers to one destination, flushed by one sendmmsg(2).

    With ``gso``, runs of equal-sized datagrams go as one ``UDP_SEGMENT`` message each (module doc).
    """

    def __init__(self, slots: int, slot_size: int, destination: Any, gso: bool = True) -> None:
        if _sendmmsg is None:
            raise OSError("sendmmsg is not available")
        self._slots = slots
        self._slot_size = slot_size
        self._memory = zeroed(slots * slot_size)
        self._ring = (ctypes.c_char * (slots * slot_size)).from_buffer(self._memory)
        self._view = memoryview(self._ring).cast("B")
        name = sockaddr(destination)
        self._name = ctypes.create_string_buffer(name, len(name))
        self._iov = (_Iovec * slots)()
        self._msgs = (_Mmsghdr * slots)()
        self._gso_msgs = (_Mmsghdr * slots)()
        self._cmsgs = (ctypes.c_char * (slots * _CMSG_SPACE))()
        base = ctypes.addressof(self._ring)
        cmsgs = ctypes.addressof(self._cmsgs)
        for i in range(slots):
            self._iov[i].base = base + i * slot_size
            for msgs in (self._msgs, self._gso_msgs):
                hdr = msgs[i].hdr
                hdr.name = ctypes.addressof(self._name)
                hdr.namelen = len(name)
                hdr.iov = ctypes.addressof(self._iov[i])
                hdr.iovlen = 1
            struct.pack_into("=QiiH", self._cmsgs, i * _CMSG_SPACE, 18, SOL_UDP, UDP_SEGMENT, 0)  # CMSG_LEN(2)
        # iovec i's length is 64-bit word 2i + 1 of the iovec array.
        self._lengths = memoryview(self._iov).cast("B").cast("Q")
        self._msgs_address = ctypes.addressof(self._msgs)
        # GSO messages are rewritten per burst: message m's iov, iovlen, control, controllen are
        # 64-bit words 8m + 2 .. 8m + 5; its segment size is 16-bit word 12m + 8 of the cmsg area.
        self._gso_words = memoryview(self._gso_msgs).cast("B").cast("Q")
        self._gso_address = ctypes.addressof(self._gso_msgs)
        self._segments = memoryview(self._cmsgs).cast("B").cast("H")
        self._iov_address = ctypes.addressof(self._iov)
        self._cmsg_address = cmsgs
        self._gso = gso
        self._group_sizes = [0] * slots

    @property
    def gso(self) -> bool:
        """Whether runs of equal datagrams still go as UDP GSO messages (off after a route refused one)."""
        return self._gso

    def set_length(self, slot: int, length: int) -> None:
        self._lengths[2 * slot + 1] = length

    def length(self, slot: int) -> int:
        return int(self._lengths[2 * slot + 1])

    def send(self, sock: socket.socket, count: int) -> int:
        if self._gso and count > 1:
            sent = self._send_gso(sock, count)
            if sent is not None:
                return sent
        sent = _sendmmsg(sock.fileno(), self._msgs_address, count, 0)
        return max(sent, 0)

    def _send_gso(self, sock: socket.socket, count: int) -> int | None:
        """Datagrams sent, or None when the route refused GSO (then nothing was sent)."""
        lengths = self._lengths
        words = self._gso_words
        segments = self._segments
        groups = self._group_sizes
        iov_address = self._iov_address
        cmsg_address = self._cmsg_address
        messages = 0
        i = 0
        while i < count:
            size = lengths[2 * i + 1]
            end = min(count, i + min(UDP_MAX_SEGMENTS, _GSO_MAX_BYTES // size if size else 1))
            j = i + 1
            while j < end and lengths[2 * j + 1] == size:
                j += 1
            if j < end and lengths[2 * j + 1] < size:  # a shorter datagram may end a run
                j += 1
            at = 8 * messages
            words[at + 2] = iov_address + 16 * i
            words[at + 3] = j - i
            if j - i > 1:
                words[at + 4] = cmsg_address + _CMSG_SPACE * messages
                words[at + 5] = _CMSG_SPACE
                segments[12 * messages + 8] = size
            else:
                words[at + 4] = 0
                words[at + 5] = 0
            groups[messages] = j - i
            messages += 1
            i = j
        sent = _sendmmsg(sock.fileno(), self._gso_address, messages, 0)
        if sent < 0:
            err = ctypes.get_errno()
            if err in (errno.EIO, errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP):
                # Refused by this route or kernel, not a full buffer: send without, from now on.
                self._gso = False
                logger.info("UDP GSO refused (%s); sending one datagram per message", errno.errorcode.get(err, err))
                return None
            return 0
        return sum(groups[:sent])


class SendtoBatch(SlotRing):
    """``DatagramBatch`` over one sendto per datagram (no sendmmsg)."""

    def __init__(self, slots: int, slot_size: int, destination: Any) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._destination = destination
        self._memory = zeroed(slots * slot_size)
        self._view = memoryview(self._memory)
        self._lengths = [0] * slots

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
    """sendmmsg (with UDP GSO) where the platform has it and the destination is an IP address, else sendto."""
    if _sendmmsg is not None and isinstance(destination, tuple):
        try:
            return SendBatch(slots, slot_size, destination)
        except OSError:
            pass
    return SendtoBatch(slots, slot_size, destination)


class ReceiveBatch(Slotted, Protocol):
    """Datagram i of the last burst starts at i * slot_size of ``view``."""

    def recv(self, sock: socket.socket) -> int:
        """Receive what is queued, up to ``slots`` datagrams; 0 when nothing is (never blocks)."""

    def length(self, slot: int) -> int: ...

    def source(self, slot: int) -> tuple[Any, ...]: ...


class RecvBatch(SlotRing):
    """A ring of ``slots`` receive buffers, filled by one recvmmsg(2)."""

    def __init__(self, slots: int, slot_size: int) -> None:
        if _recvmmsg is None:
            raise OSError("recvmmsg is not available")
        self._slots = slots
        self._slot_size = slot_size
        self._memory = zeroed(slots * slot_size)
        self._ring = (ctypes.c_char * (slots * slot_size)).from_buffer(self._memory)
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


class RecvfromBatch(SlotRing):
    """``ReceiveBatch`` over one recvfrom_into per datagram."""

    def __init__(self, slots: int, slot_size: int) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._memory = zeroed(slots * slot_size)
        self._view = memoryview(self._memory)
        self._slot_views = [self._view[i * slot_size : (i + 1) * slot_size] for i in range(slots)]
        self._lengths = [0] * slots
        self._sources: list[tuple[Any, ...]] = [()] * slots

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


class GroRecvBatch(RecvBatch):
    """``RecvBatch`` on a socket with ``UDP_GRO``: each message may hold a run of datagrams.

    The kernel queues a UDP GSO burst from the peer as one buffer instead of
    splitting it at the socket (one queueing, one wake-up, one message per
    burst); ``segment_size(slot)`` says how long each datagram in it is, 0
    when the message is one datagram. Slots are 64 KiB, so there are fewer of them.
    """

    def __init__(self, slots: int, slot_size: int = GRO_SLOT_SIZE) -> None:
        super().__init__(slots, slot_size)
        self._controls = (ctypes.c_char * (slots * _CMSG_SPACE))()
        self._controls_view = memoryview(self._controls).cast("B")
        base = ctypes.addressof(self._controls)
        for i in range(slots):
            self._msgs[i].hdr.control = base + i * _CMSG_SPACE
        self._qwords = memoryview(self._msgs).cast("B").cast("Q")  # message i's controllen: word 8i + 5
        self._used = slots

    def recv(self, sock: socket.socket) -> int:
        qwords = self._qwords
        for i in range(self._used):  # the kernel shortened them to what it wrote
            qwords[8 * i + 5] = _CMSG_SPACE
        received = super().recv(sock)
        self._used = received
        return received

    def segment_size(self, slot: int) -> int:
        """Length of each datagram in message ``slot`` (the last may be shorter); 0: one datagram."""
        controllen = self._qwords[8 * slot + 5]
        if controllen < 20:
            return 0
        length, level, kind = struct.unpack_from("=Qii", self._controls_view, slot * _CMSG_SPACE)
        if level != SOL_UDP or kind != UDP_GRO or length < 20:
            return 0
        return int(struct.unpack_from("=i", self._controls_view, slot * _CMSG_SPACE + 16)[0])


def enable_gro(sock: socket.socket, on: bool = True) -> bool:
    """Turn ``UDP_GRO`` on (or off) on ``sock``; False where the kernel has no such option."""
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, 1 if on else 0)
    except OSError:
        return False
    return True


def make_receive_batch(slots: int, slot_size: int) -> ReceiveBatch:
    if _recvmmsg is not None:
        return RecvBatch(slots, slot_size)
    return RecvfromBatch(slots, slot_size)
