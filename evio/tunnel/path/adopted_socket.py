"""Borrowing the ICE-selected socket from aioice for the data path.

aioice reads its sockets through asyncio datagram transports, which cost a
buffer allocation and a callback per datagram, and uvloop's UDP transport
cannot even be paused. So once ICE has selected a pair, ``adopt`` swaps the
loop transport under the pair's aioice protocol for an ``AdoptedTransport``
on a duplicate of the same socket:

- the NAT binding (and TURN allocation) stays, as it is the same socket;
- aioice keeps working unchanged (consent checks, TURN refreshes and channel
  binds, DTLS through ``Connection.send/recv``): the adopted transport reads
  for it whenever the data path does not, and the data path hands it every
  datagram that is not a record (``deliver_foreign``);
- closing the ICE connection closes the adopted transport, as before.

For a relayed pair the socket is the TURN client's, which aioice connected to
the TURN server (and must stay so: dissolving the association would also
drop its port, and with it the allocation). Under uvloop a connected UDP
socket's first ICMP error stops its fd reader for good, so the data path
re-arms its reader from time to time (``Datapath.maintain``). Records then travel as ChannelData on the channel aioice bound to the
peer during the checks; that channel stays alive because aioice refreshes
it whenever consent checks go through it (every 5 s, well within the 10 minute
channel lifetime).

This module touches aioice internals (``TurnTransport``'s inner protocol,
protocol ``transport`` attributes); aioice is pinned to 0.13 in pyproject.toml
and tests/integration cover both paths.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Any

from aioice import turn
from aioice.ice import StunProtocol

from evio.tunnel.errors import SetupError

logger = logging.getLogger(__name__)

_RECV_LEN = 65536
# Bigger socket buffers absorb bursts of a TCP flow through the tunnel.
SOCKET_BUFFER = 4194304


class _Detached(asyncio.DatagramProtocol):
    """Receives the old transport's last callbacks after adoption."""


class AdoptedTransport(asyncio.DatagramTransport):
    """A datagram transport over a socket we own, that can lend its reads to the data path.

    ``default_addr`` stands in for a connected socket's peer: ``sendto(data)``
    without an address goes there.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: asyncio.DatagramProtocol,
        default_addr: tuple[str, int] | None = None,
    ) -> None:
        super().__init__()
        self._loop = loop
        self.sock = sock
        self.protocol = protocol
        self.default_addr = default_addr
        self._closing = False
        self._reading = False
        self._lent = False  # the data path reads this socket: it must outlive that
        self.receive_failures = 0
        sock.setblocking(False)

    def lend(self) -> None:
        """The data path reads the socket from now on (this transport stops reading it)."""
        self.pause_reading()
        self._lent = True  # one data path at a time; lending again (a path swap) changes nothing

    def give_back(self) -> None:
        """The data path no longer reads the socket: read it again, or close it if the owner
        closed the transport meanwhile."""
        self._lent = False
        if self._closing:
            self.sock.close()
        else:
            self.resume_reading()

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False

    def is_reading(self) -> bool:
        return self._reading

    def sendto(self, data: Any, addr: Any = None) -> None:
        if self._closing:
            return
        target = addr or self.default_addr
        if target is None:
            return
        try:
            self.sock.sendto(data, target)
        except (BlockingIOError, InterruptedError):
            pass  # a full buffer drops the datagram, as UDP would
        except OSError as exc:
            self.protocol.error_received(exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self.sock
        if name == "sockname":
            return self.sock.getsockname()
        if name == "peername":
            return self.default_addr or default
        return default

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self.pause_reading()
        self._closing = True
        # aioice closes its connection on its own (consent expired); a data path still reading the
        # socket would then poll a closed fd, or another socket that got the same number. The
        # socket is closed when the data path gives it back.
        if not self._lent:
            self.sock.close()
        self._loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def _on_readable(self) -> None:
        for _ in range(64):
            try:
                data, addr = self.sock.recvfrom(_RECV_LEN)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.protocol.error_received(exc)
                return
            try:
                self.protocol.datagram_received(data, addr)
            except Exception:
                self.receive_failures += 1
                if self.receive_failures == 1 or self.receive_failures % 1000 == 0:
                    logger.warning("tunnel socket: receiver failed on a datagram from %s (%d so far)", addr, self.receive_failures, exc_info=True)


def _adopt_transport(owner: Any, default_addr: tuple[str, int] | None = None) -> AdoptedTransport:
    """Replace ``owner.transport`` (a loop datagram transport) with an AdoptedTransport."""
    old = owner.transport
    if isinstance(old, AdoptedTransport):
        return old
    raw = old.get_extra_info("socket")
    if raw is None:
        raise SetupError("ICE transport has no socket to adopt")
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    for option in ((socket.SO_SNDBUF, socket.SO_RCVBUF) if SOCKET_BUFFER else ()):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:
            pass
    loop = asyncio.get_running_loop()
    adopted = AdoptedTransport(loop, sock, owner, default_addr)
    # The old transport closes its own fd; ours is a duplicate and stays open.
    old.set_protocol(_Detached())
    old.close()
    owner.transport = adopted
    adopted.resume_reading()
    return adopted


class AioiceUnderlay:
    """The data path's ``Underlay`` for an aioice candidate pair."""

    def __init__(self, transport: AdoptedTransport, peer: tuple[str, int], channel: int | None) -> None:
        self._transport = transport
        self._peer = peer
        self._channel = channel

    @property
    def sock(self) -> socket.socket:
        return self._transport.sock

    @property
    def peer(self) -> tuple[str, int]:
        return self._peer

    @property
    def channel(self) -> int | None:
        return self._channel

    def pause_owner(self) -> None:
        self._transport.lend()

    def resume_owner(self) -> None:
        self._transport.give_back()

    def deliver_foreign(self, data: bytes, addr: tuple[str, int]) -> None:
        self._transport.protocol.datagram_received(data, addr)


def adopt(protocol: StunProtocol, remote_addr: tuple[str, int]) -> AioiceUnderlay:
    """Take the socket of a selected pair (its local protocol and remote address)."""
    transport = protocol.transport
    if isinstance(transport, turn.TurnTransport):
        inner = getattr(transport, "_TurnTransport__inner_protocol", None)
        if not isinstance(inner, turn.TurnClientUdpProtocol):
            raise SetupError("relayed pair is not TURN over UDP; the fast data path needs UDP")
        channel = inner.peer_to_channel.get(remote_addr)
        if channel is None:
            raise SetupError(f"no TURN channel bound to {remote_addr}")
        # The address the socket is connected to, not aioice's ``server``, which is the configured
        # host: a DNS name (the data path's sendmmsg wants an address; sendto would resolve per datagram).
        peername = inner.transport.get_extra_info("peername")
        server = (str(peername[0]), int(peername[1])) if peername else inner.server
        return AioiceUnderlay(_adopt_transport(inner, server), server, channel)
    return AioiceUnderlay(_adopt_transport(protocol), remote_addr, None)

