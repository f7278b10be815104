"""``FdDatapath``: the Python data path, built for per-packet cost: its start, stop, upkeep and path moves.

Its two directions are modules of their own, each with its numbered flow at
its head: send.py (TAP -> underlay, ``SendPath``) and receive.py (underlay ->
TAP, ``ReceivePath``); the fields both read are made in fd_state.py.

Why it looks like this (docs/design.md, "Data path"):
- Both fds are read with ``loop.add_reader`` and drained without blocking into
  preallocated rings; asyncio datagram transports would allocate a 256 KiB
  buffer per datagram.
- The socket side moves a whole burst per system call: up to ``batch``
  records sealed into a ring go out with one sendmmsg(2), and one recvmmsg(2)
  takes whatever is queued (mmsg.py). The TAP side has no such call: one
  readv / write per frame. Measured here: about 3 us of sender CPU less per
  frame than one sendto per frame.
- No buffers are allocated per frame (small ints and an unpack tuple aside):
  every slice the AEAD needs is a memoryview made on the first frame of each
  size and kept, and AEAD works in place (``encrypt_into`` / ``decrypt_into``).
- The common case (a frame record of the current epoch, in order) is handled
  inline; control records, other epochs and odd sizes take ``_open_slow``,
  which allocates and is kept simple.
- No logging per frame: drops are counted by reason and reported by stats.

With offloads (docs/design.md, "TAP offloads"), a TAP opened with a vnet
header takes its own two passes: ``_tap_pass_vnet`` cuts each TCP
super-frame into records in place (``offload.segment_tcp``) and flushes the
ring whenever it fills; ``_sock_pass_offload`` takes UDP GRO messages (a
burst of records in one buffer) and feeds the opened frames to a
``TcpCoalescer``, which writes one super-frame per run of segments. The
records are the same either way; the passes without offloads are unchanged.

The transit fast path (transit_table.py) touches two places only: a hook that sees
every opened frame before the TAP does (``set_transit``) and may send it on
by another tunnel instead, and ``accept_plain`` / ``flush_plain``, by which
another tunnel's data path hands this one a plain frame to seal and send.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import socket
from collections.abc import Callable
from typing import Any

from evio.tunnel.datapath.buffers import release
from evio.tunnel.datapath.interface import ControlHandler, DatapathStats, DropReason, Underlay, clear_socket_error
from evio.tunnel.datapath.keys import SessionSecrets
from evio.tunnel.datapath.mmsg import enable_gro, make_receive_batch
from evio.tunnel.datapath.mtu import TURN_CHANNEL_HEADER_LEN
from evio.tunnel.datapath.receive import ReceivePath, record_in
from evio.tunnel.datapath.send import SendPath
from evio.tunnel.datapath.transit_table import TransitDestinations, TransitHook
from evio.tunnel.stun_framing import check_framing

logger = logging.getLogger(__name__)

_SIDE_RECV_LEN = 65536


class FdDatapath(SendPath, ReceivePath):
    """Datapath over a TAP fd and a non-blocking UDP socket, driven by the event loop."""

    implementation = "python"
    """Which passes run: "python" here, "native" in native.py's subclass (status, metrics)."""

    # The constructor is FdState's (fd_state.py): mtu, rekey, replay_window, batch, the ring factories,
    # gro (receive with UDP GRO where the kernel has it) and trim_after (seconds without a frame after
    # which ``maintain`` hands the buffers' pages back to the kernel).

    # -- interface -----------------------------------------------------------------

    def start(
        self, tap_fd: int, underlay: Underlay, secrets: SessionSecrets, on_control: ControlHandler,
        vnet_hdr: bool = False,
    ) -> None:
        if self._running:
            raise RuntimeError("data path already started")
        self._loop = asyncio.get_running_loop()
        self._underlay = underlay
        self._tap_fd = tap_fd
        self._on_control = on_control
        self._vnet = vnet_hdr
        self._cipher = secrets.cipher
        self._tx_limit = self._rekey_policy.record_limit(secrets.cipher)
        self._set_tx(secrets.tx)
        self._rx = self._new_rx_epoch(secrets.rx)
        self._rx_next = self._new_rx_epoch(secrets.rx.next())
        self._rx_prev = None
        os.set_blocking(tap_fd, False)
        self._install(underlay)
        self._loop.add_reader(tap_fd, self._readers()[1])
        self._running = True

    def _install(self, underlay: Underlay) -> None:
        """Make ``underlay`` the path records are sent on and read from in bursts."""
        assert self._loop is not None
        self._underlay = underlay
        # GRO only on a real socket this data path reads with recvmmsg (not under test doubles).
        self._gro = (self._want_gro and self._receive_batch_factory is make_receive_batch
                     and isinstance(underlay.sock, socket.socket) and enable_gro(underlay.sock))  # fmt: skip
        self._prepare_buffers(underlay)
        underlay.sock.setblocking(False)
        self._sock_fd = underlay.sock.fileno()
        underlay.pause_owner()
        self._sock_reader = self._readers()[0]
        self._loop.add_reader(self._sock_fd, self._sock_reader)

    def _readers(self) -> tuple[Callable[[], int], Callable[[], int]]:
        """The socket's and the TAP's reader (a native data path overrides this, native.py)."""
        return (self._sock_pass_offload if self._gro or self._vnet else self._sock_pass,
                self._tap_pass_vnet if self._vnet else self._tap_pass)  # fmt: skip

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        assert self._loop is not None and self._underlay is not None
        self._loop.remove_reader(self._tap_fd)
        self._loop.remove_reader(self._sock_fd)
        if self._gro:
            enable_gro(self._underlay.sock, False)  # the owner reads one datagram per call again
        self._underlay.resume_owner()
        self.release_side()
        self._release_buffers()

    def maintain(self) -> None:
        """Re-arm the socket reader: uvloop drops it for good on a socket error (an ICMP
        error on a connected socket); clearing the error and registering again recovers.
        Not while records keep coming in (the reader they came through was armed since the last
        call): a re-arm is some ten system calls, on every tick of every tunnel, and an idle
        tunnel's echo exchange brings a record every interval. A reader dropped meanwhile is
        re-armed a tick later than it would have been, at the first tick that finds nothing new."""
        if not self._running:
            return
        assert self._loop is not None and self._underlay is not None
        received = self._rx_frames + self._rx_control
        if received == self._received_at_maintain or self._side is not None:
            clear_socket_error(self._underlay.sock)
            self._loop.remove_reader(self._sock_fd)
            self._loop.add_reader(self._sock_fd, self._sock_reader)
        self._received_at_maintain = received
        if self._side is not None:
            clear_socket_error(self._side.sock)
            self._loop.remove_reader(self._side_fd)
            self._loop.add_reader(self._side_fd, self._side_pass)
        self._trim_if_idle(self._loop.time())

    def _trim_if_idle(self, now: float) -> None:
        """A burst at full rate leaves the rings resident (a GRO ring is 1 MiB); once the tunnel has
        carried no frame for ``trim_after`` seconds their pages go back to the kernel, once, and the
        next burst takes them again (a page fault each, about 300 for a whole GRO ring)."""
        frames = self._tx_frames + self._rx_frames
        if frames != self._frames_seen:
            self._frames_seen, self._busy_at, self._trimmed = frames, now, False
        elif not self._trimmed and now - self._busy_at >= self._trim_after and self._slot == 0:
            self._release_buffers()
            self._trimmed = True

    # -- path moves ----------------------------------------------------------------
    # Keys, epochs, counters and replay windows belong to the session, not to a path:
    # a move changes only the socket, the address and the ChannelData framing.


    def add_underlay(self, underlay: Underlay, on_move: Callable[[], None] | None = None) -> None:
        """A second path to the peer, validated by ICE (the direct one, found after the relay):
        read it beside the current one; the first authenticated, non-replayed record that comes
        by it moves the data path there (the peer moved first), and ``on_move`` is called."""
        if self._running and self._side is None:
            self._on_move = on_move
            self._attach_side(underlay, moves=True)

    def move_underlay(self, underlay: Underlay) -> None:
        """Send on ``underlay`` from now on. The path left is still read, for records in flight
        and for the peer until it moves too, until ``release_side``."""
        if not self._running or underlay is self._underlay:
            return
        if self._side is underlay:
            assert self._loop is not None
            self._loop.remove_reader(self._side_fd)
            self._side = None
        else:
            self.release_side()
        self._swap(underlay)

    def release_side(self) -> Underlay | None:
        """Stop reading the second path and give its socket back to its owner; returns it."""
        side = self._side
        if side is None:
            return None
        self._side = None
        assert self._loop is not None
        self._loop.remove_reader(self._side_fd)
        self._side_fd = -1
        side.resume_owner()
        return side

    def _attach_side(self, underlay: Underlay, moves: bool) -> None:
        assert self._loop is not None
        self._side = underlay
        self._side_moves = moves
        underlay.sock.setblocking(False)
        self._side_fd = underlay.sock.fileno()
        underlay.pause_owner()
        self._loop.add_reader(self._side_fd, self._side_pass)

    def _swap(self, underlay: Underlay) -> None:
        """``underlay`` becomes the main path; the old main one is read as the side path."""
        assert self._loop is not None and self._underlay is not None
        old = self._underlay
        if self._coalescer is not None:
            self._coalescer.flush()
        self._loop.remove_reader(self._sock_fd)
        if self._gro:
            enable_gro(old.sock, False)  # the side path is read one datagram per call
        self._install(underlay)
        self._attach_side(old, moves=False)
        self._path_moves += 1
        logger.info("tunnel data path moved to %s (%s)", underlay.peer, "relayed" if underlay.channel is not None else "direct")

    def _side_pass(self) -> None:
        """Read the side path, one datagram per call: it carries little (stragglers, the peer's
        first records after its move), and only for a moment."""
        side = self._side
        if side is None:
            return
        sock = side.sock
        channel = side.channel
        moved = False
        for _ in range(self._batch):
            try:
                data, addr = sock.recvfrom(_SIDE_RECV_LEN)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                clear_socket_error(sock)
                break
            record = record_in(data, channel)
            if record is None:
                self._side_foreign(side, data, addr)
            elif len(record) == 0:
                self._drops[DropReason.TRUNCATED] += 1
            elif self._open_slow(record, len(record)) and self._side_moves and not moved:
                moved = True
        if self._coalescer is not None:
            self._coalescer.flush()
        if moved and self._side is side:
            self._side = None
            assert self._loop is not None
            self._loop.remove_reader(self._side_fd)
            self._swap(side)
            on_move, self._on_move = self._on_move, None
            if on_move is not None:
                on_move()

    def _side_foreign(self, side: Underlay, data: bytes, addr: Any) -> None:
        if data and data[0] <= 3 and check_framing(data) is not None:
            self._drops[DropReason.MALFORMED_STUN] += 1
            return
        self._foreign += 1
        try:
            side.deliver_foreign(data, addr)
        except Exception:  # noqa: BLE001 - as in _to_owner: the network cannot reach the loop
            self._drops[DropReason.OWNER_FAILED] += 1

    def set_transit(self, hook: TransitHook | None, done: Callable[[], None] | None = None,
                    destinations: TransitDestinations | None = None) -> None:  # fmt: skip
        """Offer every opened frame to ``hook`` before the TAP (it returns True if it sent the frame on
        by another tunnel); ``done`` is called after each received burst. None: every frame to the TAP.
        ``destinations``: the hook's prefilter, for a data path that opens frames outside Python
        (this one offers every frame)."""
        self._transit = hook
        self._transit_done = done if hook is not None else None

    def stats(self) -> DatapathStats:
        rx = self._rx
        return DatapathStats(
            tx_frames=self._tx_frames,
            tx_bytes=self._tx_bytes,
            rx_frames=self._rx_frames,
            rx_bytes=self._rx_bytes,
            tx_records=self._tx_frames + self._tx_control,
            rx_records=self._rx_frames + self._rx_control,
            tx_epoch=self._tx_secret.epoch if self._tx_secret else 0,
            rx_epoch=rx.epoch if rx else 0,
            foreign=self._foreign,
            tap_reads=self._tap_reads if self._vnet else self._tx_frames - self._plain_sealed,
            tap_writes=self._tap_writes if self._vnet else self._rx_frames - self._transit_frames,
            gso_reads=self._gso_reads,
            gro_writes=self._gro_writes,
            transit_frames=self._transit_frames,
            path_moves=self._path_moves,
            drops={reason: n for reason, n in self._drops.items() if n},
            implementation=self.implementation,
        )

    # -- setup ---------------------------------------------------------------------

    def _prepare_buffers(self, underlay: Underlay) -> None:
        """Preallocated buffers for ``underlay``'s path, both directions'."""
        self._channel = underlay.channel
        self._peer = underlay.peer
        self._hoff = TURN_CHANNEL_HEADER_LEN if underlay.channel is not None else 0
        self._prepare_send_buffers(underlay)
        self._prepare_receive_buffers()
        self.set_path_mtu(self._path_mtu)  # the frame it allows depends on the path's headers

    def buffers(self) -> list[bytearray | mmap.mmap]:
        """The large buffers of the current path (rings, TAP read buffers; not the native extension's
        own), for an account of a tunnel's memory (``buffers.resident``)."""
        if self._underlay is None:
            return []
        found = [self._tx_ring.memory, self._rx_ring.memory, self._tx_plain]
        if self._vnet:
            found.append(self._sf)
        if self._coalescer is not None:
            found.append(self._coalescer.memory)
        return [buffer for buffer in found if buffer is not None]

    def _release_buffers(self) -> None:
        """Hand the written pages back to the kernel (on stop, the stopped data path may be kept a while;
        when idle, ``_trim_if_idle``). What they held is gone: nothing may be pending in them."""
        if self._coalescer is not None:
            self._coalescer.release()
        for buffer in self.buffers():
            release(buffer)
        # The send ring's kind bytes went with its pages: the views are made again, and write them.
        self._tx_views = [{} for _ in range(self._batch)]
