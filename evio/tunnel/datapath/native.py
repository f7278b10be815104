"""``NativeFdDatapath``: ``FdDatapath`` with its per-frame loops in Rust (the ``evio_native`` extension).

Why (docs/design.md, "Native data path"): in the Python passes the
interpreter, not the kernel or the AEAD, is most of a frame's cost. Here one
call per burst, with the GIL released, does a whole pass:

- TAP -> underlay: read up to ``batch`` frames straight into the slots of a
  ring, seal each in place, send the ring with one sendmmsg(2) (UDP GSO for
  runs of equal records);
- underlay -> TAP: one recvmmsg(2), open every frame record of the current
  epoch in place, check and move the replay window, write the frame to the
  TAP (a UDP GRO message is cut into its datagrams first); with a vnet TAP,
  consecutive segments of one TCP stream are joined into a super-frame with
  a vnet header first, by the rules and to the bytes of ``TcpCoalescer``
  (offload.py), flushed at the end of every burst. Whatever else
  came (control records, other epochs, STUN, DTLS, TURN) is left in the ring
  and handed to ``FdDatapath``'s Python code, which opens it or gives it to
  the socket's owner as before.

The transit fast path (transit_table.py) needs its hook to see a frame before the
TAP does, which per frame would cost the native pass its point. The pass
holds a prefilter instead, the destination MACs this ingress has transit
entries for (refreshed before a burst when the table changed): a frame to
one of them is opened, counted and its replay window moved natively, then
handed back opened by its place in the ring, and Python runs the hook on it
(the full lookup: source MAC, deadline, egress) or writes it to the TAP.
Frames to other destinations never leave the native pass. Within a burst the
handed-back frames reach the TAP after the native ones.

Where the build has routes (decision 0069), the pass holds the entries' whole
keys (destination and source MAC) instead and hands back no frame: it notes
each transit frame by its entry, in place in the ring; Python asks the table
once per entry and burst (``forward.run``: deadline, egress, counters), and an
egress with a native send ring copies the run into its slots, seals and sends it
(``accept_routed``, one call per run, the GIL released). A Python egress takes
them frame by frame (``accept_plain``); frames nobody takes go to the TAP.

Where the build can (``bound()``), the event loop calls the rings themselves: each ring holds its
pass's arguments (``bind``), so a pass that leaves nothing for Python (no drop, no leftover, no
transit frame, the counter below its limit) runs no Python code, and the counters it adds to are
kept in the ring (``totals``) and read through this class's properties. The RTT a tunnel adds fell
by a fifth (decision 0077, docs/performance.md).

The records are the same bytes as the Python path's (a native end talks to
a Python end), keys and epochs still come from Python (``_set_tx``,
``_new_rx_epoch``), and the replay window of each epoch is the native
``ReplayWindow``, shared by both paths. With ``tunnel.tso`` the TAP pass
also cuts the TAP's TCP super-frames into segments (native/src/tso.rs) before
sealing them ([0053](../../../docs/decisions/0053-tso-in-the-native-path.md));
a build without it leaves that TAP pass to Python, which segments too.

``available()`` says whether the extension is installed (scripts/bootstrap
builds it when cargo is there); ``tunnel.datapath`` chooses (config).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from evio.config.model import Cipher
from evio.tunnel.datapath.buffers import zeroed
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.fd_state import TRIM_AFTER, _RxEpoch
from evio.tunnel.datapath.interface import DropReason, Underlay
from evio.tunnel.datapath.keys import RekeyPolicy, TrafficSecret
from evio.tunnel.datapath.mmsg import GRO_SLOT_SIZE, GroRecvBatch, ReceiveBatch, SlotRing, parse_sockaddr, sockaddr
from evio.tunnel.datapath.receive import GRO_SLOTS
from evio.tunnel.datapath.transit_table import TransitDestinations, TransitHook

logger = logging.getLogger(__name__)

# sock_pass's leftovers: a datagram for the socket's owner, a record to open, a frame opened natively.
_LEFT_DATAGRAM, _LEFT_RECORD, _LEFT_FRAME = 0, 1, 2

try:
    _native: Any = importlib.import_module("evio_native")
except ImportError:
    _native = None
if _native is not None and not hasattr(_native.RxRing, "set_transit"):
    # Built from an older native/ (its receive pass has no transit prefilter): as not installed,
    # until scripts/build-native runs again.
    logger.warning("evio_native at %s is older than this evio: run scripts/build-native", _native.__file__)
    _native = None
elif _native is not None and not hasattr(_native.TxRing, "tso"):
    # Older than 0053: it works, but with tunnel.tso (the default) Python cuts the super-frames.
    logger.warning("evio_native at %s cuts no TSO super-frames: run scripts/build-native", _native.__file__)


_BOUND = _native is not None and hasattr(_native.TxRing, "bind") and hasattr(_native.RxRing, "bind")


def bound() -> bool:
    """Whether the event loop calls the native rings themselves (a build older than 0077 does not)."""
    return _BOUND


class _Counted:
    """A counter that bound native passes add to as well (``totals()[index]`` of the ring bound at
    ``ring``): its value is what Python counted plus what the ring did, so ``+=`` anywhere keeps working."""

    def __init__(self, ring: str, index: int) -> None:
        self._ring = ring
        self._index = index
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = "_py" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        ring = obj.__dict__.get(self._ring)
        base = obj.__dict__.get(self._name, 0)
        return base if ring is None else base + ring.totals()[self._index]

    def __set__(self, obj: Any, value: int) -> None:
        ring = obj.__dict__.get(self._ring)
        obj.__dict__[self._name] = value if ring is None else value - ring.totals()[self._index]


_TX_COUNTED = ("_tx_frames", "_tx_bytes", "_tap_reads")
_RX_COUNTED = ("_rx_frames", "_rx_bytes", "_tap_writes", "_gro_writes")


def available() -> bool:
    """Whether the native extension is installed."""
    return _native is not None


def module() -> Any:
    """The extension module; raises ImportError where it is not installed."""
    if _native is None:
        raise ImportError("evio_native is not installed (scripts/bootstrap builds it when cargo is present)")
    return _native


def native_tso() -> bool:
    """Whether the installed extension cuts TCP super-frames itself (a build older than 0053 does not)."""
    return _native is not None and hasattr(_native.TxRing, "tso")


def native_aead(cipher: Cipher, key: bytes, iv: bytes) -> Any:
    return module().Aead(str(cipher), key, iv)


class _NativeRecvRing(SlotRing):
    """The receive ring the native pass fills: a bytearray (Python's slow path reads it in place)
    with lengths and sources of the last burst, as ``mmsg.ReceiveBatch`` offers."""

    def __init__(self, slots: int, slot_size: int, gro: bool = False) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._memory = zeroed(slots * slot_size)
        self._view = memoryview(self._memory)
        self.native = module().RxRing(self._memory, slots, slot_size, gro)

    def length(self, slot: int) -> int:
        return int(self.native.length(slot))

    def source(self, slot: int) -> tuple[Any, ...]:
        return parse_sockaddr(self.native.source(slot))


class NativeFdDatapath(FdDatapath):
    """``FdDatapath`` whose TAP and socket passes run in the native extension (module doc)."""

    implementation = "native"

    # What the bound rings count (module doc): the TxRing's and the RxRing's totals.
    _tx_frames = _Counted("_bound_tx", 0)
    _tx_bytes = _Counted("_bound_tx", 1)
    _tap_reads = _Counted("_bound_tx", 2)
    _rx_frames = _Counted("_bound_rx", 0)
    _rx_bytes = _Counted("_bound_rx", 1)
    _tap_writes = _Counted("_bound_rx", 2)
    _gro_writes = _Counted("_bound_rx", 3)

    @property
    def _tx_counter(self) -> int:
        """The next counter to seal with: the bound TxRing's while there is one (its passes move it)."""
        tx = self.__dict__.get("_bound_tx")
        return int(tx.counter) if tx is not None else int(self.__dict__.get("_py_tx_counter", 0))

    @_tx_counter.setter
    def _tx_counter(self, counter: int) -> None:
        self.__dict__["_py_tx_counter"] = counter
        tx = self.__dict__.get("_bound_tx")
        if tx is not None:
            tx.counter = counter

    @property
    def _gso_reads(self) -> int:
        """Super-frames cut: the bound TxRing keeps its own until taken."""
        tx = self.__dict__.get("_bound_tx")
        if tx is not None and self._tso:
            self.__dict__["_py_gso_reads"] = self.__dict__.get("_py_gso_reads", 0) + tx.take_gso_reads()
        return int(self.__dict__.get("_py_gso_reads", 0))

    @_gso_reads.setter
    def _gso_reads(self, n: int) -> None:
        self.__dict__["_py_gso_reads"] = n

    def __init__(self, mtu: int, rekey: RekeyPolicy | None = None, replay_window: int = 2048, batch: int = 64,
                 gro: bool = False, tso: bool = False, trim_after: float = TRIM_AFTER) -> None:  # fmt: skip
        """``gro``: receive with UDP GRO where the kernel has it; ``tso``: the TAP may hand over TCP
        super-frames (tunnel.tso), which the native TAP pass segments (Python's where the build
        cannot); ``trim_after``: as ``FdDatapath``'s."""
        module()
        self._tso = tso
        self._bound_tx: Any = None  # the TxRing the event loop calls, while there is one
        self._bound_rx: Any = None  # the RxRing likewise (not with a transit hook: its prefilter is Python's)
        super().__init__(mtu, rekey=rekey, replay_window=replay_window, batch=batch, gro=gro, trim_after=trim_after)
        self._native_tx: Any = None
        self._native_rx: _NativeRecvRing | None = None
        self._tx_native_aead: Any = None
        self._transit_destinations: TransitDestinations | None = None
        self._transit_seen = -1  # the prefilter version the native ring holds
        # Routes (0069): the table's keys of this ingress, numbered as the native ring holds them.
        self._transit_keys: Callable[[int], tuple[int, list[bytes]] | None] | None = None
        self._transit_run: Callable[[bytes, int, Callable[[Any], int]], int] | None = None
        self._transit_excluded: list[int] = []
        self._route_keys: list[bytes] = []
        self._routed_route = 0  # the run _take_routed is asked about
        self._routed_left: list[tuple[int, int]] | None = None  # what that run's egress did not take

    # -- hooks of FdDatapath -------------------------------------------------------

    def _readers(self) -> tuple[Callable[[], int], Callable[[], int]]:
        """The rings themselves where the build can (bound with the current fds, keys and epoch),
        else the Python methods that call their passes."""
        sock_reader, tap_reader = super()._readers()
        if self._native_tx is not None:
            tap_reader = self._tap_pass_native
            if _BOUND:
                self._bind_tx()
                tap_reader = self._native_tx
        if self._native_rx is not None:
            sock_reader = self._sock_pass_native
            if _BOUND and self._transit is None:
                self._bind_rx()
                sock_reader = self._native_rx.native
            else:
                self._set_bound_rx(None)
        return sock_reader, tap_reader

    def _bind_tx(self) -> None:
        tx = self._native_tx
        assert tx is not None and self._tx_secret is not None
        tx.bind(self._tap_fd, self._sock_fd, self._tx_native_aead, self._tx_secret.epoch & 0xFF, self._tx_limit,
                self._tap_fallback)  # fmt: skip
        self._set_bound_tx(tx)

    def _bind_rx(self) -> None:
        ring, rx = self._native_rx, self._rx
        assert ring is not None and rx is not None
        ring.native.bind(self._sock_fd, self._tap_fd, rx.native, rx.window, rx.epoch & 0xFF, self._max_record,
                         self._channel, self._vnet, self._sock_fallback)  # fmt: skip
        self._set_bound_rx(ring.native)

    def _set_bound_tx(self, tx: Any) -> None:
        """Make ``tx`` (or None) the ring the counters and the counter are read from, carrying them over."""
        old = self._bound_tx
        if tx is old:
            return
        counts = [getattr(self, name) for name in _TX_COUNTED]
        counter, gso_reads = self._tx_counter, self._gso_reads
        self._bound_tx = tx
        if old is not None:
            old.unbind()  # its references back to this data path go with it
        for name, value in zip(_TX_COUNTED, counts, strict=True):
            setattr(self, name, value)
        self._tx_counter, self._gso_reads = counter, gso_reads

    def _set_bound_rx(self, rx: Any) -> None:
        old = self._bound_rx
        if rx is old:
            return
        counts = [getattr(self, name) for name in _RX_COUNTED]
        self._bound_rx = rx
        if old is not None:
            old.unbind()
        for name, value in zip(_RX_COUNTED, counts, strict=True):
            setattr(self, name, value)

    def _install(self, underlay: Underlay) -> None:
        super()._install(underlay)
        if self._running and self._bound_tx is not None:
            # A path move made a new send ring: the TAP's reader was the one replaced.
            assert self._loop is not None
            self._loop.remove_reader(self._tap_fd)
            self._loop.add_reader(self._tap_fd, self._readers()[1])

    def stop(self) -> None:
        super().stop()
        self._set_bound_rx(None)
        self._set_bound_tx(None)

    def _promote_rx(self) -> None:
        super()._promote_rx()
        if self._bound_rx is not None:
            self._bind_rx()

    def _prepare_buffers(self, underlay: Underlay) -> None:
        super()._prepare_buffers(underlay)
        peer = underlay.peer
        self._set_bound_tx(None)
        self._native_tx = None
        tso = self._vnet and self._tso
        if isinstance(peer, tuple) and (not tso or native_tso()):
            self._native_tx = module().TxRing(self._batch, self._max_frame, sockaddr(peer), self._channel, self._vnet,
                                              **({"tso": True} if tso else {}))  # fmt: skip
            self.set_path_mtu(self._path_mtu)
        self._reset_prefilter()

    def set_path_mtu(self, mtu: int | None) -> None:
        """As ``SendPath.set_path_mtu``; the native ring holds back the frames over it, for ``_too_big``."""
        super().set_path_mtu(mtu)
        tx = getattr(self, "_native_tx", None)  # None while FdState's constructor runs
        if tx is not None and hasattr(tx, "set_path_frame"):  # a build older than path MTU: frames go out as before
            tx.set_path_frame(self._path_frame)

    def _release_buffers(self) -> None:
        super()._release_buffers()
        # The native send ring is a mapping too (94 KiB at 64 slots); a build older than that has no release.
        if self._native_tx is not None and hasattr(self._native_tx, "release"):
            self._native_tx.release()

    def _receive_rings(self, slot_size: int) -> tuple[ReceiveBatch, GroRecvBatch | None]:
        """The native pass's ring only: _to_owner and the slow path read it too (view, length, source;
        it has no recv of its own). Python's ring would be 1 MiB more per tunnel with GRO, never read."""
        self._set_bound_rx(None)
        if self._gro:
            self._native_rx = _NativeRecvRing(GRO_SLOTS, GRO_SLOT_SIZE, gro=True)
        else:
            self._native_rx = _NativeRecvRing(self._batch, slot_size)
        return self._native_rx, None  # type: ignore[return-value]

    def set_transit(self, hook: TransitHook | None, done: Callable[[], None] | None = None,
                    destinations: TransitDestinations | None = None) -> None:  # fmt: skip
        """As ``FdDatapath.set_transit``; without ``destinations`` every frame is handed back for the hook."""
        super().set_transit(hook, done, destinations)
        self._transit_destinations = destinations if hook is not None else None
        keys, run = getattr(destinations, "keys", None), getattr(hook, "run", None)
        if keys is not None and run is not None and hasattr(module().RxRing, "set_transit_routes"):
            self._transit_keys, self._transit_run = keys, run
            self._transit_excluded = sorted(getattr(destinations, "excluded", ()))
        else:
            self._transit_keys = self._transit_run = None
        self._reset_prefilter()
        if self._running and self._native_rx is not None:
            # With a hook the Python pass runs (it refreshes the prefilter first); without, the ring.
            assert self._loop is not None
            self._loop.remove_reader(self._sock_fd)
            self._sock_reader = self._readers()[0]
            self._loop.add_reader(self._sock_fd, self._sock_reader)

    def _reset_prefilter(self) -> None:
        """No hook: every frame stays native; a hook without a prefilter: every frame comes back;
        with one: none until the next burst asks it."""
        self._transit_seen = -1
        self._route_keys = []
        if self._native_rx is not None:
            native = self._native_rx.native
            native.set_transit(b"", self._transit is not None and self._transit_destinations is None)
            if hasattr(native, "set_transit_routes"):
                native.set_transit_routes(b"")

    def _set_tx(self, secret: TrafficSecret) -> None:
        super()._set_tx(secret)
        keys = secret.keys()
        self._tx_native_aead = native_aead(self._cipher, keys.key, keys.iv)
        if self._bound_tx is not None:
            self._bind_tx()  # the new key and epoch (the counter went back to 0 above)

    def _new_rx_epoch(self, secret: TrafficSecret) -> _RxEpoch:
        state = super()._new_rx_epoch(secret)
        keys = secret.keys()
        state.native = native_aead(self._cipher, keys.key, keys.iv)
        state.window = module().ReplayWindow(self._window_size)
        return state

    # -- the passes ----------------------------------------------------------------

    def _tap_pass_native(self) -> int:
        """Drain the TAP through the native ring; returns how many records went out. The pass the event
        loop calls where the ring is not bound, and the rest of a bound one's after a rekey."""
        tx = self._native_tx
        total = 0
        budget = 2 * self._batch  # oversized frames use a read but no slot
        while budget > 0:
            assert self._tx_secret is not None
            result = tx.tap_pass(self._tap_fd, self._sock_fd, self._tx_native_aead, self._tx_secret.epoch & 0xFF,
                                 self._tx_counter, self._tx_limit, budget)  # fmt: skip
            self._tx_counter = result[2]
            total += result[0]
            if not self._tap_result(result):
                break
            self.rekey()
            budget -= max(result[6], 1)
        return total

    def _tap_fallback(self, result: tuple[Any, ...]) -> None:
        """A bound pass that had more than records sent: as the Python pass does after its call."""
        if self._tap_result(result):
            self.rekey()
            self._tap_pass_native()

    def _tap_result(self, result: tuple[Any, ...]) -> bool:
        """Count one TAP pass and answer what it held; True: it stopped at the counter's limit (rekey)."""
        tx = self._native_tx
        sent, nbytes, _counter, oversized, bad_offload, failed, reads, error, at_limit, gso_refused = result
        self._tx_frames += sent
        self._tx_bytes += nbytes
        if self._vnet:
            self._tap_reads += reads
            if self._tso and self._bound_tx is None:
                self._gso_reads += tx.take_gso_reads()
        drops = self._drops
        if oversized:
            drops[DropReason.OVERSIZED] += oversized
        if bad_offload:
            drops[DropReason.BAD_OFFLOAD] += bad_offload
        if failed:
            drops[DropReason.SEND_FAILED] += failed
        if gso_refused:
            logger.info("UDP GSO refused; sending one datagram per message")
        if error:
            # The TAP went away under us; the session notices and tears down.
            logger.warning("tunnel tap read failed: errno %d", error)
            self._loop.remove_reader(self._tap_fd)  # type: ignore[union-attr]
            return False
        if self._path_frame < self._max_frame:
            held, overflow = tx.take_too_big()
            for frame in held:
                self._too_big(memoryview(frame))
            drops[DropReason.PATH_TOO_BIG_UNANSWERED] += overflow
        return bool(at_limit)

    def _sock_pass_native(self) -> int:
        """One burst through the native ring; the rest of it through the Python slow path."""
        rx = self._rx
        ring = self._native_rx
        assert rx is not None and ring is not None
        if self._transit_keys is not None:
            routes = self._transit_keys(self._transit_seen)
            if routes is not None:
                self._transit_seen, self._route_keys = routes
                ring.native.set_transit_routes(b"".join(self._route_keys), self._transit_excluded)
        elif self._transit_destinations is not None:
            changed = self._transit_destinations(self._transit_seen)
            if changed is not None:
                self._transit_seen, destinations = changed
                ring.native.set_transit(destinations)
        result = ring.native.sock_pass(
            self._sock_fd, self._tap_fd, rx.native, rx.window, rx.epoch & 0xFF, self._max_record,
            self._channel, self._vnet,
        )  # fmt: skip
        return self._sock_result(result)

    def _sock_fallback(self, result: tuple[Any, ...]) -> None:
        """A bound pass that left something for Python (drops, leftovers): as after ``sock_pass``."""
        self._sock_result(result)

    def _sock_result(self, result: tuple[Any, ...]) -> int:
        """Count one receive pass and handle what it left in the ring; returns the frames delivered."""
        ring = self._native_rx
        assert ring is not None
        received, frames, nbytes, counts, transit, (tap_writes, gro_writes), leftovers = result
        if not received:
            return 0
        self._rx_frames += frames
        self._rx_bytes += nbytes
        # With a vnet TAP the native coalescer counts its writes; _deliver counts those handed back.
        self._tap_writes += tap_writes
        self._gro_writes += gro_writes
        truncated, replayed, stale, forged, tap_failed = counts
        if truncated or replayed or stale or forged or tap_failed:
            drops = self._drops
            drops[DropReason.TRUNCATED] += truncated
            drops[DropReason.REPLAYED] += replayed
            drops[DropReason.STALE] += stale
            drops[DropReason.FORGED] += forged
            drops[DropReason.TAP_WRITE_FAILED] += tap_failed
        routed = transit and self._transit_keys is not None
        if routed:
            self._forward_routed(ring)
        if leftovers or routed:
            before = self._rx_frames
            view = ring.view
            for slot, start, n, kind in leftovers:
                if kind == _LEFT_FRAME:
                    # Opened, counted and its window moved by the native pass: only the hook or the TAP.
                    self._deliver(view[start : start + n])
                elif kind == _LEFT_RECORD:
                    self._open_slow(view[start : start + n], n)
                else:
                    self._to_owner(slot, n, start)
            if self._coalescer is not None:
                self._coalescer.flush()
            if self._transit_done is not None:
                self._transit_done()
            frames += self._rx_frames - before
        return frames

    # -- transit runs (0069) -------------------------------------------------------

    def _forward_routed(self, ring: _NativeRecvRing) -> None:
        """The runs of the last burst's routed frames: each entry asked once, then the egress takes the
        run (``_take_routed``) and whatever it did not take goes to the TAP."""
        native = ring.native
        keys = self._route_keys
        run = self._transit_run
        assert run is not None
        view = ring.view
        for route, count in native.take_routes():
            self._routed_route = route
            self._routed_left = None
            taken = run(keys[route], count, self._take_routed)
            self._transit_frames += taken
            left = self._routed_left
            if left is None:  # no entry, expired, or no egress: the whole run to the bridge
                left = native.routed_frames(route)
            for start, n in left:
                self._to_tap(view[start : start + n])

    def _take_routed(self, out: Any) -> int:
        """The egress of the current run: natively where it can, else frame by frame."""
        ring = self._native_rx
        assert ring is not None
        route = self._routed_route
        accept = getattr(out, "accept_routed", None)
        done = accept(ring.native, route) if accept is not None else None
        if done is not None:
            taken, self._routed_left = done
            return int(taken)
        view = ring.view
        taken = 0
        left = []
        for start, n in ring.native.routed_frames(route):
            if out.accept_plain(view[start : start + n]):
                taken += 1
            else:
                left.append((start, n))
        self._routed_left = left
        return taken

    def accept_routed(self, rx: Any, route: int) -> tuple[int, list[tuple[int, int]]] | None:
        """Another tunnel's run of transit frames (its native ring's ``route``), sealed and sent from
        this tunnel's native ring: (how many, the (start, length) of those over this path, not taken);
        None if this data path cannot take them natively (not running, no native ring)."""
        tx = self._native_tx
        secret = self._tx_secret
        if not self._running or tx is None or secret is None or not hasattr(tx, "seal_routed"):
            return None
        taken = done = 0
        left: list[tuple[int, int]] = []
        while True:
            sent, nbytes, counter, failed, gso_refused, done, at_limit, over = tx.seal_routed(
                rx, route, done, self._sock_fd, self._tx_native_aead, secret.epoch & 0xFF, self._tx_counter,
                self._tx_limit,
            )
            self._tx_counter = counter
            self._tx_frames += sent
            self._tx_bytes += nbytes
            taken += sent + failed
            left += over
            if failed:
                self._drops[DropReason.SEND_FAILED] += failed
            if gso_refused:
                logger.info("UDP GSO refused; sending one datagram per message")
            if not at_limit:
                break
            self.rekey()
            secret = self._tx_secret
            assert secret is not None
        self._plain_sealed += taken
        return taken, left


def pick_implementation(choice: str) -> str:
    """``tunnel.datapath`` to what runs: "native" or "python" ("auto": native where installed)."""
    if choice == "auto":
        return "native" if available() else "python"
    if choice == "native" and not available():
        raise ImportError("tunnel.datapath is native but evio_native is not installed (scripts/bootstrap builds it with cargo)")
    return choice

