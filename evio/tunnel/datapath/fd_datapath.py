"""``FdDatapath``: the Python data path, built for per-packet cost.

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

The transit fast path (transit.py) touches two places only: a hook that sees
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
import struct
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag

from evio.config.model import Cipher
from evio.tunnel.datapath.buffers import release, zeroed
from evio.tunnel.datapath.interface import ControlHandler, DatapathStats, DropReason, Underlay, clear_socket_error
from evio.tunnel.datapath.keys import RekeyPolicy, SessionSecrets, TrafficSecret, make_aead
from evio.tunnel.datapath.mmsg import (
    DatagramBatch,
    GroRecvBatch,
    ReceiveBatch,
    enable_gro,
    make_batch,
    make_receive_batch,
)
from evio.tunnel.datapath.mtu import TURN_CHANNEL_HEADER_LEN
from evio.tunnel.datapath.offload import (
    F_NEEDS_CSUM,
    GSO_NONE,
    VNET_HDR,
    VNET_HDR_LEN,
    OffloadError,
    TcpCoalescer,
    VnetHeader,
    complete_checksum,
    segment_tcp,
)
from evio.tunnel.datapath.record import (
    ETHERNET_HEADER_LEN,
    HEADER,
    HEADER_LEN,
    KIND_CONTROL,
    KIND_FRAME,
    OVERHEAD,
    ControlMessage,
    nonce,
    pack_control,
    parse_control,
)
from evio.tunnel.datapath.replay import ACCEPT, REPLAYED, ReplayWindow
from evio.tunnel.datapath.transit_table import TransitDestinations, TransitHook
from evio.tunnel.errors import RecordError, UnknownControlError
from evio.tunnel.stun_framing import check_framing

logger = logging.getLogger(__name__)

_U64 = struct.Struct("!Q")
_CHANNEL = struct.Struct("!HH")
_RECV_BUF_LEN = 65536
_MIN_FRAME_RECORD = OVERHEAD + ETHERNET_HEADER_LEN
_MIN_RX_SLOT = 2048
_OWNER_FAILURE_LOG_INTERVAL = 10.0
_GRO_SLOTS = 16  # 64 KiB each: up to 16 bursts of records per recvmmsg
_SUPERFRAME_LEN = VNET_HDR_LEN + 65536 + 256  # a TAP read with offloads: 64 KiB of TCP and its headers
TRIM_AFTER = 10.0
"""Seconds without a frame after which a data path's buffers are handed back to the kernel."""


class _RxEpoch:
    """Receive state of one epoch: key, IV, nonce buffer and replay window."""

    __slots__ = ("aead", "epoch", "iv", "iv_low", "native", "nonce", "secret", "window")

    def __init__(self, cipher: Cipher, secret: TrafficSecret, window_size: int) -> None:
        keys = secret.keys()
        self.secret = secret
        self.epoch = secret.epoch
        self.aead = make_aead(cipher, keys.key)
        self.iv = keys.iv
        self.iv_low = int.from_bytes(keys.iv[4:], "big")
        self.nonce = bytearray(keys.iv)
        self.window = ReplayWindow(window_size)
        self.native: Any = None  # the native data path's key (native.py)


