"""The data path's narrow interface: move frames between a TAP and an underlay socket, sealed.

Everything else in the tunnel (ICE, DTLS, liveness, teardown) talks to the
data path only through ``Datapath``; ``FdDatapath`` is the Python
implementation, and a faster one (native code, batching, threads) can replace
it by implementing the same protocol.
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from evio.tunnel.datapath.keys import SessionSecrets
from evio.tunnel.datapath.record import ControlMessage

Address = Any  # a socket address: (host, port) for UDP


def clear_socket_error(sock: socket.socket) -> None:
    """Reading SO_ERROR clears the error an ICMP message left on a connected socket."""
    try:
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    except OSError:
        pass


class DropReason(enum.Enum):
    """Why a datagram or frame was dropped; each has its own counter."""

    TRUNCATED = "truncated"
    """Shorter than a record header plus tag (or a ChannelData shorter than its length)."""
    OVERSIZED = "oversized"
    """A frame from the TAP larger than the tunnel MTU allows."""
    FORGED = "forged"
    """Failed authentication: wrong key, tampered, or not from the peer."""
    REPLAYED = "replayed"
    """Counter already seen inside the replay window."""
    STALE = "stale"
    """Counter older than the replay window."""
    UNKNOWN_EPOCH = "unknown-epoch"
    """Epoch is none of previous, current or next."""
    BAD_CONTROL = "bad-control"
    """Authenticated control record with a malformed payload."""
    UNKNOWN_CONTROL = "unknown-control"
    """Authenticated control record with an opcode this release does not know (a newer peer's; record.py)."""
    CONTROL_RATE = "control-rate"
    """Authenticated control record past the tunnel's budget of them (fd_state.py, ``CONTROL_BUDGET``; decision 0079):
    dropped before it is parsed or handled."""
    EPOCH_RATE = "epoch-rate"
    """A record of the peer's next epoch while the tunnel's budget of epoch moves is spent (keys.py,
    ``RekeyPolicy.peer_epochs``; decision 0079, amendment 1): dropped unopened, no epoch derived."""
    DTLS_RATE = "dtls-rate"
    """A DTLS datagram after the handshake past the tunnel's budget of them (path/dtls.py, ``AFTER_HANDSHAKE``;
    decision 0008, amendment 1): dropped before OpenSSL reads it. Counted by the tunnel (session.py), which the
    datagram reaches past the data path."""
    EARLY = "early"
    """A record that arrived before keys were in place."""
    SEND_FAILED = "send-failed"
    """The underlay socket refused a datagram (buffer full, no route)."""
    TAP_WRITE_FAILED = "tap-write-failed"
    """The TAP refused a frame (interface down, queue full)."""
    MALFORMED_STUN = "malformed-stun"
    """In the STUN range (first byte 0-3) but not framed as STUN (stun_guard.check_framing); the ICE gate
    screens the rest (path.inbound_gate: strangers' requests, unsolicited responses)."""
    OWNER_FAILED = "owner-failed"
    """The socket's owner raised while taking a datagram handed back to it."""
    BAD_OFFLOAD = "bad-offload"
    """A TAP read whose virtio-net header or headers cannot be segmented or checksummed (tunnel.offload)."""
    PATH_TOO_BIG = "path-too-big"
    """A frame within the TAP MTU but larger than the probed path takes, answered into the TAP with ICMP
    "fragmentation needed" / "packet too big" (too_big.py): its sender sends smaller from then on."""
    PATH_TOO_BIG_UNANSWERED = "path-too-big-unanswered"
    """As PATH_TOO_BIG, but nothing to answer (not IP, IPv4 without DF, an ICMP error, transit frames)."""


@dataclass(frozen=True)
class DatapathStats:
    tx_frames: int = 0
    tx_bytes: int = 0
    rx_frames: int = 0
    rx_bytes: int = 0
    tx_records: int = 0
    """Records sent, frames and control."""
    rx_records: int = 0
    """Records received and authenticated, frames and control."""
    tx_epoch: int = 0
    rx_epoch: int = 0
    foreign: int = 0
    """Datagrams handed back to the socket's owner (STUN, DTLS, TURN)."""
    tap_reads: int = 0
    """Reads from the TAP that returned a frame (with offloads: a super-frame counts once)."""
    tap_writes: int = 0
    """Frames written to the TAP (with offloads: a coalesced super-frame counts once)."""
    gso_reads: int = 0
    """TCP super-frames read from the TAP and cut into records."""
    gro_writes: int = 0
    """Super-frames written to the TAP, each joined from several records."""
    transit_frames: int = 0
    """Frames received (counted in rx_frames) that went on by another tunnel, not the TAP (tunnel.transit)."""
    path_moves: int = 0
    """Times the data path moved to another underlay (relay to direct), by us or following the peer."""
    drops: Mapping[DropReason, int] = field(default_factory=dict)
    implementation: str = "python"
    """Which data path code runs: "python" or "native" (tunnel.datapath)."""

    def dropped(self, reason: DropReason) -> int:
        return self.drops.get(reason, 0)


class Underlay(Protocol):
    """The underlay socket lent to the data path by its owner (the ICE agent).

    While the data path runs it is the only reader; datagrams that are not
    records go back to the owner through ``deliver_foreign``. The socket must
    not be connected: a connected UDP socket reports ICMP errors as a socket
    error, and uvloop (libuv) stops a reader for good on the first one.
    """

    @property
    def sock(self) -> socket.socket: ...

    @property
    def peer(self) -> Address:
        """Where records are sent: the peer on a direct path, the TURN server on a relayed one."""

    @property
    def channel(self) -> int | None:
        """TURN channel number when the path is relayed: records travel as ChannelData."""

    def pause_owner(self) -> None: ...

    def resume_owner(self) -> None: ...

    def deliver_foreign(self, data: bytes, addr: Address) -> None: ...


ControlHandler = Callable[[ControlMessage], None]


@runtime_checkable
class ProbesPath(Protocol):
    """A data path that probes its path's MTU (evio.tunnel.pmtu) and holds frames to what it found."""

    def largest_datagram(self) -> int:
        """The IP datagram of the largest record this tunnel sends on its current path."""

    def send_probe(self, token: int, size: int) -> None:
        """Send a PMTU_PROBE record padded to an IP datagram of ``size`` bytes, never fragmented."""

    def set_path_mtu(self, mtu: int | None) -> None:
        """The path takes IP datagrams of ``mtu`` bytes (None: as configured); larger frames are answered."""


class Datapath(Protocol):
    def start(
        self, tap_fd: int, underlay: Underlay, secrets: SessionSecrets, on_control: ControlHandler,
        vnet_hdr: bool = False,
    ) -> None:
        """Take over the TAP fd and the underlay socket and start forwarding; ``vnet_hdr``: the TAP
        was opened with IFF_VNET_HDR and offloads (every read and write starts with a virtio-net header)."""

    def send_control(self, message: ControlMessage) -> None:
        """Seal and send one control record."""

    def inject(self, record: bytes) -> None:
        """A record that reached the socket's owner instead of the data path (slow path)."""

    def rekey(self) -> None:
        """Move the sending direction to the next epoch now."""

    def maintain(self) -> None:
        """Periodic housekeeping, called every few hundred milliseconds (re-arms fd readers)."""

    def add_underlay(self, underlay: Underlay, on_move: Callable[[], None] | None = None) -> None:
        """A second path validated by ICE: read it too; the first authenticated, non-replayed record
        from it moves sending there (the peer moved) and calls ``on_move``. Ignored while a second
        path is held."""

    def move_underlay(self, underlay: Underlay) -> None:
        """Send on ``underlay`` from now on, same keys, counters and replay windows; the path left
        is still read until ``release_side``."""

    def release_side(self) -> Underlay | None:
        """Stop reading the second path, give it back to its owner and return it (None without one)."""

    def stop(self) -> None:
        """Stop reading; give the socket back to its owner. Idempotent."""

    def stats(self) -> DatapathStats: ...
