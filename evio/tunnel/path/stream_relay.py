"""The data path over TURN on TCP or TLS: a bridge from the stream to a datagram socket (decision 0049).

The data path (Python and native alike) reads and writes one UDP socket with
recvmmsg/sendmmsg and, on a relayed path, frames each record as ChannelData
itself. A TURN client on TCP or TLS has no datagram socket to lend, so
``adopt_stream`` gives the data path one: a UDP socket on loopback
(``StreamRelayUnderlay.sock``), whose peer is the bridge's own loopback
socket. The bridge moves whole ChannelData messages between the two:

    out  data path --sendmmsg--> bridge socket --> pad to 4 bytes (RFC 8656
         section 12.5), a burst joined into one write --> the stream;
    in   the stream --> split into messages (``split_stream``) --> ChannelData
         on our channel: sent to the data path's socket, unpadded; anything
         else (STUN: refreshes, permissions, channel binds; other channels)
         to aioice's TURN client, as it would have had it.

Nothing is lost quietly. Messages are only ever written whole, so the stream
keeps its framing whatever is dropped. Outbound, when the stream's send buffer
holds more than ``HIGH_WATER`` (the TURN server or the path is slower than the
tunnel's offered load), a record is dropped whole and counted
(``dropped_full``, logged once a minute), as a full UDP socket buffer would;
inbound, the data path's socket is never overrun: when its receive queue is
half full (SO_MEMINFO) the bridge stops reading the stream until the data path
has drained it, and TCP's flow control pushes back to the TURN server.

aioice keeps working as before (allocation and channel refreshes, consent
checks, DTLS through ``Connection.send/recv``): its writes go to the same
stream, whole messages each, and what the bridge does not take goes to it.
``resume_owner`` (the data path stops or moves away) gives the stream back.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from aioice import turn
from aioice.ice import StunProtocol

from evio.ratelimit import LogLimiter
from evio.tunnel.errors import SetupError
from evio.tunnel.path.adopted_socket import SOCKET_BUFFER

logger = logging.getLogger(__name__)

HIGH_WATER = 1 << 21
"""Bytes the stream's send buffer (asyncio's, above the kernel's) may hold before records are dropped."""
_BURST = 256  # datagrams the bridge takes from the data path per wake-up
_SO_MEMINFO = 55  # linux/socket.h: sk_meminfo; [0] bytes in the receive queue, [1] its limit
_MEMINFO = struct.Struct("9I")
_LOOPBACK = "127.0.0.1"
_drop_log = LogLimiter[None](60.0)


def padded_len(n: int) -> int:
    return (n + 3) & ~3


def split_stream(buf: bytearray, start: int) -> tuple[list[tuple[int, int, bool]], int]:
    """The whole messages in ``buf[start:]``: (offset, length without padding, is ChannelData) each,
    and where the first incomplete one starts. ChannelData: a 4-byte header with its length; STUN: 20
    bytes and its length; both padded to 4 bytes on a stream (RFC 8656 section 12.5)."""
    found: list[tuple[int, int, bool]] = []
    end = len(buf)
    at = start
    while end - at >= 4:
        length = buf[at + 2] << 8 | buf[at + 3]
        channel = (buf[at] & 0xC0) == 0x40
        size = 4 + length if channel else 20 + length
        full = padded_len(size)
        if end - at < full:
            break
        found.append((at, size, channel))
        at += full
    return found, at


def _buffer(sock: socket.socket) -> None:
    for option, forced in ((socket.SO_SNDBUF, 32), (socket.SO_RCVBUF, 33)):  # SO_SNDBUFFORCE, SO_RCVBUFFORCE
        try:
            sock.setsockopt(socket.SOL_SOCKET, forced, SOCKET_BUFFER)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            except OSError:
                pass


