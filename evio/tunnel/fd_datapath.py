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
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag

from evio.config.model import Cipher
from evio.tunnel.datapath import ControlHandler, DatapathStats, DropReason, Underlay
from evio.tunnel.errors import RecordError
from evio.tunnel.keys import RekeyPolicy, SessionSecrets, TrafficSecret, make_aead
from evio.tunnel.mmsg import DatagramBatch, ReceiveBatch, make_batch, make_receive_batch
from evio.tunnel.mtu import TURN_CHANNEL_HEADER_LEN
from evio.tunnel.record import (
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
from evio.tunnel.replay import ACCEPT, REPLAYED, ReplayWindow
from evio.tunnel.underlay import clear_socket_error

logger = logging.getLogger(__name__)

_U64 = struct.Struct("!Q")
_CHANNEL = struct.Struct("!HH")
_RECV_BUF_LEN = 65536
_MIN_FRAME_RECORD = OVERHEAD + ETHERNET_HEADER_LEN
_MIN_RX_SLOT = 2048


class _RxEpoch:
    """Receive state of one epoch: key, IV, nonce buffer and replay window."""

    __slots__ = ("aead", "epoch", "iv", "iv_low", "nonce", "secret", "window")

    def __init__(self, cipher: Cipher, secret: TrafficSecret, window_size: int) -> None:
        keys = secret.keys()
        self.secret = secret
        self.epoch = secret.epoch
        self.aead = make_aead(cipher, keys.key)
        self.iv = keys.iv
        self.iv_low = int.from_bytes(keys.iv[4:], "big")
        self.nonce = bytearray(keys.iv)
        self.window = ReplayWindow(window_size)


class FdDatapath:
    """Datapath over a TAP fd and a non-blocking UDP socket, driven by the event loop."""

    def __init__(
        self,
        mtu: int,
        rekey: RekeyPolicy | None = None,
        replay_window: int = 2048,
        batch: int = 64,
        batch_factory: Callable[[int, int, Any], DatagramBatch] = make_batch,
        receive_batch_factory: Callable[[int, int], ReceiveBatch] = make_receive_batch,
    ) -> None:
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
        self._cipher = Cipher.AES_256_GCM
        self._tx_secret: TrafficSecret | None = None
        self._tx_counter = 0
        self._tx_limit = 0
        self._rx: _RxEpoch | None = None
        self._rx_prev: _RxEpoch | None = None
        self._rx_next: _RxEpoch | None = None

    # -- interface -----------------------------------------------------------------

    def start(self, tap_fd: int, underlay: Underlay, secrets: SessionSecrets, on_control: ControlHandler) -> None:
        if self._running:
            raise RuntimeError("data path already started")
        self._loop = asyncio.get_running_loop()
        self._underlay = underlay
        self._tap_fd = tap_fd
        self._on_control = on_control
        self._cipher = secrets.cipher
        self._tx_limit = self._rekey_policy.record_limit(secrets.cipher)
        self._prepare_buffers(underlay)
        self._set_tx(secrets.tx)
        self._rx = _RxEpoch(secrets.cipher, secrets.rx, self._window_size)
        self._rx_next = _RxEpoch(secrets.cipher, secrets.rx.next(), self._window_size)
        self._rx_prev = None
        os.set_blocking(tap_fd, False)
        underlay.sock.setblocking(False)
        self._sock_fd = underlay.sock.fileno()
        underlay.pause_owner()
        self._loop.add_reader(self._sock_fd, self._sock_pass)
        self._loop.add_reader(tap_fd, self._tap_pass)
        self._running = True

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        assert self._loop is not None and self._underlay is not None
        self._loop.remove_reader(self._tap_fd)
        self._loop.remove_reader(self._sock_fd)
        self._underlay.resume_owner()

    def maintain(self) -> None:
        """Re-arm the socket reader: uvloop drops it for good on a socket error (an ICMP
        error on a connected socket); clearing the error and registering again recovers."""
        if not self._running:
            return
        assert self._loop is not None and self._underlay is not None
        clear_socket_error(self._underlay.sock)
        self._loop.remove_reader(self._sock_fd)
        self._loop.add_reader(self._sock_fd, self._sock_pass)

    def send_control(self, message: ControlMessage) -> None:
        if not self._running:
            return
        self._send_record(KIND_CONTROL, pack_control(message.opcode, message.flags))
        self._tx_control += 1

    def inject(self, record: bytes) -> None:
        if not self._running:
            self._drops[DropReason.EARLY] += 1
            return
        self._open_slow(memoryview(record), len(record))

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
            drops={reason: n for reason, n in self._drops.items() if n},
        )

    # -- setup ---------------------------------------------------------------------

    def _prepare_buffers(self, underlay: Underlay) -> None:
        """Preallocated buffers; the memoryviews per frame length are made on first use and kept."""
        channel = underlay.channel
        self._channel = channel
        self._peer = underlay.peer
        self._hoff = hoff = TURN_CHANNEL_HEADER_LEN if channel is not None else 0
        self._tx_plain = bytearray(_RECV_BUF_LEN)
        self._tx_plain_mv = memoryview(self._tx_plain)
        self._tx_iov = [self._tx_plain_mv]
        # One slot per record of a burst, all sent by one system call (mmsg.py).
        self._tx_ring = self._batch_factory(self._batch, hoff + self._max_record, underlay.peer)
        ring = self._tx_ring.view
        slot_size = self._tx_ring.slot_size
        for slot in range(self._batch):
            ring[slot * slot_size + hoff] = KIND_FRAME
        self._tx_aads = [ring[i * slot_size + hoff : i * slot_size + hoff + HEADER_LEN] for i in range(self._batch)]
        # tx_views[slot][n]: (plaintext, ciphertext+tag) for a frame of n bytes in that slot
        # (a dict: only the few frame sizes a link actually carries get views).
        self._tx_views: list[dict[int, tuple[memoryview, memoryview]]] = [{} for _ in range(self._batch)]
        # Room for our largest record and then some (DTLS flights, STUN); a larger datagram
        # is cut short by the kernel and then fails authentication.
        rx_slot = max(_MIN_RX_SLOT, hoff + self._max_record)
        self._rx_ring = self._receive_batch_factory(self._batch, rx_slot)
        rx_ring = self._rx_ring.view
        self._rx_aads = [rx_ring[i * rx_slot + hoff : i * rx_slot + hoff + HEADER_LEN] for i in range(self._batch)]
        self._rx_plain = bytearray(self._max_frame)
        self._rx_plain_mv = memoryview(self._rx_plain)
        # rx_views[slot][n]: (ciphertext+tag, plaintext) for a record of n bytes in that slot.
        self._rx_views: list[dict[int, tuple[memoryview, memoryview]]] = [{} for _ in range(self._batch)]

    def _make_tx_views(self, slot: int, n: int) -> tuple[memoryview, memoryview]:
        start = slot * self._tx_ring.slot_size + self._hoff
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
        sent = ring.send(self._underlay.sock, slot)  # type: ignore[union-attr]
        if sent < slot:
            self._drops[DropReason.SEND_FAILED] += slot - sent
            nbytes -= sum(ring.length(i) - hoff - OVERHEAD for i in range(sent, slot))
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
        frames = 0
        nbytes = 0
        for slot in range(count):
            n = length(slot)
            start = slot * slot_size
            if channel is not None:
                # Records arrive as ChannelData on our channel; anything else is the TURN client's.
                if n < 4 or (buf[start] << 8 | buf[start + 1]) != channel:
                    self._to_owner(slot, n)
                    continue
                size = buf[start + 2] << 8 | buf[start + 3]
                if size > n - 4:
                    self._drops[DropReason.TRUNCATED] += 1
                    continue
                if size == 0 or buf[start + 4] not in (KIND_FRAME, KIND_CONTROL):
                    self._to_owner(slot, n)
                    continue
                n = size
            at = start + hoff
            kind = buf[at]
            if kind != KIND_FRAME or buf[at + 1] != epoch_byte or n > max_record:
                if kind in (KIND_FRAME, KIND_CONTROL):
                    self._open_slow(buf[at : at + n], n)
                    # The slow path may have promoted the next epoch.
                    if self._rx is not rx:
                        rx = self._rx
                        assert rx is not None
                        epoch_byte, window = rx.epoch & 0xFF, rx.window
                        check, update = window.check, window.update
                        open_into, nonce_buf, iv_low = rx.aead.decrypt_into, rx.nonce, rx.iv_low
                else:
                    self._to_owner(slot, n)
                continue
            if n < _MIN_FRAME_RECORD:
                self._drops[DropReason.TRUNCATED] += 1
                continue
            counter = unpack_u64(buf, at + 2)[0]
            if counter <= window.top:  # in-order records skip the bitmap test
                verdict = check(counter)
                if verdict != ACCEPT:
                    self._drops[DropReason.REPLAYED if verdict == REPLAYED else DropReason.STALE] += 1
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
            try:
                write(tap_fd, v[1])
            except OSError:
                self._drops[DropReason.TAP_WRITE_FAILED] += 1
        self._rx_frames += frames
        self._rx_bytes += nbytes
        return frames

    def _to_owner(self, slot: int, n: int) -> None:
        self._foreign += 1
        start = slot * self._rx_ring.slot_size
        self._underlay.deliver_foreign(bytes(self._rx_ring.view[start : start + n]), self._rx_ring.source(slot))  # type: ignore[union-attr]

    def _open_slow(self, record: memoryview, n: int) -> None:
        """Any record: other epochs, control, odd sizes, injected. Allocates; rare."""
        if n < OVERHEAD:
            self._drops[DropReason.TRUNCATED] += 1
            return
        kind, epoch_byte, counter = HEADER.unpack_from(record, 0)
        if kind not in (KIND_FRAME, KIND_CONTROL):
            self._drops[DropReason.FORGED] += 1
            return
        state = self._epoch_for(epoch_byte)
        if state is None:
            self._drops[DropReason.UNKNOWN_EPOCH] += 1
            return
        verdict = state.window.check(counter)
        if verdict != ACCEPT:
            self._drops[DropReason.REPLAYED if verdict == REPLAYED else DropReason.STALE] += 1
            return
        try:
            plaintext = state.aead.decrypt(nonce(state.iv, counter), bytes(record[HEADER_LEN:n]), bytes(record[:HEADER_LEN]))
        except InvalidTag:
            self._drops[DropReason.FORGED] += 1
            return
        state.window.update(counter)
        if state is self._rx_next:
            self._promote_rx()
        if kind == KIND_FRAME:
            if len(plaintext) < ETHERNET_HEADER_LEN:
                self._drops[DropReason.TRUNCATED] += 1
                return
            self._rx_frames += 1
            self._rx_bytes += len(plaintext)
            try:
                os.write(self._tap_fd, plaintext)
            except OSError:
                self._drops[DropReason.TAP_WRITE_FAILED] += 1
            return
        try:
            message = parse_control(plaintext)
        except RecordError:
            self._drops[DropReason.BAD_CONTROL] += 1
            return
        self._rx_control += 1
        assert self._on_control is not None
        self._on_control(message)

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
        self._rx_next = _RxEpoch(self._cipher, self._rx.secret.next(), self._window_size)
        logger.debug("tunnel rx epoch %d", self._rx.epoch)