class FdDatapath:
    """Datapath over a TAP fd and a non-blocking UDP socket, driven by the event loop."""

    implementation = "python"
    """Which passes run: "python" here, "native" in native.py's subclass (status, metrics)."""

    def __init__(
        self,
        mtu: int,
        rekey: RekeyPolicy | None = None,
        replay_window: int = 2048,
        batch: int = 64,
        batch_factory: Callable[[int, int, Any], DatagramBatch] = make_batch,
        receive_batch_factory: Callable[[int, int], ReceiveBatch] = make_receive_batch,
        gro: bool = False,
        trim_after: float = TRIM_AFTER,
    ) -> None:
        """``gro``: receive with UDP GRO where the kernel has it (tunnel.offload); ``trim_after``: seconds
        without a frame after which ``maintain`` hands the buffers' pages back to the kernel."""
        self._max_frame = mtu + ETHERNET_HEADER_LEN
        self._max_record = self._max_frame + OVERHEAD
        self._rekey_policy = rekey or RekeyPolicy()
        self._window_size = replay_window
        self._batch = batch
        self._batch_factory = batch_factory
        self._receive_batch_factory = receive_batch_factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._underlay: Underlay | None = None
        self._tap_fd = -1
        self._sock_fd = -1
        self._running = False
        self._on_control: ControlHandler | None = None
        self._drops = dict.fromkeys(DropReason, 0)
        self._tx_frames = self._tx_bytes = self._rx_frames = self._rx_bytes = 0
        self._tx_control = self._rx_control = self._foreign = 0
        self._received_at_maintain = 0  # records received by the last maintain
        self._cipher = Cipher.AES_256_GCM
        self._tx_secret: TrafficSecret | None = None
        self._tx_counter = 0
        self._tx_limit = 0
        self._rx: _RxEpoch | None = None
        self._rx_prev: _RxEpoch | None = None
        self._rx_next: _RxEpoch | None = None
        self._owner_failure_logged = float("-inf")
        self._want_gro = gro
        self._gro = False
        self._vnet = False
        self._coalescer: TcpCoalescer | None = None
        self._tap_reads = self._tap_writes = self._gso_reads = self._gro_writes = 0
        self._slot = self._tx_nbytes = self._tx_sent = 0
        self._transit: TransitHook | None = None
        self._transit_done: Callable[[], None] | None = None
        self._transit_frames = 0
        self._plain_sealed = 0  # frames taken by accept_plain (another tunnel's transit frames)
        # The second path (docs/design.md, "Relay first, then direct"): read beside the main one.
        self._side: Underlay | None = None
        self._side_fd = -1
        self._side_moves = False  # its first authenticated record moves the data path there
        self._path_moves = 0
        self._on_move: Callable[[], None] | None = None
        self._trim_after = trim_after
        self._frames_seen = -1  # frames both ways at the last maintain
        self._busy_at = 0.0  # when maintain last saw them change
        self._trimmed = False

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

    def _new_rx_epoch(self, secret: TrafficSecret) -> _RxEpoch:
        return _RxEpoch(self._cipher, secret, self._window_size)

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
                data, addr = sock.recvfrom(_RECV_BUF_LEN)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                clear_socket_error(sock)
                break
            record = _record_in(data, channel)
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

    def send_control(self, message: ControlMessage) -> None:
        if not self._running:
            return
        self._send_record(KIND_CONTROL, pack_control(message.opcode, message.flags, message.token))
        self._tx_control += 1

    def inject(self, record: bytes) -> None:
        if not self._running:
            self._drops[DropReason.EARLY] += 1
            return
        self._open_slow(memoryview(record), len(record))
        if self._coalescer is not None:
            self._coalescer.flush()
        if self._transit_done is not None:
            self._transit_done()

    def set_transit(self, hook: TransitHook | None, done: Callable[[], None] | None = None,
                    destinations: TransitDestinations | None = None) -> None:  # fmt: skip
        """Offer every opened frame to ``hook`` before the TAP (it returns True if it sent the frame on
        by another tunnel); ``done`` is called after each received burst. None: every frame to the TAP.
        ``destinations``: the hook's prefilter, for a data path that opens frames outside Python
        (this one offers every frame)."""
        self._transit = hook
        self._transit_done = done if hook is not None else None

    def accept_plain(self, frame: memoryview) -> bool:
        """Seal a plain frame from elsewhere (another tunnel's transit frame) into the send ring;
        ``flush_plain`` sends it. False if this data path cannot take it."""
        if not self._running or len(frame) > self._max_frame:
            return False
        self._seal_frame(frame)
        self._plain_sealed += 1
        return True

    def flush_plain(self) -> None:
        if self._slot:
            self._flush_tx(self._slot)

    def rekey(self) -> None:
        assert self._tx_secret is not None
        self._set_tx(self._tx_secret.next())

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
        """Preallocated buffers; the memoryviews per frame length are made on first use and kept."""
        channel = underlay.channel
        self._channel = channel
        self._peer = underlay.peer
        self._hoff = hoff = TURN_CHANNEL_HEADER_LEN if channel is not None else 0
        self._tx_plain = zeroed(_RECV_BUF_LEN)
        self._tx_plain_mv = memoryview(self._tx_plain)
        self._tx_iov = [self._tx_plain_mv]
        # One slot per record of a burst, all sent by one system call (mmsg.py).
        self._tx_ring = self._batch_factory(self._batch, hoff + self._max_record, underlay.peer)
        ring = self._tx_ring.view
        slot_size = self._tx_ring.slot_size
        # A slot's kind byte is written when the slot is first used (_make_tx_views, _seal_frame), not
        # here: writing it into every slot would make the whole ring resident on an idle tunnel.
        self._tx_aads = [ring[i * slot_size + hoff : i * slot_size + hoff + HEADER_LEN] for i in range(self._batch)]
        # tx_views[slot][n]: (plaintext, ciphertext+tag) for a frame of n bytes in that slot
        # (a dict: only the few frame sizes a link actually carries get views).
        self._tx_views: list[dict[int, tuple[memoryview, memoryview]]] = [{} for _ in range(self._batch)]
        # Room for our largest record and then some (DTLS flights, STUN); a larger datagram
        # is cut short by the kernel and then fails authentication.
        self._rx_ring, self._gro_ring = self._receive_rings(max(_MIN_RX_SLOT, hoff + self._max_record))
        rx_slot = self._rx_ring.slot_size
        rx_ring = self._rx_ring.view
        self._rx_aads = [rx_ring[i * rx_slot + hoff : i * rx_slot + hoff + HEADER_LEN] for i in range(self._batch)]
        self._rx_plain = bytearray(self._max_frame)
        self._rx_plain_mv = memoryview(self._rx_plain)
        # rx_views[slot][n]: (ciphertext+tag, plaintext) for a record of n bytes in that slot.
        self._rx_views: list[dict[int, tuple[memoryview, memoryview]]] = [{} for _ in range(self._batch)]
        if self._vnet:
            self._sf = zeroed(_SUPERFRAME_LEN)
            self._sf_mv = memoryview(self._sf)
            self._sf_iov = [self._sf_mv]
            self._slot = self._tx_nbytes = 0
            self._coalescer = TcpCoalescer(self._write_vnet, self._max_frame)

    def _receive_rings(self, slot_size: int) -> tuple[ReceiveBatch, GroRecvBatch | None]:
        """The ring the socket pass reads into (slots of ``slot_size`` without GRO), and it again if it is
        a GRO ring (a native data path overrides this with its own, native.py)."""
        if self._gro:
            ring = GroRecvBatch(_GRO_SLOTS)
            return ring, ring
        return self._receive_batch_factory(self._batch, slot_size), None

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

    def _make_tx_views(self, slot: int, n: int) -> tuple[memoryview, memoryview]:
        start = slot * self._tx_ring.slot_size + self._hoff
        self._tx_ring.view[start] = KIND_FRAME
        views = (self._tx_plain_mv[:n], self._tx_ring.view[start + HEADER_LEN : start + OVERHEAD + n])
        self._tx_views[slot][n] = views
        return views

    def _make_rx_views(self, slot: int, n: int) -> tuple[memoryview, memoryview]:
        start = slot * self._rx_ring.slot_size + self._hoff
        views = (self._rx_ring.view[start + HEADER_LEN : start + n], self._rx_plain_mv[: n - OVERHEAD])
        self._rx_views[slot][n] = views
        return views

    def _set_tx(self, secret: TrafficSecret) -> None:
        keys = secret.keys()
        self._tx_secret = secret
        self._tx_aead = make_aead(self._cipher, keys.key)
        self._tx_seal = self._tx_aead.encrypt_into
        self._tx_iv = keys.iv
        self._tx_iv_low = int.from_bytes(keys.iv[4:], "big")
        self._tx_nonce = bytearray(keys.iv)
        self._tx_counter = 0

    # -- TAP -> underlay -----------------------------------------------------------

    def _tap_pass(self) -> int:
        """Drain the TAP: seal up to ``batch`` frames into the ring, send them at once; returns how many went out."""
        readv = os.readv
        tap_fd = self._tap_fd
        iov = self._tx_iov
        max_frame = self._max_frame
        ring = self._tx_ring
        out = ring.view
        slot_size = ring.slot_size
        set_length = ring.set_length
        hoff = self._hoff
        channel = self._channel
        pack_u64 = _U64.pack_into
        views = self._tx_views
        aads = self._tx_aads
        nonce_buf = self._tx_nonce
        seal = self._tx_seal
        iv_low = self._tx_iv_low
        epoch_byte = self._tx_secret.epoch & 0xFF  # type: ignore[union-attr]
        counter = self._tx_counter
        limit = self._tx_limit
        batch = self._batch
        slot = 0
        nbytes = 0
        try:
            for _ in range(2 * batch):  # oversized frames use a read but no slot
                if slot == batch:
                    break
                try:
                    n = readv(tap_fd, iov)
                except BlockingIOError:
                    break
                if n > max_frame:
                    self._drops[DropReason.OVERSIZED] += 1
                    continue
                if counter >= limit:
                    self._tx_counter = counter
                    self.rekey()
                    nonce_buf, seal, iv_low, counter = self._tx_nonce, self._tx_seal, self._tx_iv_low, 0
                    epoch_byte = self._tx_secret.epoch & 0xFF  # type: ignore[union-attr]
                v = views[slot].get(n)
                if v is None:
                    v = self._make_tx_views(slot, n)
                start = slot * slot_size
                out[start + hoff + 1] = epoch_byte
                pack_u64(out, start + hoff + 2, counter)
                pack_u64(nonce_buf, 4, iv_low ^ counter)
                counter += 1
                seal(nonce_buf, v[0], aads[slot], v[1])
                if channel is not None:
                    _CHANNEL.pack_into(out, start, channel, n + OVERHEAD)
                set_length(slot, hoff + OVERHEAD + n)
                slot += 1
                nbytes += n
        except OSError as exc:
            # The TAP went away under us; the session notices and tears down.
            logger.warning("tunnel tap read failed: %s", exc)
            self._loop.remove_reader(tap_fd)  # type: ignore[union-attr]
        finally:
            self._tx_counter = counter
        if slot == 0:
            return 0
        return self._send_ring(slot, nbytes)

    # -- TAP -> underlay, with offloads -----------------------------------------------

    def _tap_pass_vnet(self) -> int:
        """Drain a TAP with vnet headers: each read is a frame or a TCP super-frame, cut into records."""
        readv = os.readv
        tap_fd = self._tap_fd
        iov = self._sf_iov
        buf = self._sf_mv
        max_frame = self._max_frame
        seal = self._seal_at
        drops = self._drops
        reads = 0
        self._slot = self._tx_nbytes = 0
        self._tx_sent = 0
        try:
            # Reads, not frames: one read may fill the ring several times over; a full ring sent
            # ends the pass so the other direction gets its turn.
            for _ in range(self._batch):
                if self._tx_sent >= self._batch:
                    break
                try:
                    n = readv(tap_fd, iov)
                except BlockingIOError:
                    break
                reads += 1
                length = n - VNET_HDR_LEN
                if length < ETHERNET_HEADER_LEN:
                    drops[DropReason.BAD_OFFLOAD] += 1
                    continue
                flags, gso_type, _, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(buf, 0)
                try:
                    if gso_type == GSO_NONE:
                        if length > max_frame:
                            drops[DropReason.OVERSIZED] += 1
                            continue
                        if flags & F_NEEDS_CSUM:
                            complete_checksum(buf, VNET_HDR_LEN, n, csum_start, csum_offset)
                        seal(VNET_HDR_LEN, n)
                    else:
                        vnet = VnetHeader(flags, gso_type, 0, gso_size, csum_start, csum_offset)
                        segment_tcp(buf, VNET_HDR_LEN, length, vnet, max_frame, seal)
                        self._gso_reads += 1
                except OffloadError:
                    drops[DropReason.BAD_OFFLOAD] += 1
        except OSError as exc:
            logger.warning("tunnel tap read failed: %s", exc)
            self._loop.remove_reader(tap_fd)  # type: ignore[union-attr]
        self._tap_reads += reads
        if self._slot:
            self._flush_tx(self._slot)
        return self._tx_sent

    def _seal_at(self, start: int, end: int) -> None:
        """Seal the frame ``_sf[start:end]`` into the next ring slot; send the ring when it is full."""
        self._seal_frame(self._sf_mv[start:end])

    def _seal_frame(self, frame: memoryview) -> None:
        """Seal ``frame`` into the next ring slot; send the ring when it is full."""
        slot = self._slot
        if slot == self._batch:
            self._flush_tx(slot)
            slot = 0
        if self._tx_counter >= self._tx_limit:
            self.rekey()
        counter = self._tx_counter
        self._tx_counter = counter + 1
        n = len(frame)
        ring = self._tx_ring
        out = ring.view
        at = slot * ring.slot_size + self._hoff
        out[at] = KIND_FRAME
        out[at + 1] = self._tx_secret.epoch & 0xFF  # type: ignore[union-attr]
        _U64.pack_into(out, at + 2, counter)
        _U64.pack_into(self._tx_nonce, 4, self._tx_iv_low ^ counter)
        self._tx_seal(self._tx_nonce, frame, self._tx_aads[slot], out[at + HEADER_LEN : at + OVERHEAD + n])
        if self._channel is not None:
            _CHANNEL.pack_into(out, at - self._hoff, self._channel, n + OVERHEAD)
        ring.set_length(slot, self._hoff + OVERHEAD + n)
        self._slot = slot + 1
        self._tx_nbytes += n

    def _flush_tx(self, count: int) -> None:
        self._tx_sent += self._send_ring(count, self._tx_nbytes)
        self._slot = self._tx_nbytes = 0

    def _send_ring(self, count: int, nbytes: int) -> int:
        """Send slots 0..count-1 of the ring (``nbytes`` of frames in them) and count; returns how many left."""
        ring = self._tx_ring
        sent = ring.send(self._underlay.sock, count)  # type: ignore[union-attr]
        if sent < count:
            self._drops[DropReason.SEND_FAILED] += count - sent
            nbytes -= sum(ring.length(i) - self._hoff - OVERHEAD for i in range(sent, count))
        self._tx_frames += sent
        self._tx_bytes += nbytes
        return sent

    def _send_record(self, kind: int, payload: bytes) -> None:
        """Seal and send one record outside the fast path (control messages)."""
        assert self._tx_secret is not None and self._underlay is not None
        if self._tx_counter >= self._tx_limit:
            self.rekey()
        counter = self._tx_counter
        self._tx_counter = counter + 1
        header = HEADER.pack(kind, self._tx_secret.epoch & 0xFF, counter)
        record = header + self._tx_aead.encrypt(nonce(self._tx_iv, counter), payload, header)
        if self._channel is not None:
            record = _CHANNEL.pack(self._channel, len(record)) + record
        try:
            self._underlay.sock.sendto(record, self._peer)
        except OSError:
            self._drops[DropReason.SEND_FAILED] += 1

    # -- underlay -> TAP -----------------------------------------------------------

    def _sock_pass(self) -> int:
        """Receive a burst from the socket: open records into the TAP, hand the rest back; returns frames delivered."""
        ring = self._rx_ring
        count = ring.recv(self._underlay.sock)  # type: ignore[union-attr]
        if not count:
            return 0
        buf = ring.view
        slot_size = ring.slot_size
        length = ring.length
        hoff = self._hoff
        channel = self._channel
        max_record = self._max_record
        tap_fd = self._tap_fd
        write = os.write
        unpack_u64 = _U64.unpack_from
        pack_u64 = _U64.pack_into
        views = self._rx_views
        aads = self._rx_aads
        rx = self._rx
        assert rx is not None
        epoch_byte = rx.epoch & 0xFF
        window = rx.window
        check = window.check
        update = window.update
        open_into = rx.aead.decrypt_into
        nonce_buf = rx.nonce
        iv_low = rx.iv_low
        transit = self._transit
        in_channel = channel_record
        frames = 0
        nbytes = 0
        # The common case inline (a frame record of the current epoch, in order: one of these per
        # frame at line rate); ChannelData, the rest and the drops by the methods _datagram uses too.
        for slot in range(count):
            n = length(slot)
            start = slot * slot_size
            if channel is not None:
                size = in_channel(buf, start, n, channel)
                if size < 0:
                    self._not_channel_record(slot, start, n, size)
                    continue
                n = size
            at = start + hoff
            if buf[at] != KIND_FRAME or buf[at + 1] != epoch_byte or n > max_record:
                self._not_inline(slot, start, n)
                # The slow path may have promoted the next epoch.
                if self._rx is not rx:
                    rx = self._rx
                    assert rx is not None
                    epoch_byte, window = rx.epoch & 0xFF, rx.window
                    check, update = window.check, window.update
                    open_into, nonce_buf, iv_low = rx.aead.decrypt_into, rx.nonce, rx.iv_low
                continue
            if n < _MIN_FRAME_RECORD:
                self._drops[DropReason.TRUNCATED] += 1
                continue
            counter = unpack_u64(buf, at + 2)[0]
            if counter <= window.top:  # in-order records skip the bitmap test
                verdict = check(counter)
                if verdict != ACCEPT:
                    self._count_unfresh(verdict)
                    continue
            v = views[slot].get(n)
            if v is None:
                v = self._make_rx_views(slot, n)
            pack_u64(nonce_buf, 4, iv_low ^ counter)
            try:
                open_into(nonce_buf, v[0], aads[slot], v[1])
            except InvalidTag:
                self._drops[DropReason.FORGED] += 1
                continue
            update(counter)
            frames += 1
            nbytes += n - OVERHEAD
            if transit is not None and transit(v[1]):
                self._transit_frames += 1
                continue
            try:
                write(tap_fd, v[1])
            except OSError:
                self._drops[DropReason.TAP_WRITE_FAILED] += 1
        self._rx_frames += frames
        self._rx_bytes += nbytes
        if self._transit_done is not None:
            self._transit_done()
        return frames

    # -- underlay -> TAP, with offloads -----------------------------------------------

    def _sock_pass_offload(self) -> int:
        """Receive a burst, each message possibly a GRO run of records; frames go through the coalescer
        (TAP with vnet header) or straight to the TAP. Returns frames delivered."""
        ring = self._rx_ring
        count = ring.recv(self._underlay.sock)  # type: ignore[union-attr]
        if not count:
            return 0
        before = self._rx_frames
        length = ring.length
        slot_size = ring.slot_size
        segment_size = self._gro_ring.segment_size if self._gro_ring is not None else None
        datagram = self._datagram
        for slot in range(count):
            total = length(slot)
            start = slot * slot_size
            step = segment_size(slot) if segment_size is not None else 0
            if step <= 0 or step >= total:
                datagram(slot, start, total)
                continue
            for offset in range(0, total, step):
                datagram(slot, start + offset, min(step, total - offset))
        if self._coalescer is not None:
            self._coalescer.flush()
        if self._transit_done is not None:
            self._transit_done()
        return self._rx_frames - before

    def _datagram(self, slot: int, start: int, n: int) -> None:
        """One datagram at ``start`` in the receive ring: a record, opened and delivered, or the owner's."""
        buf = self._rx_ring.view
        if self._channel is not None:
            size = channel_record(buf, start, n, self._channel)
            if size < 0:
                self._not_channel_record(slot, start, n, size)
                return
            n = size
        at = start + self._hoff
        rx = self._rx
        assert rx is not None
        if n == 0 or buf[at] != KIND_FRAME or buf[at + 1] != rx.epoch & 0xFF or n > self._max_record:
            self._not_inline(slot, start, n)
            return
        if n < _MIN_FRAME_RECORD:
            self._drops[DropReason.TRUNCATED] += 1
            return
        counter = _U64.unpack_from(buf, at + 2)[0]
        window = rx.window
        if counter <= window.top:
            verdict = window.check(counter)
            if verdict != ACCEPT:
                self._count_unfresh(verdict)
                return
        nonce_buf = rx.nonce
        _U64.pack_into(nonce_buf, 4, rx.iv_low ^ counter)
        plain = self._rx_plain_mv[: n - OVERHEAD]
        try:
            rx.aead.decrypt_into(nonce_buf, buf[at + HEADER_LEN : at + n], buf[at : at + HEADER_LEN], plain)
        except InvalidTag:
            self._drops[DropReason.FORGED] += 1
            return
        window.update(counter)
        self._rx_frames += 1
        self._rx_bytes += n - OVERHEAD
        self._deliver(plain)

    def _not_channel_record(self, slot: int, start: int, n: int, verdict: int) -> None:
        """A datagram ``channel_record`` found no record in: truncated, or the socket owner's."""
        if verdict == _TRUNCATED_CHANNEL_DATA:
            self._drops[DropReason.TRUNCATED] += 1
        else:
            self._to_owner(slot, n, start)

    def _not_inline(self, slot: int, start: int, n: int) -> None:
        """A datagram the passes do not open inline: a record (control, another epoch, odd size) the
        slow way, anything else (STUN, DTLS) to the socket's owner."""
        at = start + self._hoff
        if n and self._rx_ring.view[at] in (KIND_FRAME, KIND_CONTROL):
            self._open_slow(self._rx_ring.view[at : at + n], n)
        else:
            self._to_owner(slot, n, start)

    def _count_unfresh(self, verdict: int) -> None:
        self._drops[DropReason.REPLAYED if verdict == REPLAYED else DropReason.STALE] += 1

    def _deliver(self, frame: memoryview) -> None:
        """An opened frame to the TAP: through the coalescer with a vnet header, else as it is
        (unless the transit hook sends it on by another tunnel: a frame of at most the MTU, never a
        super-frame, so offloads change nothing for it)."""
        if self._transit is not None and self._transit(frame):
            self._transit_frames += 1
            return
        if self._coalescer is not None:
            self._coalescer.add(frame)
            return
        try:
            os.write(self._tap_fd, frame)
        except OSError:
            self._drops[DropReason.TAP_WRITE_FAILED] += 1

    def _write_vnet(self, data: memoryview) -> None:
        """The coalescer's output: vnet header and frame or super-frame, one TAP write."""
        self._tap_writes += 1
        if data[1] != GSO_NONE:
            self._gro_writes += 1
        try:
            os.write(self._tap_fd, data)
        except OSError:
            self._drops[DropReason.TAP_WRITE_FAILED] += 1

    def _to_owner(self, slot: int, n: int, start: int | None = None) -> None:
        """Hand a datagram that is not a record to the socket's owner, unless it is bad STUN.

        Anyone can send to this port: whatever happens here stays here (counted), so one bad
        datagram can cost neither the rest of the burst nor the counters."""
        if n == 0:
            self._drops[DropReason.TRUNCATED] += 1
            return
        if start is None:
            start = slot * self._rx_ring.slot_size
        data = bytes(self._rx_ring.view[start : start + n])
        if data[0] <= 3 and check_framing(data) is not None:
            self._drops[DropReason.MALFORMED_STUN] += 1
            return
        self._foreign += 1
        try:
            self._underlay.deliver_foreign(data, self._rx_ring.source(slot))  # type: ignore[union-attr]
        except Exception:
            self._drops[DropReason.OWNER_FAILED] += 1
            now = self._loop.time() if self._loop is not None else 0.0
            if now - self._owner_failure_logged >= _OWNER_FAILURE_LOG_INTERVAL:
                self._owner_failure_logged = now
                logger.warning("tunnel datagram owner failed (%d so far)", self._drops[DropReason.OWNER_FAILED], exc_info=True)

    def _open_slow(self, record: memoryview | bytes, n: int) -> bool:
        """Any record: other epochs, control, odd sizes, injected. Allocates; rare. True when it was
        authentic and new (a frame delivered or a control message taken, even a malformed one)."""
        if n < OVERHEAD:
            self._drops[DropReason.TRUNCATED] += 1
            return False
        kind, epoch_byte, counter = HEADER.unpack_from(record, 0)
        if kind not in (KIND_FRAME, KIND_CONTROL):
            self._drops[DropReason.FORGED] += 1
            return False
        state = self._epoch_for(epoch_byte)
        if state is None:
            self._drops[DropReason.UNKNOWN_EPOCH] += 1
            return False
        verdict = state.window.check(counter)
        if verdict != ACCEPT:
            self._count_unfresh(verdict)
            return False
        try:
            plaintext = state.aead.decrypt(nonce(state.iv, counter), bytes(record[HEADER_LEN:n]), bytes(record[:HEADER_LEN]))
        except InvalidTag:
            self._drops[DropReason.FORGED] += 1
            return False
        state.window.update(counter)
        if state is self._rx_next:
            self._promote_rx()
        if kind == KIND_FRAME:
            if len(plaintext) < ETHERNET_HEADER_LEN:
                self._drops[DropReason.TRUNCATED] += 1
                return False
            self._rx_frames += 1
            self._rx_bytes += len(plaintext)
            self._deliver(memoryview(plaintext))
            return True
        try:
            message = parse_control(plaintext)
        except UnknownControlError:
            self._drops[DropReason.UNKNOWN_CONTROL] += 1  # a newer peer's: not malformed
            return True
        except RecordError:
            self._drops[DropReason.BAD_CONTROL] += 1
            return True
        self._rx_control += 1
        assert self._on_control is not None
        self._on_control(message)
        return True

    def _epoch_for(self, epoch_byte: int) -> _RxEpoch | None:
        for state in (self._rx, self._rx_next, self._rx_prev):
            if state is not None and state.epoch & 0xFF == epoch_byte:
                return state
        return None

    def _promote_rx(self) -> None:
        """The peer moved to its next epoch: keep the old one for stragglers, derive the one after."""
        assert self._rx_next is not None
        self._rx_prev = self._rx
        self._rx = self._rx_next
        self._rx_next = self._new_rx_epoch(self._rx.secret.next())
        logger.debug("tunnel rx epoch %d", self._rx.epoch)


