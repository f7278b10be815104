"""A fake OpenFlow table and a fake network of Bounded Flood switches, without OVS.

`FakeFlowTable` holds the flows evio installs (as `evio.sdn.flow_actions`)
plus the two the os-ken adapter installs at connect time (table-miss and FRB
to the controller), answers where a frame entering a port goes, and counts
each flow's packets and bytes as the switch's flow stats would.

`FakeNetwork` joins several `BoundedFloodSwitch`es with "tunnels" (pairs of
peer ports) and runs frames through tables and controllers until the network
is quiet, recording what every leaf port received. Unit tests use it to
assert where a packet goes, as faucet does with its fake OpenFlow table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from evio.sdn.flow_actions import (
    FRB_TO_CONTROLLER_PRIORITY,
    AddFlow,
    DeleteFlowsOfPort,
    DeleteFlowsToMac,
    FlowAction,
    FlowMatch,
    PacketOut,
)
from evio.sdn.frb import ETH_TYPE_FRB
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

CONTROLLER = -1  # output "port" meaning a packet-in


class FakeNetworkError(Exception):
    """The fake network was driven into a state a real one would not reach (e.g. a forwarding loop)."""


@dataclass
class FakeFlow:
    match: FlowMatch
    out_port: int
    idle_timeout: int
    priority: int
    last_used: float
    packets: int = 0
    bytes: int = 0


class FakeFlowTable:
    """One switch's table: evio's unicast flows over a fixed table-miss and FRB rule."""

    def __init__(self) -> None:
        self.flows: dict[FlowMatch, FakeFlow] = {}

    def apply(self, action: FlowAction, now: float) -> None:
        """Carry out a flow change; PacketOut is the network's business and ignored here."""
        if isinstance(action, AddFlow):
            self.flows[action.match] = FakeFlow(action.match, action.out_port, action.idle_timeout,
                                                action.priority, now)
        elif isinstance(action, DeleteFlowsOfPort):
            for m in [m for m, f in self.flows.items() if m.in_port == action.port or f.out_port == action.port]:
                del self.flows[m]
        elif isinstance(action, DeleteFlowsToMac):
            for m in [m for m in self.flows if m.eth_dst == action.mac]:
                del self.flows[m]

    def lookup(self, in_port: int, frame: bytes, now: float) -> int:
        """Output port for `frame` entering `in_port`, or CONTROLLER."""
        if len(frame) >= 14 and int.from_bytes(frame[12:14], "big") == ETH_TYPE_FRB:
            return CONTROLLER  # the adapter's FRB rule outranks every unicast flow
        if len(frame) < 14:
            return CONTROLLER
        match = FlowMatch(in_port, frame[6:12].hex(":"), frame[0:6].hex(":"))
        flow = self.flows.get(match)
        if flow is None or flow.priority >= FRB_TO_CONTROLLER_PRIORITY:
            return CONTROLLER
        flow.last_used = now
        flow.packets += 1
        flow.bytes += len(frame)
        return flow.out_port

    def expire(self, now: float) -> list[FlowMatch]:
        """Remove flows idle for their timeout, as the switch would; return their matches."""
        gone = [m for m, f in self.flows.items() if f.idle_timeout and now - f.last_used >= f.idle_timeout]
        for m in gone:
            del self.flows[m]
        return gone

    def byte_counts(self) -> dict[FlowMatch, int]:
        """What a flow stats reply would carry: each flow's byte counter (the on-demand policy's feed)."""
        return {m: f.bytes for m, f in self.flows.items()}

    def flows_of_port(self, port: int) -> list[FakeFlow]:
        return [f for f in self.flows.values() if f.match.in_port == port or f.out_port == port]


@dataclass
class FakeNode:
    node_id: int
    switch: BoundedFloodSwitch
    table: FakeFlowTable = field(default_factory=FakeFlowTable)
    received: dict[int, list[bytes]] = field(default_factory=dict)  # leaf port -> frames delivered
    packet_ins: int = 0
    next_port: int = 1

    def allocate_port(self) -> int:
        port = self.next_port
        self.next_port += 1
        return port


