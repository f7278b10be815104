"""Sending: frames from the TAP to the peer, sealed, a burst per system call (``SendPath``).

The flow, for each burst (the TAP fd is readable, and the event loop calls the TAP pass)::

    1. read      ``_tap_pass``: up to ``batch`` frames, one readv each, into the plaintext
                 buffer; a frame larger than the tunnel MTU is dropped (OVERSIZED)
    2. rekey     at the epoch's record limit (``RekeyPolicy``), ``rekey`` ratchets the send
                 secret to the next epoch (keys.py) and the counter starts again at 0
    3. header    kind, epoch and counter into the next slot of the send ring (record.py)
    4. seal      in place: the nonce is the epoch's IV XOR the counter, the header the
                 associated data (``encrypt_into``); no buffer is allocated per frame
    5. frame     on a relayed path, the ChannelData header (channel, length) in front
    6. send      the ring with one sendmmsg(2) (mmsg.py; UDP GSO for runs of equal
                 records); what the kernel refused is counted (SEND_FAILED)

With a vnet TAP (offloads), ``_tap_pass_vnet`` replaces step 1: a read may be a
TCP super-frame of up to 64 KiB, which ``offload.segment_tcp`` cuts into frames
in place, each sealed by ``_seal_frame`` (steps 2-5), the ring sent (6)
whenever it fills. ``native.py`` runs steps 1-6 in Rust (``_tap_pass_native``).

Other ways a record leaves:
- control records (liveness): ``send_control`` -> ``_send_record``, one sendto,
  allocating (a few per second at most);
- another tunnel's transit frames (transit_table.py): ``accept_plain`` seals
  one into the ring (steps 2-5), ``flush_plain`` sends the ring (6);
- path MTU probes (evio.tunnel.pmtu): ``send_probe``, a control record padded to
  the size probed, sent with DF forced (never fragmented, the kernel's cache ignored).

A frame within the TAP MTU but over the probed path (``set_path_mtu``) is not sent:
``_too_big`` writes ICMP "fragmentation needed" / "packet too big" for it back into
the TAP (too_big.py) and counts it (PATH_TOO_BIG); the check shares step 1's
comparison, so a path that takes the whole MTU costs nothing per frame.
"""

from __future__ import annotations

import logging
import os
import socket
import struct

from evio.tunnel.datapath.buffers import zeroed
from evio.tunnel.datapath.fd_state import FdState
from evio.tunnel.datapath.interface import DropReason, Underlay
from evio.tunnel.datapath.keys import TrafficSecret, make_aead
from evio.tunnel.datapath.mtu import IP_MTU_DISCOVER, IPV6_MTU_DISCOVER, PMTUDISC_PROBE, datagram_overhead
from evio.tunnel.datapath.offload import (
    F_NEEDS_CSUM,
    GSO_NONE,
    VNET_HDR,
    VNET_HDR_LEN,
    OffloadError,
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
    pack_probe,
)
from evio.tunnel.datapath.too_big import answer as too_big_answer

logger = logging.getLogger(__name__)

_U64 = struct.Struct("!Q")
_CHANNEL = struct.Struct("!HH")
_PLAIN_BUF_LEN = 65536
_SUPERFRAME_LEN = VNET_HDR_LEN + 65536 + 256  # a TAP read with offloads: 64 KiB of TCP and its headers


