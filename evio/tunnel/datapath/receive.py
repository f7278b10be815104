"""Receiving: records from the peer to the TAP, opened in place, a burst per system call (``ReceivePath``).

The flow, for each burst (the socket is readable, and the event loop calls the socket pass)::

    1. receive   ``_sock_pass``: one recvmmsg(2) fills the receive ring with whatever is
                 queued (mmsg.py); with UDP GRO (``_sock_pass_offload``) a message may
                 be a run of records, cut into its datagrams (``_datagram``)
    2. unwrap    on a relayed path, records come as ChannelData on our channel
                 (``channel_record``); anything else there is the TURN client's
    3. classify  by the first byte (RFC 7983, record.py): a frame record of the current
                 epoch, of a sane size, goes on inline; another record (control, another
                 epoch) the slow way (``_open_slow``); anything else (STUN, DTLS, TURN)
                 back to the socket's owner (``_to_owner``), malformed STUN dropped
    4. replay    the counter checked against the epoch's window before decrypting
                 (cheap rejection); in-order records skip the bitmap (replay.py)
    5. open      in place: the nonce from the epoch's IV and the counter, the header as
                 associated data (``decrypt_into``); a failure is FORGED
    6. accept    only now does the window move: a forged record moves nothing
    7. deliver   the transit hook may send the frame on by another tunnel
                 (transit_table.py); else to the TAP, one write (with a vnet TAP through
                 the ``TcpCoalescer``, which joins a TCP stream's segments: offload.py)
    8. after     the coalescer flushed, the transit table told the burst is over

The slow path (``_open_slow``) does 4-7 allocating, for any epoch of the three
it keeps (previous, current, next): a record of the next epoch promotes it
(``_promote_rx``, the peer rekeyed) within the tunnel's budget of epochs
(``RekeyPolicy.peer_epochs``; past it, it is dropped unopened), and a control record, within the tunnel's
budget of them (``CONTROL_BUDGET``, CLOSE apart: decision 0079), goes to the
session's ``on_control`` (liveness); past it, it is dropped unparsed.
``native.py`` runs steps 1-7 in Rust for frame records of the current epoch
(``_sock_pass_native``) and hands the rest here.
"""

from __future__ import annotations

import logging
import os
import struct

from cryptography.exceptions import InvalidTag

from evio.tunnel.datapath.fd_state import FdState, _RxEpoch
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.datapath.keys import TrafficSecret
from evio.tunnel.datapath.mmsg import GroRecvBatch, ReceiveBatch
from evio.tunnel.datapath.offload import GSO_NONE, TcpCoalescer
from evio.tunnel.datapath.record import (
    ETHERNET_HEADER_LEN,
    HEADER,
    HEADER_LEN,
    KIND_CONTROL,
    KIND_FRAME,
    OVERHEAD,
    ControlOpcode,
    nonce,
    parse_control,
)
from evio.tunnel.datapath.replay import ACCEPT, REPLAYED
from evio.tunnel.errors import RecordError, UnknownControlError
from evio.tunnel.stun_framing import check_framing

logger = logging.getLogger(__name__)

_U64 = struct.Struct("!Q")
_MIN_FRAME_RECORD = OVERHEAD + ETHERNET_HEADER_LEN
_MIN_RX_SLOT = 2048
_CLOSE = bytes([ControlOpcode.CLOSE])
GRO_SLOTS = 16  # 64 KiB each: up to 16 bursts of records per recvmmsg


