"""``FdDatapath``'s state, made once and shared by its two directions (send.py, receive.py).

The Python data path is one object whose methods live in three modules, by
concern, as wireguard-go's peer has ``send.go`` and ``receive.go``:
``FdDatapath`` (fd_datapath.py) starts, stops, maintains and moves it;
``SendPath`` (send.py) takes frames from the TAP to the underlay;
``ReceivePath`` (receive.py) takes records from the underlay to the TAP.
Both halves derive from ``FdState``, which constructs every field either
reads, so each field is declared in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from evio.config.model import Cipher
from evio.ratelimit import LogLimiter, Rate, TokenBucket
from evio.tunnel.datapath.interface import ControlHandler, DropReason, Underlay
from evio.tunnel.datapath.keys import RekeyPolicy, TrafficSecret, make_aead
from evio.tunnel.datapath.mmsg import DatagramBatch, ReceiveBatch, make_batch, make_receive_batch
from evio.tunnel.datapath.offload import TcpCoalescer
from evio.tunnel.datapath.record import ETHERNET_HEADER_LEN, OVERHEAD
from evio.tunnel.datapath.replay import ReplayWindow
from evio.tunnel.datapath.transit_table import TransitHook

TRIM_AFTER = 10.0
"""Seconds without a frame after which a data path's buffers are handed back to the kernel."""
_OWNER_FAILURE_LOG_INTERVAL = 10.0  # seconds between warnings that the datagram owner (ICE) failed
CONTROL_BUDGET = Rate(per_second=200.0, burst=200)
"""Authenticated control records a tunnel takes from its peer (receive.py, ``_open_slow``); the rest are
dropped as ``control-rate`` before they are parsed. An honest peer sends at most about 110 a second, every
sender at its own limit at once, and about 55 at once (decision 0079)."""
CLOSE_BUDGET = Rate(per_second=1.0, burst=2)
"""CLOSE records, apart from ``CONTROL_BUDGET``: a peer that spent that budget can still be heard closing.
CLOSE ends the tunnel, so one is all an honest peer sends."""


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


class FdState:
    """The fields of ``FdDatapath``, both directions' (module doc)."""

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
        # The largest frame the path takes (evio.tunnel.pmtu, ``set_path_mtu``); larger ones are answered.
        self._path_mtu: int | None = None
        self._path_frame = self._max_frame
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
        self._owner_failure_log = LogLimiter[None](_OWNER_FAILURE_LOG_INTERVAL)
        # Spent on the event loop's clock, only by authenticated records: a forger cannot drain them.
        self._control_budget = TokenBucket(CONTROL_BUDGET, 0.0)
        self._close_budget = TokenBucket(CLOSE_BUDGET, 0.0)
        self._epoch_budget = TokenBucket(self._rekey_policy.peer_epochs, 0.0)  # the peer's moves to a next epoch
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
        # Set for each path by _prepare_buffers: its ChannelData channel (relayed), the peer's address, and
        # the offset of a record in a datagram (the ChannelData header's length, or 0).
        self._channel: int | None = None
        self._peer: Any = None
        self._hoff = 0
