"""The two copies of one broadcast at a node: what tells a real broadcast from a copy only a member sent.

A root floods each broadcast both ways round the ring: a BROADCAST copy clockwise and a BROADCAST_REVERSE copy
(its 14-byte Ethernet header) counter-clockwise (flooding_bounds.py), and each comes to every other node once,
by a peer on its own arc from the root (frb_receive._plausible). The two arcs from a root to a node share no
node, so a member next to us, which lies on one of them, can send copies of one direction only: a broadcast the
root never sent comes here without its twin, the other direction's copy of the same header.

Hop counts are written by whoever passes a copy on, and nothing in the wire format (fixed for the previous
release) lets a relay check them, so a shorter way by a member cannot be told from a chord that came up. What can
be told is whether the root really sent the broadcast: a copy under a certified MAC's owner's root that would move
the MAC to a shorter way waits here for its twin (`TWIN_WINDOW`); alone, or with a second copy of its own
direction by another port, it moves nothing (review21i I4 residual; decision 0033, amended). Pure: `now` in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evio.sdn import frb

# How long the two copies of one broadcast may come apart here: far above an overlay path's latency (both usually
# come within milliseconds), far below how often a member's interface broadcasts the same header again.
TWIN_WINDOW = 2.0
# Broadcasts remembered: per certified MAC, its headers within the window (a member's interface sends a few kinds:
# ARP, neighbour discovery, host claims), and MACs in all (the learning table's size). When a MAC's share is full,
# those past the window go; still full, a copy is not remembered, and a shorter copy then waits for a twin that is
# not seen: forged copies of one MAC's broadcasts under varied headers can keep only that MAC on its way, not move it.
MAX_HEADERS_PER_MAC = 8
MAX_MACS = 8192


@dataclass(slots=True)
class Broadcast:
    """One broadcast's copies here so far: by which port each direction's first came, which came twice."""

    at: float
    ports: dict[frb.FrbType, int] = field(default_factory=dict)
    duplicated: set[frb.FrbType] = field(default_factory=set)
    # A copy shorter than the MAC's path, held until its twin came: (its direction, port, hop count).
    pending: tuple[frb.FrbType, int, int] | None = None


class BroadcastTwins:
    """The recent broadcasts of certified MACs, by MAC and header: bounded, each kept `TWIN_WINDOW`."""

    def __init__(self, window: float = TWIN_WINDOW, max_macs: int = MAX_MACS,
                 max_headers: int = MAX_HEADERS_PER_MAC) -> None:
        self.window = window
        self.max_macs = max_macs
        self.max_headers = max_headers
        self._broadcasts: dict[str, dict[bytes, Broadcast]] = {}
        self.not_remembered = 0  # copies a full share left out

    def __len__(self) -> int:
        return sum(len(headers) for headers in self._broadcasts.values())

    def copy(self, mac: str, header: bytes, kind: frb.FrbType, port: int, now: float) -> Broadcast:
        """Note a copy of `mac`'s broadcast with Ethernet header `header`; its broadcast's record."""
        headers = self._broadcasts.get(mac)
        seen = headers.get(header) if headers is not None else None
        if seen is not None and now - seen.at < self.window and seen.ports.get(kind, port) == port:
            seen.ports[kind] = port
            return seen  # the common case: a copy of a broadcast seen, by the port its direction came by
        if seen is None or now - seen.at >= self.window:
            seen = Broadcast(now)
            if headers is None and self._room_for_mac(now):
                headers = self._broadcasts[mac] = {}
            if headers is not None and (header in headers or self._room_for_header(headers, now)):
                headers[header] = seen
            else:
                self.not_remembered += 1
        first = seen.ports.setdefault(kind, port)
        if first != port:
            seen.duplicated.add(kind)  # a second copy of one direction by another port: one of them is no relay's
            if seen.pending is not None and seen.pending[0] is kind:
                seen.pending = None
        return seen

    @staticmethod
    def twinned(seen: Broadcast, kind: frb.FrbType) -> bool:
        """Whether the root sent this broadcast, as far as copies tell: the other direction's copy came, and this
        direction's came by one port only."""
        return _other(kind) in seen.ports and kind not in seen.duplicated

    @staticmethod
    def hold(seen: Broadcast, kind: frb.FrbType, port: int, hops: int) -> None:
        """A shorter copy waits for its twin (the shortest of its direction, if several)."""
        if seen.pending is None or hops < seen.pending[2]:
            seen.pending = (kind, port, hops)

    @staticmethod
    def twin_of_pending(seen: Broadcast, kind: frb.FrbType) -> tuple[int, int] | None:
        """The (port, hops) of the held shorter copy this copy (its twin) now confirms, once: None if none."""
        pending = seen.pending
        if pending is None or pending[0] is kind or pending[0] in seen.duplicated:
            return None
        seen.pending = None
        return pending[1], pending[2]

    def _room_for_header(self, headers: dict[bytes, Broadcast], now: float) -> bool:
        if len(headers) < self.max_headers:
            return True
        for header in [header for header, seen in headers.items() if now - seen.at >= self.window]:
            del headers[header]
        return len(headers) < self.max_headers

    def _room_for_mac(self, now: float) -> bool:
        if len(self._broadcasts) < self.max_macs:
            return True
        for mac in [mac for mac, headers in self._broadcasts.items()
                    if all(now - seen.at >= self.window for seen in headers.values())]:
            del self._broadcasts[mac]
        return len(self._broadcasts) < self.max_macs


def _other(kind: frb.FrbType) -> frb.FrbType:
    return frb.FrbType.BROADCAST_REVERSE if kind is frb.FrbType.BROADCAST else frb.FrbType.BROADCAST