class ReceivePath(FdState):
    """Underlay -> TAP: the receiving half of ``FdDatapath`` (module doc)."""

    # -- interface -----------------------------------------------------------------

    def inject(self, record: bytes) -> None:
        if not self._running:
            self._drops[DropReason.EARLY] += 1
            return
        self._open_slow(memoryview(record), len(record))
        if self._coalescer is not None:
            self._coalescer.flush()
        if self._transit_done is not None:
            self._transit_done()

    # -- setup ---------------------------------------------------------------------

    def _prepare_receive_buffers(self) -> None:
        """The receive ring (and, with a vnet TAP, the coalescer); memoryviews per record length on first use."""
        hoff = self._hoff
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
            self._coalescer = TcpCoalescer(self._write_vnet, self._max_frame)

    def _receive_rings(self, slot_size: int) -> tuple[ReceiveBatch, GroRecvBatch | None]:
        """The ring the socket pass reads into (slots of ``slot_size`` without GRO), and it again if it is
        a GRO ring (a native data path overrides this with its own, native.py)."""
        if self._gro:
            ring = GroRecvBatch(GRO_SLOTS)
            return ring, ring
        return self._receive_batch_factory(self._batch, slot_size), None

    def _new_rx_epoch(self, secret: TrafficSecret) -> _RxEpoch:
        return _RxEpoch(self._cipher, secret, self._window_size)

    def _make_rx_views(self, slot: int, n: int) -> tuple[memoryview, memoryview]:
        start = slot * self._rx_ring.slot_size + self._hoff
        views = (self._rx_ring.view[start + HEADER_LEN : start + n], self._rx_plain_mv[: n - OVERHEAD])
        self._rx_views[slot][n] = views
        return views

    # -- 1-8: underlay -> TAP ------------------------------------------------------

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

    # -- 1-8 with offloads: a message may be a GRO run of records --------------------

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

    # -- 3: what the passes do not open inline -----------------------------------------

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

    # -- 7: delivery ------------------------------------------------------------------

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

    def _to_tap(self, frame: memoryview) -> None:
        """An opened frame to the TAP past the transit hook (``_deliver`` without it, not inlined there:
        a call per frame less on the Python path)."""
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
            if self._owner_failure_log.should_log(None, now):
                logger.warning("tunnel datagram owner failed (%d so far)", self._drops[DropReason.OWNER_FAILED], exc_info=True)

    # -- the slow path: any record, any epoch ------------------------------------------

    def _open_slow(self, record: memoryview | bytes, n: int) -> bool:
        """Any record: other epochs, control, odd sizes, injected. Allocates; rare. True when it was
        authentic and new (a frame delivered or a control message taken, even a malformed one or one
        past the budget)."""
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
        promotes = state is self._rx_next
        if promotes and not self._epoch_budget_left():
            # The peer holds its keys, so it can move to a new epoch with every record (review21v3): while
            # it has spent the budget, a record of the next epoch is not even opened. Spent below, only by
            # an authenticated record, so a forger cannot hold back an honest rekey.
            self._drops[DropReason.EPOCH_RATE] += 1
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
        if promotes:
            self._epoch_budget.take(self._now())
            self._promote_rx()
        if kind == KIND_FRAME:
            if len(plaintext) < ETHERNET_HEADER_LEN:
                self._drops[DropReason.TRUNCATED] += 1
                return False
            self._rx_frames += 1
            self._rx_bytes += len(plaintext)
            self._deliver(memoryview(plaintext))
            return True
        if not self._within_control_budget(plaintext):
            # The peer holds the keys, so it can send these as fast as it likes (review21o O4): past the
            # budget, nothing more of this record is read; the window above has moved, as for any record.
            # Still counted received (rx_records): authentic, so the peer was heard, and liveness is not
            # to take a tunnel whose peer's answers were squeezed out for silent.
            self._drops[DropReason.CONTROL_RATE] += 1
            self._rx_control += 1
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

    def _within_control_budget(self, plaintext: bytes) -> bool:
        """Spend a token for an authenticated control record: CLOSE from its own allowance (the opcode
        byte, all that is read of it here), any other from the tunnel's budget (decision 0079)."""
        now = self._now()
        if plaintext[:1] == _CLOSE:
            return self._close_budget.take(now)
        return self._control_budget.take(now)

    def _epoch_budget_left(self) -> bool:
        """Whether the peer may move to its next epoch now (a token left, not spent here)."""
        now = self._now()
        return self._epoch_budget.next_token(now) <= now

    def _now(self) -> float:
        """The event loop's clock, which the budgets are spent on."""
        return self._loop.time() if self._loop is not None else 0.0

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


def record_in(data: bytes, channel: int | None) -> bytes | None:
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