_NOT_OUR_CHANNEL = -1
_TRUNCATED_CHANNEL_DATA = -2


def channel_record(buf: memoryview | bytes, start: int, n: int, channel: int) -> int:
    """The length of the record in the datagram ``buf[start:start + n]`` on a relayed path (records
    come as ChannelData on our channel, RFC 8656 section 12.4), or ``_NOT_OUR_CHANNEL`` (the TURN
    client's: another channel, STUN, or no record) or ``_TRUNCATED_CHANNEL_DATA``. A plain function,
    not a method: the receive pass calls it once per frame."""
    if n < 4 or (buf[start] << 8 | buf[start + 1]) != channel:
        return _NOT_OUR_CHANNEL
    size = buf[start + 2] << 8 | buf[start + 3]
    if size > n - 4:
        return _TRUNCATED_CHANNEL_DATA
    if size == 0 or buf[start + 4] not in (KIND_FRAME, KIND_CONTROL):
        return _NOT_OUR_CHANNEL
    return size


def _record_in(data: bytes, channel: int | None) -> bytes | None:
    """The record a datagram carries (on a relayed path: inside ChannelData on ``channel``), or
    None when it is something else (STUN, DTLS, TURN) for the socket's owner. A ChannelData
    shorter than its length yields an empty record (counted as truncated)."""
    if channel is not None:
        size = channel_record(data, 0, len(data), channel)
        if size == _TRUNCATED_CHANNEL_DATA:
            return b""
        if size < 0:
            return None
        return data[4 : 4 + size]
    if not data or data[0] not in (KIND_FRAME, KIND_CONTROL):
        return None
    return data