class StreamBridge:
    """Moves ChannelData between a TURN client's stream and the data path's loopback socket (module doc)."""

    def __init__(self, inner: turn.TurnClientTcpProtocol, channel: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._inner = inner
        self._stream: asyncio.Transport = inner.transport
        self._channel = channel
        self.datapath_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for sock in (self.datapath_sock, self._sock):
            _buffer(sock)
            sock.bind((_LOOPBACK, 0))
            sock.setblocking(False)
        self.address: tuple[str, int] = self._sock.getsockname()
        self._datapath_addr: tuple[str, int] = self.datapath_sock.getsockname()
        self._pending = bytearray(getattr(inner, "buffer", b""))  # what aioice had read but not parsed yet
        self._at = 0
        self._reading = True
        self._resume: asyncio.TimerHandle | None = None
        self.dropped_full = 0
        self.dropped_closed = 0
        self.foreign = 0
        self.records_out = self.records_in = 0
        self._attached = False

    def attach(self) -> None:
        """From now on the bridge reads the stream (before aioice does) and the bridge socket."""
        if self._attached:
            return
        self._attached = True
        self._inner.buffer = b""
        self._inner.data_received = self._data_received  # type: ignore[method-assign]
        self._loop.add_reader(self._sock.fileno(), self._outbound)
        if self._pending:
            self._parse()

    def detach(self) -> None:
        """aioice reads the stream again (with what the bridge had not parsed); the sockets are closed."""
        if not self._attached:
            return
        self._attached = False
        self._loop.remove_reader(self._sock.fileno())
        if self._resume is not None:
            self._resume.cancel()
        del self._inner.data_received  # aioice's own method again
        if not self._reading and not self._stream.is_closing():
            self._stream.resume_reading()
        left = bytes(self._pending[self._at :])
        self._pending.clear()
        self._at = 0
        self._sock.close()
        self.datapath_sock.close()
        if left:
            self._inner.data_received(left)

    # -- out: data path -> stream -------------------------------------------------------

    def _outbound(self) -> None:
        sock = self._sock
        parts: list[bytes] = []
        for _ in range(_BURST):
            try:
                data, addr = sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if addr != self._datapath_addr:
                self.foreign += 1  # another local process: not ours to relay
                continue
            pad = padded_len(len(data)) - len(data)
            parts.append(data + bytes(pad) if pad else data)
        if not parts:
            return
        if self._stream.is_closing():
            # The TURN server's connection is gone (``watch_stream`` has told the tunnel).
            self.dropped_closed += len(parts)
            return
        if self._stream.get_write_buffer_size() > HIGH_WATER:
            self.dropped_full += len(parts)
            if _drop_log.should_log(None, time.monotonic()):
                logger.warning("tunnel TURN stream full: %d records dropped so far (the relay is slower than the tunnel's load)",
                               self.dropped_full)
            return
        self.records_out += len(parts)
        self._stream.write(b"".join(parts))

    # -- in: stream -> data path ----------------------------------------------------------

    def _data_received(self, data: bytes) -> None:
        self._pending += data
        self._parse()

    def _parse(self) -> None:
        buf = self._pending
        found, at = split_stream(buf, self._at)
        channel_hi, channel_lo = self._channel >> 8, self._channel & 0xFF
        view = memoryview(buf)
        server = self._inner.server
        try:
            for offset, size, is_channel in found:
                if is_channel and buf[offset] == channel_hi and buf[offset + 1] == channel_lo:
                    try:
                        self._sock.sendto(view[offset : offset + size], self._datapath_addr)
                        self.records_in += 1
                    except (BlockingIOError, InterruptedError):
                        self.dropped_full += 1  # never with the queue check below; counted if it happens
                    continue
                # The TURN client's (wrapped by the inbound gate: nothing raised here escapes).
                self._inner.datagram_received(bytes(view[offset : offset + size]), server)
        finally:
            view.release()
        if at >= len(buf):
            buf.clear()
            self._at = 0
        elif at > 1 << 16:
            del buf[:at]
            self._at = 0
        else:
            self._at = at
        if found and self._datapath_queue_filling():
            self._pause()

    def _datapath_queue_filling(self) -> bool:
        try:
            used, limit = _MEMINFO.unpack(self.datapath_sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO.size))[:2]
        except OSError:
            return False
        return used * 2 > limit

    def _pause(self) -> None:
        if self._reading and not self._stream.is_closing():
            self._stream.pause_reading()
            self._reading = False
            self._resume = self._loop.call_later(0.001, self._try_resume)

    def _try_resume(self) -> None:
        self._resume = None
        if not self._attached or self._reading:
            return
        if self._datapath_queue_filling():
            self._resume = self._loop.call_later(0.001, self._try_resume)
            return
        self._reading = True
        if not self._stream.is_closing():
            self._stream.resume_reading()


class StreamRelayUnderlay:
    """The data path's ``Underlay`` for a pair relayed by a TURN client on TCP or TLS (module doc)."""

    def __init__(self, bridge: StreamBridge, channel: int) -> None:
        self._bridge = bridge
        self._channel = channel

    @property
    def bridge(self) -> StreamBridge:
        return self._bridge

    @property
    def sock(self) -> socket.socket:
        return self._bridge.datapath_sock

    @property
    def peer(self) -> tuple[str, int]:
        return self._bridge.address

    @property
    def channel(self) -> int | None:
        return self._channel

    def pause_owner(self) -> None:
        self._bridge.attach()

    def resume_owner(self) -> None:
        self._bridge.detach()

    def deliver_foreign(self, data: bytes, addr: Any) -> None:
        # ChannelData on our channel that is no record (aioice's consent checks and DTLS): the TURN client's.
        self._bridge._inner.datagram_received(data, self._bridge._inner.server)


def watch_stream(protocol: StunProtocol, callback: Callable[[], None]) -> None:
    """``callback`` (soon, on the loop) when the TURN client's stream under ``protocol`` closes; nothing for UDP."""
    transport = protocol.transport
    inner = getattr(transport, "_TurnTransport__inner_protocol", None) if isinstance(transport, turn.TurnTransport) else None
    if not isinstance(inner, turn.TurnClientTcpProtocol):
        return
    lost = inner.connection_lost
    loop = asyncio.get_running_loop()

    def connection_lost(exc: Exception | None) -> None:
        lost(exc)
        loop.call_soon(callback)

    inner.connection_lost = connection_lost  # type: ignore[method-assign]
    if inner.transport.is_closing():
        loop.call_soon(callback)


def adopt_stream(protocol: StunProtocol, remote_addr: tuple[str, int]) -> StreamRelayUnderlay:
    """The underlay of a selected pair whose local candidate is relayed by TURN over TCP or TLS."""
    transport = protocol.transport
    inner = getattr(transport, "_TurnTransport__inner_protocol", None) if isinstance(transport, turn.TurnTransport) else None
    if not isinstance(inner, turn.TurnClientTcpProtocol):
        raise SetupError("not a pair relayed by TURN over TCP or TLS")
    channel = inner.peer_to_channel.get(remote_addr)
    if channel is None:
        raise SetupError(f"no TURN channel bound to {remote_addr}")
    if inner.transport.is_closing():
        raise SetupError("the TURN server's connection is closed")
    return StreamRelayUnderlay(StreamBridge(inner, channel), channel)
