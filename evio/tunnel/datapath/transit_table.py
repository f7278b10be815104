"""The transit fast path's table: frames that only pass through this node go tunnel to tunnel.

A frame decrypted on tunnel A whose destination is behind tunnel B of the
same overlay would otherwise be written to A's TAP, read by Open vSwitch,
written to B's TAP and read back by the daemon (docs/performance.md). When
the SDN controller has a unicast flow ``(in_port A, eth_src, eth_dst) ->
output B`` with both ports tunnels, it mirrors the flow into this table, and
A's data path hands such frames straight to B's data path to be sealed.

One home per layer: here the data-path side (this table; the hooks that use it are
`FdDatapath.set_transit`, step 7 of `receive.py`, and the native ring's prefilter; `Tunnel` attaches
its data path);
`evio.sdn.transit` the switch side (`TransitMirror`, which keeps this table in step with the flows);
`evio.node.transit_wiring` the wiring (one table per overlay, given to its tunnels and its switch).

The bridge stays the source of truth (docs/design.md, "Transit fast path"):

- an entry is keyed exactly as the flow is matched, on the ingress TAP and
  the frame's first 12 bytes (destination and source MAC); entries for a
  group destination are refused, and frames of an excluded ethertype (the
  FRB, which the bridge sends to the controller whatever the unicast flows
  say) never take it;
- the controller removes entries *before* it sends the flow deletes that
  match them, and every entry carries a deadline ahead of the flow's idle
  timeout, so an entry never outlives its flow; while it is used, the
  controller re-installs the flow (resetting its idle timer) and moves the
  deadline on;
- the table is bounded (``max_entries``); a frame that finds no entry, an
  expired one, or an egress that cannot take it goes to the TAP as before.

Switched off (``enabled`` false, tunnel.transit), the table takes no entry
and drops those it had: every frame goes through the bridge again, and the
hook left in the data paths costs a call and an empty-dict test per frame.
A reload switches it for the tunnels that are up as well.

A data path that opens frames outside Python (the native one) cannot call the
hook per frame cheaply; it asks ``destinations`` once per burst for the
destination MACs this ingress has entries for (only when they changed) and
hands back only frames to those, which the hook then looks up in full. Where
its build has routes (decision 0069), it asks ``destinations.keys`` for the
entries' whole keys instead, notes each frame by its entry, and asks the hook
once per entry and burst (``forward.run``): the table's checks and counters as
per frame, and an egress that seals natively takes the run where it lies.

Threads: the controller's thread adds and removes entries (under a lock,
one writer at a time), the event loop's thread looks them up per frame
without a lock. Every structure the reader uses is a dict whose single
``get`` / ``[]=`` / ``pop`` is atomic under the GIL, and an entry's
``deadline`` is one float assignment; ``hits`` is written by the reader
only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# Far above the flows one node carries for others (one per (source, destination) pair crossing
# it); a peer inventing MACs makes the controller install at most this many fast-path entries.
MAX_ENTRIES = 4096
_MAC_PAIR = 12  # destination and source MAC: the start of every Ethernet frame
_ETHERTYPE_AT = 12


class TransitEgress(Protocol):
    """A data path that seals frames handed to it already plain (FdDatapath implements it)."""

    def accept_plain(self, frame: memoryview) -> bool:
        """Seal ``frame`` into the send ring (sent by ``flush_plain`` or when the ring fills);
        False if it cannot be taken (not running, larger than this tunnel carries)."""
        ...

    def flush_plain(self) -> None:
        """Send whatever ``accept_plain`` queued."""
        ...


TransitHook = Callable[[memoryview], bool]
"""Given a decrypted frame of the ingress tunnel: True if it went on by the fast path."""

TransitDestinations = Callable[[int], tuple[int, bytes] | None]
"""Given the version a data path last saw: None if unchanged, else (version, the destination MACs
of the ingress's entries, 6 bytes each, concatenated). A prefilter only: the hook decides."""

TransitTake = Callable[[TransitEgress], int]
"""Given the egress of a run of frames: how many of them it took (the ingress sends the rest to its TAP)."""


@runtime_checkable
class TransitPort(TransitEgress, Protocol):
    """A data path that takes part in the fast path both ways (a data path without it simply does not)."""

    def set_transit(self, hook: TransitHook | None, done: Callable[[], None] | None = None,
                    destinations: TransitDestinations | None = None) -> None: ...  # fmt: skip


@dataclass(slots=True)
class TransitRoute:
    """One entry: where frames of one (ingress, destination, source) go, and until when."""

    egress: str  # the egress TAP's name
    deadline: float  # monotonic seconds; after it the frame takes the TAP (the flow may be about to expire)
    hits: int = 0  # frames that found this entry, in time or not (written by the data path only)


@dataclass(frozen=True, slots=True)
class TransitCounters:
    entries: int
    forwarded: int  # frames sent on by the fast path
    expired: int  # found an entry past its deadline: to the TAP
    no_egress: int  # found an entry whose egress is gone or refused the frame: to the TAP
    refused_full: int  # entries not added because the table was full
    refused_group: int  # entries not added: group destination


class TransitTable:
    """The fast path's entries for one overlay: (ingress TAP, dst+src MAC) -> egress TAP."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        excluded_ethertypes: Collection[int] = (),
        clock: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._excluded = frozenset(excluded_ethertypes)
        self._clock = clock
        self._lock = threading.Lock()  # writers only
        self._routes: dict[str, dict[bytes, TransitRoute]] = {}  # ingress TAP -> key -> route
        self._egress: dict[str, TransitEgress] = {}  # attached data paths by TAP name
        self._pending: dict[str, TransitEgress] = {}  # egresses holding sealed frames not yet sent
        self._count = 0
        self.version = 0  # moves (under the lock) whenever an entry is added or removed
        self.enabled = enabled
        self.forwarded = self.expired = self.no_egress = 0
        self.refused_full = self.refused_group = 0

    # -- the data path's side (event loop thread) -------------------------------------------

    def attach(self, tap: str, egress: TransitEgress) -> TransitHook:
        """A tunnel's data path started: it may now receive transit frames, and sends its own
        decrypted frames through the returned hook first."""
        with self._lock:
            self._egress[tap] = egress
            routes = self._routes.setdefault(tap, {})
        return _Forward(self, routes)

    def destinations(self, tap: str) -> TransitDestinations:
        """The prefilter of ingress ``tap`` (``TransitDestinations``); called by its data path per burst.
        Its ``keys`` gives the entries' whole keys instead (``_Destinations``)."""
        return _Destinations(self, tap)

    def flush(self) -> None:
        """End of an ingress burst: send what the egresses queued."""
        pending = self._pending
        while pending:
            _, out = pending.popitem()
            out.flush_plain()

    def detach(self, tap: str, egress: TransitEgress) -> None:
        """A tunnel's data path stops: nothing goes to it or comes from it by the fast path
        (unless ``tap`` is attached to another data path by now: a newer tunnel to the same peer)."""
        with self._lock:
            if self._egress.get(tap) is not egress:
                return
            self._egress.pop(tap, None)
            self._pending.pop(tap, None)
            self._drop_where(lambda ingress, route: ingress == tap or route.egress == tap)
            self._routes.pop(tap, None)

    # -- the controller's side (its thread) --------------------------------------------------

    def set_enabled(self, enabled: bool) -> None:
        """Switch the fast path on or off; off drops every entry (the flows stay: the bridge forwards)."""
        with self._lock:
            self.enabled = enabled
        if not enabled:
            self.clear()

    def add(self, ingress: str, eth_dst: bytes, eth_src: bytes, egress: str, deadline: float) -> bool:
        """Mirror a flow; False if refused (counted), switched off, or the ingress tunnel has no data path here."""
        if len(eth_dst) != 6 or len(eth_src) != 6:
            raise ValueError("MAC addresses are 6 bytes")
        if eth_dst[0] & 0x01:
            self.refused_group += 1
            return False
        key = eth_dst + eth_src
        with self._lock:
            if not self.enabled:  # under the lock: set_enabled(False) may be clearing the table
                return False
            routes = self._routes.get(ingress)
            if routes is None or ingress == egress:
                return False
            route = routes.get(key)
            if route is not None:
                route.egress, route.deadline = egress, deadline
                return True
            if self._count >= self.max_entries:
                self.refused_full += 1
                return False
            routes[key] = TransitRoute(egress, deadline)
            self._count += 1
            self.version += 1
            return True

    def remove(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> bool:
        with self._lock:
            routes = self._routes.get(ingress)
            if routes is None or routes.pop(eth_dst + eth_src, None) is None:
                return False
            self._count -= 1
            self.version += 1
            return True

    def remove_port(self, tap: str) -> int:
        """Every entry in by or out through ``tap``; returns how many."""
        with self._lock:
            return self._drop_where(lambda ingress, route: ingress == tap or route.egress == tap)

    def remove_dst(self, eth_dst: bytes) -> int:
        """Every entry towards ``eth_dst``; returns how many."""
        with self._lock:
            removed = 0
            for routes in self._routes.values():
                for key in [k for k in routes if k[:6] == eth_dst]:
                    del routes[key]
                    removed += 1
            self._count -= removed
            self.version += 1
            return removed

    def clear(self) -> int:
        with self._lock:
            return self._drop_where(lambda ingress, route: True)

    def get(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> TransitRoute | None:
        routes = self._routes.get(ingress)
        return routes.get(eth_dst + eth_src) if routes is not None else None

    def entries(self) -> Iterator[tuple[str, bytes, bytes, TransitRoute]]:
        """(ingress, eth_dst, eth_src, route) of every entry, from a snapshot."""
        with self._lock:
            snapshot = [(ingress, key, route) for ingress, routes in self._routes.items() for key, route in routes.items()]
        for ingress, key, route in snapshot:
            yield ingress, key[:6], key[6:], route

    def counters(self) -> TransitCounters:
        return TransitCounters(self._count, self.forwarded, self.expired, self.no_egress, self.refused_full,
                               self.refused_group)

    def __len__(self) -> int:
        return self._count

    def _drop_where(self, doomed: Callable[[str, TransitRoute], bool]) -> int:
        # The lock is held. Keys are popped one by one: the reader may be iterating nothing, but
        # it looks keys up concurrently, and a dict never changes under a single get.
        removed = 0
        for ingress, routes in self._routes.items():
            for key in [k for k, route in routes.items() if doomed(ingress, route)]:
                del routes[key]
                removed += 1
        self._count -= removed
        self.version += 1
        return removed


class _Forward:
    """An ingress's hook (``TransitHook``): one frame at a time, or a run of frames of one entry (``run``)."""

    __slots__ = ("_clock", "_egresses", "_excluded", "_pending", "_routes", "_table")

    def __init__(self, table: TransitTable, routes: dict[bytes, TransitRoute]) -> None:
        self._table = table
        self._routes = routes
        self._excluded = table._excluded
        self._clock = table._clock
        self._egresses = table._egress
        self._pending = table._pending

    def __call__(self, frame: memoryview) -> bool:
        routes = self._routes
        if not routes:
            return False
        route = routes.get(frame[:_MAC_PAIR].tobytes())
        if route is None:
            return False
        excluded = self._excluded
        if excluded and (frame[_ETHERTYPE_AT] << 8 | frame[_ETHERTYPE_AT + 1]) in excluded:
            return False
        table = self._table
        route.hits += 1
        if self._clock() >= route.deadline:
            table.expired += 1
            return False
        out = self._egresses.get(route.egress)
        if out is None or not out.accept_plain(frame):
            table.no_egress += 1
            return False
        self._pending[route.egress] = out
        table.forwarded += 1
        return True

    def run(self, key: bytes, count: int, take: TransitTake) -> int:
        """``count`` frames of one burst with the entry ``key`` (their ethertypes checked by the data
        path): the checks and counters of ``count`` calls, ``take`` called once with the egress;
        returns how many went on (0 without calling ``take``: no entry, expired, no egress)."""
        route = self._routes.get(key)
        if route is None:
            return 0
        table = self._table
        route.hits += count
        if self._clock() >= route.deadline:
            table.expired += count
            return 0
        out = self._egresses.get(route.egress)
        taken = take(out) if out is not None else 0
        if taken < count:
            table.no_egress += count - taken
        if taken:
            self._pending[route.egress] = out  # type: ignore[assignment]
            table.forwarded += taken
        return taken


class _Destinations:
    """An ingress's prefilter (``TransitDestinations``), and its entries' keys (``keys``)."""

    __slots__ = ("_table", "_tap")

    def __init__(self, table: TransitTable, tap: str) -> None:
        self._table = table
        self._tap = tap

    def __call__(self, seen: int) -> tuple[int, bytes] | None:
        table = self._table
        if table.version == seen:
            return None
        with table._lock:
            routes = table._routes.get(self._tap, {})
            return table.version, b"".join({key[:6] for key in routes})

    @property
    def excluded(self) -> frozenset[int]:
        """Ethertypes never sent on by the fast path (the data path checks them per frame)."""
        return self._table._excluded

    def keys(self, seen: int) -> tuple[int, list[bytes]] | None:
        """As calling it, but every key (destination and source MAC, 12 bytes) of the ingress's
        entries, in an order the caller numbers them by."""
        table = self._table
        if table.version == seen:
            return None
        with table._lock:
            return table.version, list(table._routes.get(self._tap, {}))
