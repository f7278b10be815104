"""The transit fast path as the controller keeps it: a mirror of its tunnel-to-tunnel flows.

The fast path has one home per layer:

- here (`evio.sdn.transit`), the switch side: which flows have entries, and when they go or are refreshed;
  `OverlaySwitch` holds one `TransitMirror` per bridge and `ofapp._send` writes in `write_batches`;
- `evio.tunnel.datapath.transit_table`, the data-path side: the `TransitTable` the entries go into,
  looked up per frame by the data paths' hook (`FdDatapath.set_transit`, the native ring's prefilter);
- `evio.node.transit_wiring`, the wiring: one table per overlay, given to its tunnels and to this mirror, and
  its status document.

The daemon's data path can send a frame from one tunnel straight into
another, past both TAPs and Open vSwitch (evio.tunnel.datapath.transit_table,
docs/design.md "Transit fast path"). It may do so only for a frame the
bridge would forward the same way, so the controller - the one place that
installs and deletes evio's flows - keeps the daemon's table in step with
them, through a `TransitSink`:

- an `AddFlow` whose in and out ports are both peer (tunnel) ports is
  mirrored *after* its FlowMod is sent (the same instant the switch learns
  of it, give or take one message in flight);
- every delete (`DeleteFlowsOfPort`, `DeleteFlowsToMac`, `DeleteFlowsFromMac`,
  `DeleteFlow`), a switch that
  connects (its flows are cleared) or goes, and the overlay's detach remove
  the matching entries *before* the FlowMods are sent, so no entry outlives
  its flow;
- idle timeouts: frames on the fast path do not touch the flow, so the
  switch would expire it while it is in use. Each entry gets a deadline of
  `idle_timeout - margin` after its flow was (re)installed, past which the
  data path stops using it; while an entry is used (its hit count moves),
  `refresh` re-installs the flow every `idle_timeout / 3` seconds - an
  OpenFlow ADD of an existing flow replaces it and restarts its idle timer -
  and the mirrored add moves the deadline on (but not past the flow's hard
  timeout, which an add would restart: a busy flow is still installed again
  now and then, switch.py). An entry nobody uses runs out
  before its flow does; the flow then expires in the switch as it always did,
  and its FlowRemoved drops the entry.

Without a sink (an overlay whose table is off for good: none is made on an stp bridge) the mirror
keeps nothing and sends nothing.

Pure: `now` comes in, actions go out; the sink is the only thing it touches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from evio.sdn.flow_actions import (
    AddFlow,
    DeleteFlow,
    DeleteFlowsFromMac,
    DeleteFlowsOfPort,
    DeleteFlowsToMac,
    FlowAction,
    FlowMatch,
)
from evio.sdn.switch import PortKind, SwitchPort


class RouteView(Protocol):
    @property
    def hits(self) -> int: ...


class TransitSink(Protocol):
    """What the controller needs of the daemon's fast-path table (evio.tunnel.datapath.transit_table.TransitTable)."""

    def add(self, ingress: str, eth_dst: bytes, eth_src: bytes, egress: str, deadline: float) -> bool: ...

    def remove(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> bool: ...

    def remove_dst(self, eth_dst: bytes) -> int: ...

    def clear(self) -> int: ...

    def get(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> RouteView | None: ...


@dataclass(slots=True)
class _Mirrored:
    ingress: str
    egress: str
    out_port: int
    idle_timeout: int
    installed: float  # when its flow was last (re)installed
    hits_seen: int  # the entry's hit count at that time
    hard_timeout: int = 0  # the flow's, as the switch installed it
    first: float = 0.0  # when its flow was first installed (refreshes keep it)


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def write_batches(actions: Sequence[FlowAction]) -> Iterator[list[FlowAction]]:
    """`actions` in the order they go to the switch, cut where one write must be done before the next.

    An added flow's entry is made after its write (`TransitMirror.after`), a delete's entries are
    removed before its write (`TransitMirror.before`): a port or MAC delete that follows an add in the
    same list waits for the add's write, so the add's entry exists for the delete to remove."""
    batch: list[FlowAction] = []
    added = False
    for action in actions:
        if added and isinstance(action, (DeleteFlowsOfPort, DeleteFlowsToMac)):
            yield batch
            batch, added = [], False
        batch.append(action)
        added = added or isinstance(action, AddFlow)
    if batch:
        yield batch


class _NoSink:
    """The sink of a mirror with no table: it takes no entry."""

    def add(self, ingress: str, eth_dst: bytes, eth_src: bytes, egress: str, deadline: float) -> bool:
        return False

    def remove(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> bool:
        return False

    def remove_dst(self, eth_dst: bytes) -> int:
        return 0

    def clear(self) -> int:
        return 0

    def get(self, ingress: str, eth_dst: bytes, eth_src: bytes) -> RouteView | None:
        return None


class TransitMirror:
    """The fast-path entries of one bridge, keyed like its flows (none without a sink)."""

    def __init__(self, sink: TransitSink | None) -> None:
        self.sink: TransitSink = sink if sink is not None else _NoSink()
        self._mirrored: dict[FlowMatch, _Mirrored] = {}
        self.refreshes = 0  # flows re-installed because the fast path used them

    def __len__(self) -> int:
        return len(self._mirrored)

    @staticmethod
    def deadline(installed: float, idle_timeout: int) -> float:
        """When an entry whose flow was installed at `installed` stops being used."""
        if idle_timeout <= 0:
            return math.inf  # the flow never idles out
        return installed + idle_timeout - idle_timeout / 4

    def before(self, action: FlowAction) -> None:
        """Called before `action` goes to the switch: entries its deletes will remove go first."""
        if isinstance(action, DeleteFlowsOfPort):
            for match in [m for m, e in self._mirrored.items() if m.in_port == action.port or e.out_port == action.port]:
                self._drop(match)
        elif isinstance(action, DeleteFlowsToMac):
            for match in [m for m in self._mirrored if m.eth_dst == action.mac]:
                self._drop(match)
            self.sink.remove_dst(_mac(action.mac))  # and anything the sink has that we lost track of
        elif isinstance(action, DeleteFlowsFromMac):
            for match in [m for m in self._mirrored if m.eth_src == action.mac]:
                self._drop(match)
        elif isinstance(action, DeleteFlow):
            self._drop(action.match)

    def after(self, action: FlowAction, ports: Mapping[int, SwitchPort], now: float) -> None:
        """Called after `action` went to the switch: a tunnel-to-tunnel flow gets its entry."""
        if not isinstance(action, AddFlow):
            return
        match = action.match
        ingress, egress = ports.get(match.in_port), ports.get(action.out_port)
        if (ingress is None or egress is None or ingress.kind is not PortKind.PEER
                or egress.kind is not PortKind.PEER or ingress.port_no == egress.port_no):
            self._drop(match)  # the same match now leads elsewhere (a leaf): no entry
            return
        dst, src = _mac(match.eth_dst), _mac(match.eth_src)
        if not self.sink.add(ingress.name, dst, src, egress.name, self.deadline(now, action.idle_timeout)):
            self._mirrored.pop(match, None)
            return
        route = self.sink.get(ingress.name, dst, src)
        prev = self._mirrored.get(match)
        self._mirrored[match] = _Mirrored(ingress.name, egress.name, action.out_port, action.idle_timeout, now,
                                          route.hits if route is not None else 0, action.hard_timeout,
                                          prev.first if prev is not None else now)

    def flow_removed(self, match: FlowMatch) -> None:
        self._drop(match)

    def clear(self) -> None:
        """The switch's flows are gone (it connected afresh, went away, or the overlay is detached)."""
        self._mirrored.clear()
        self.sink.clear()

    def refresh(self, now: float) -> list[FlowAction]:
        """The flows the fast path used since they were last installed, once a third of their idle
        timeout has passed: re-installed, so the switch does not expire them under the traffic."""
        actions: list[FlowAction] = []
        for match, entry in self._mirrored.items():
            if entry.idle_timeout <= 0 or now - entry.installed < entry.idle_timeout / 3:
                continue
            if entry.hard_timeout and now - entry.first >= entry.hard_timeout:
                # Its hard timeout is due: not renewed (an add would restart it), so the flow idles out
                # under the fast path and the next frame installs it again, as the switch would have.
                continue
            route = self.sink.get(entry.ingress, _mac(match.eth_dst), _mac(match.eth_src))
            if route is None or route.hits == entry.hits_seen:
                continue
            self.refreshes += 1
            actions.append(AddFlow(match, entry.out_port, entry.idle_timeout, hard_timeout=entry.hard_timeout))
        return actions

    def matches(self) -> Iterator[FlowMatch]:
        return iter(list(self._mirrored))

    def _drop(self, match: FlowMatch) -> None:
        entry = self._mirrored.pop(match, None)
        if entry is not None:
            self.sink.remove(entry.ingress, _mac(match.eth_dst), _mac(match.eth_src))