class SendPath(FdState):
    """TAP -> underlay: the sending half of ``FdDatapath`` (module doc)."""

    # -- interface -----------------------------------------------------------------

    def send_control(self, message: ControlMessage) -> None:
        if not self._running:
            return
        self._send_record(KIND_CONTROL, pack_control(message.opcode, message.flags, message.token, message.payload))
        self._tx_control += 1

    def accept_plain(self, frame: memoryview) -> bool:
        """Seal a plain frame from elsewhere (another tunnel's transit frame) into the send ring;
        ``flush_plain`` sends it. False if this data path cannot take it (then the frame goes by the
        bridge, and this tunnel's TAP pass answers it if it is too big for the path)."""
        if not self._running or len(frame) > self._path_frame:
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

    # -- setup ---------------------------------------------------------------------

    def _prepare_send_buffers(self, underlay: Underlay) -> None:
        """The send ring and the TAP read buffers; the memoryviews per frame length are made on first use."""
        hoff = self._hoff
        self._tx_plain = zeroed(_PLAIN_BUF_LEN)
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
        if self._vnet:
            self._sf = zeroed(_SUPERFRAME_LEN)
            self._sf_mv = memoryview(self._sf)
            self._sf_iov = [self._sf_mv]
            self._slot = self._tx_nbytes = 0

    def _make_tx_views(self, slot: int, n: int) -> tuple[memoryview, memoryview]:
        start = slot * self._tx_ring.slot_size + self._hoff
        self._tx_ring.view[start] = KIND_FRAME
        views = (self._tx_plain_mv[:n], self._tx_ring.view[start + HEADER_LEN : start + OVERHEAD + n])
        self._tx_views[slot][n] = views
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

    # -- 1-6: TAP -> underlay ------------------------------------------------------

    def _tap_pass(self) -> int:
        """Drain the TAP: seal up to ``batch`` frames into the ring, send them at once; returns how many went out."""
        readv = os.readv
        tap_fd = self._tap_fd
        iov = self._tx_iov
        path_frame = self._path_frame
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
                if n > path_frame:
                    self._too_big(self._tx_plain_mv[:n])
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

    # -- 1-6 with offloads: a TAP read may be a TCP super-frame -------------------

    def _tap_pass_vnet(self) -> int:
        """Drain a TAP with vnet headers: each read is a frame or a TCP super-frame, cut into records."""
        readv = os.readv
        tap_fd = self._tap_fd
        iov = self._sf_iov
        buf = self._sf_mv
        max_frame = self._max_frame
        path_frame = self._path_frame
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
                        if length > path_frame:
                            self._too_big(buf[VNET_HDR_LEN:n])
                            continue
                        if flags & F_NEEDS_CSUM:
                            complete_checksum(buf, VNET_HDR_LEN, n, csum_start, csum_offset)
                        seal(VNET_HDR_LEN, n)
                    else:
                        if path_frame < max_frame:
                            # The path takes less than the sender's segments (evio.tunnel.pmtu): cut them to fit
                            # it, as the native ring does; the sender's TCP needs no ICMP answer and loses nothing.
                            headers = _first_segment(buf, VNET_HDR_LEN, csum_start, gso_size) - gso_size
                            gso_size = min(gso_size, max(path_frame - headers, 1))
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

    # -- control records, outside the fast path -------------------------------------

    def _send_record(self, kind: int, payload: bytes) -> None:
        """Seal and send one record outside the fast path (control messages)."""
        assert self._underlay is not None
        try:
            self._underlay.sock.sendto(self._seal_record(kind, payload), self._peer)
        except OSError:
            self._drops[DropReason.SEND_FAILED] += 1

    def _seal_record(self, kind: int, payload: bytes) -> bytes:
        """One record, allocated, framed for the path (ChannelData when relayed)."""
        assert self._tx_secret is not None
        if self._tx_counter >= self._tx_limit:
            self.rekey()
        counter = self._tx_counter
        self._tx_counter = counter + 1
        header = HEADER.pack(kind, self._tx_secret.epoch & 0xFF, counter)
        record = header + self._tx_aead.encrypt(nonce(self._tx_iv, counter), payload, header)
        if self._channel is not None:
            record = _CHANNEL.pack(self._channel, len(record)) + record
        return record

    # -- path MTU (evio.tunnel.pmtu) --------------------------------------------------

    def largest_datagram(self) -> int:
        return datagram_overhead(self._peer, self._hoff) + self._max_record

    def set_path_mtu(self, mtu: int | None) -> None:
        self._path_mtu = mtu
        frame = self._max_frame if mtu is None else mtu - datagram_overhead(self._peer, self._hoff) - OVERHEAD
        self._path_frame = max(ETHERNET_HEADER_LEN, min(frame, self._max_frame))

    def send_probe(self, token: int, size: int) -> None:
        """A probe the path refuses here (EMSGSIZE: a local link smaller than ``size``) is lost as
        one dropped on the way would be; neither counts as a send failure."""
        if not self._running:
            return
        assert self._underlay is not None
        record = self._seal_record(KIND_CONTROL, pack_probe(token, size - datagram_overhead(self._peer, self._hoff) - OVERHEAD))
        sock = self._underlay.sock
        options = [(socket.IPPROTO_IP, IP_MTU_DISCOVER)]
        if isinstance(sock, socket.socket) and sock.family == socket.AF_INET6:
            options.append((socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER))
        kept = []
        try:
            for level, name in options:
                try:
                    kept.append((level, name, sock.getsockopt(level, name)))
                    sock.setsockopt(level, name, PMTUDISC_PROBE)
                except OSError:
                    pass  # not this family's option (an IPv6-only socket has no IPv4 one)
            sock.sendto(record, self._peer)
        except OSError:
            pass
        finally:
            for level, name, value in kept:
                sock.setsockopt(level, name, value)
        self._tx_control += 1

    def _too_big(self, frame: memoryview) -> None:
        """A frame from the TAP that the path does not take (module doc); over the TAP MTU: OVERSIZED."""
        if len(frame) > self._max_frame:
            self._drops[DropReason.OVERSIZED] += 1
            return
        reply = too_big_answer(frame, self._path_frame - ETHERNET_HEADER_LEN)
        if reply is None:
            self._drops[DropReason.PATH_TOO_BIG_UNANSWERED] += 1
            return
        self._drops[DropReason.PATH_TOO_BIG] += 1
        try:
            os.write(self._tap_fd, (bytes(VNET_HDR_LEN) if self._vnet else b"") + reply)
        except OSError:
            self._drops[DropReason.TAP_WRITE_FAILED] += 1


def _first_segment(buf: memoryview, at: int, csum_start: int, gso_size: int) -> int:
    """The frame length of a TCP super-frame's first segment: its headers (to the end of TCP's) and gso_size."""
    offset = at + csum_start + 12
    return csum_start + ((buf[offset] >> 4) * 4 if offset < len(buf) else 20) + gso_size