class FakeNetwork:
    """Switches joined by tunnels; `inject` a frame at a leaf port and everything runs to quiet."""

    max_events = 1_000_000  # a forwarding loop trips this instead of hanging the test

    def __init__(self, flow_idle_timeout: int = 30) -> None:
        self.nodes: dict[int, FakeNode] = {}
        self.tunnels: dict[tuple[int, int], tuple[int, int]] = {}  # (node, port) -> (peer node, peer port)
        self.flow_idle_timeout = flow_idle_timeout
        self.now = 0.0
        self.frames_on_tunnels = 0

    def add_node(self, node_id: int, local_mac: str | None = None) -> FakeNode:
        """A switch with its internal (leaf) port as port 1, whose MAC is `local_mac`."""
        mac = local_mac if local_mac is not None else _mac_for(node_id, 0xFE)
        switch = BoundedFloodSwitch(node_id, _mac_for(node_id, 0x02), self.flow_idle_timeout)
        node = FakeNode(node_id, switch)
        self.nodes[node_id] = node
        self.add_leaf(node_id, name="internal", hw_addr=mac)
        return node

    def add_leaf(self, node_id: int, name: str, hw_addr: str | None = None) -> int:
        node = self.nodes[node_id]
        port = node.allocate_port()
        node.received[port] = []
        self._execute(node, node.switch.port_added(SwitchPort(port, name, PortKind.LEAF, None, hw_addr), self.now))
        return port

    def connect(self, a: int, b: int) -> tuple[int, int]:
        """A tunnel between nodes a and b; returns (port on a, port on b)."""
        na, nb = self.nodes[a], self.nodes[b]
        pa, pb = na.allocate_port(), nb.allocate_port()
        self.tunnels[(a, pa)] = (b, pb)
        self.tunnels[(b, pb)] = (a, pa)
        port_a = SwitchPort(pa, f"t{b:x}"[:15], PortKind.PEER, b)
        port_b = SwitchPort(pb, f"t{a:x}"[:15], PortKind.PEER, a)
        in_flight = self._execute(na, na.switch.port_added(port_a, self.now))
        in_flight += self._execute(nb, nb.switch.port_added(port_b, self.now))
        self._run(deque(in_flight))  # the leaf announcements each side sends on a new tunnel
        return pa, pb

    def disconnect(self, a: int, b: int) -> None:
        pa = self.port_towards(a, b)
        pb = self.tunnels[(a, pa)][1]
        del self.tunnels[(a, pa)], self.tunnels[(b, pb)]
        for node_id, port in ((a, pa), (b, pb)):
            node = self.nodes[node_id]
            self._execute(node, node.switch.port_removed(port, self.now))

    def port_towards(self, a: int, b: int) -> int:
        for (node_id, port), (peer, _) in self.tunnels.items():
            if node_id == a and peer == b:
                return port
        raise FakeNetworkError(f"no tunnel between {a:x} and {b:x}")

    def inject(self, node_id: int, port: int, frame: bytes) -> None:
        """A host on leaf `port` of `node_id` sends `frame`; run until nothing is in flight."""
        self._run(deque([(node_id, port, frame)]))

    def advance(self, seconds: float) -> None:
        """Move time on: idle flows time out and the switches hear of it."""
        self.now += seconds
        for node in self.nodes.values():
            for match in node.table.expire(self.now):
                self._execute(node, node.switch.flow_removed(match))
            self._execute(node, node.switch.expire(self.now))

    # ------------------------------------------------------------------ internals

    def _run(self, queue: deque[tuple[int, int, bytes]]) -> None:
        events = 0
        while queue:
            events += 1
            if events > self.max_events:
                raise FakeNetworkError("forwarding loop: too many frames in flight")
            node_id, in_port, frame = queue.popleft()
            node = self.nodes[node_id]
            out = node.table.lookup(in_port, frame, self.now)
            if out == CONTROLLER:
                node.packet_ins += 1
                queue.extend(self._execute(node, node.switch.packet_in(in_port, frame, self.now)))
            else:
                queue.extend(self._output(node, out, frame))

    def _execute(self, node: FakeNode, actions: Iterable[FlowAction]) -> list[tuple[int, int, bytes]]:
        """Apply actions to `node`'s table; return frames now travelling to other nodes."""
        in_flight: list[tuple[int, int, bytes]] = []
        for action in actions:
            if isinstance(action, PacketOut):
                in_flight += self._output(node, action.port, action.data)
            else:
                node.table.apply(action, self.now)
        return in_flight

    def _output(self, node: FakeNode, port: int, frame: bytes) -> list[tuple[int, int, bytes]]:
        if port in node.received:
            node.received[port].append(frame)
            return []
        far = self.tunnels.get((node.node_id, port))
        if far is None:
            return []  # a port that went away: the frame is lost, as on a real switch
        self.frames_on_tunnels += 1
        return [(far[0], far[1], frame)]


def _mac_for(node_id: int, first_octet: int) -> str:
    """A locally administered unicast MAC derived from a node id (first octet's low bits set by caller)."""
    tail = (node_id & 0xFFFF_FFFF_FF).to_bytes(5, "big")
    return bytes([first_octet]).hex() + ":" + tail.hex(":")
