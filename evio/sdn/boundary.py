"""The thread boundary between the daemon (asyncio) and the SDN controller (os-ken's thread).

The daemon runs asyncio in the main thread and os-ken, with its native
(thread) hub, beside it (docs/design.md, "A node"). Everything that crosses is a
small frozen dataclass defined here; there is no string-named bus.

One thing crosses that is not a message: an overlay's transit fast-path
table (`AttachOverlay.transit`, evio.sdn.transit), written by the controller
and read per frame by the data path. It is shared, not messaged, because an
entry must be gone *before* the flow delete leaves for the switch; an event
through the loop would arrive after it.

Into the controller (`ControllerCommand`, any thread -> os-ken thread):
`CommandQueue.put`, drained by the app before every OpenFlow event and on its
tick. `put` also wakes the app's ticker, so a command takes effect within
milliseconds, not at the next tick.

- `AttachOverlay`: an overlay's bridge, known by the datapath id it was
  created with (`evio.bridge.datapath_id_for`). One controller serves every
  overlay of the node, one bridge each. A switch that connects before its
  overlay is attached waits until it is.
- `DetachOverlay`: forget an overlay (its bridge is being deleted).
- `SetOnDemand`: an attached overlay's new on-demand settings (a config
  reload); the switch, its flows and its learning stay.
- `SetPolicy`: an attached overlay's new L2 policy (a config reload): its
  table-0 flows change; the tunnels, switching flows and learning stay.
- `PeerPortUp` / `PeerPortDown`: which TAP leads to which peer. The tunnel
  side announces a TAP before adding it to the bridge, so its port comes up as
  a peer port rather than flapping from leaf to peer.

Out of the controller (`ControllerEvent`, os-ken thread -> asyncio): an
`EventSink.emit`; `AsyncioEventSink` hands each event to the loop with
`call_soon_threadsafe` and the daemon awaits `get()`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import queue
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from evio.config.model import BridgeConfig, OnDemandConfig, PolicyRule
from evio.ids import format_node_id
from evio.sdn.broadcast_log import BroadcastReceived
from evio.sdn.l2policy import RuleCount
from evio.sdn.neighbor_answers import IPAddress
from evio.sdn.switch import DEFAULT_TUNNEL_MTU
from evio.sdn.transit import TransitSink

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- commands: asyncio -> os-ken


@dataclass(frozen=True, slots=True)
class AttachOverlay:
    overlay: str
    datapath_id: int
    node_id: int
    flow_idle_timeout: int = BridgeConfig.flow_idle_timeout
    mac_max_age: float = 300.0
    on_demand: OnDemandConfig = field(default_factory=OnDemandConfig)
    tunnel_mtu: int = DEFAULT_TUNNEL_MTU  # the tunnel TAPs' MTU: frames the controller sends are cut to fit
    transit: TransitSink | None = None  # the data path's fast-path table to mirror tunnel-to-tunnel flows into
    policy: tuple[PolicyRule, ...] = ()  # the overlay's L2 policy (evio.sdn.l2policy)
    ipv6_routers: tuple[int, ...] = ()  # members whose router advertisements pass the RA guard (decision 0068)
    ipv6_router_addresses: tuple[tuple[int, ipaddress.IPv6Address], ...] = ()  # their addresses named in the config


@dataclass(frozen=True, slots=True)
class DetachOverlay:
    overlay: str


@dataclass(frozen=True, slots=True)
class SetOnDemand:
    overlay: str
    on_demand: OnDemandConfig


@dataclass(frozen=True, slots=True)
class SetPolicy:
    overlay: str
    rules: tuple[PolicyRule, ...]


@dataclass(frozen=True, slots=True)
class PeerPortUp:
    overlay: str
    port_name: str
    peer: int


@dataclass(frozen=True, slots=True)
class PeerPortDown:
    overlay: str
    port_name: str


@dataclass(frozen=True, slots=True)
class SetMembers:
    """The overlay's members as signaling knows them: a flood rooted at any other node is an invented root's."""

    overlay: str
    members: frozenset[int]


@dataclass(frozen=True, slots=True)
class SetMacOwners:
    """MACs exactly one member announced, signed (evio.node.host_claims): each placed only under that member."""

    overlay: str
    owners: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class SetCertifiedAddresses:
    """Members' own overlay addresses their CA certificates name, each with the MAC holding it (decision 0062):
    a local host's ARP or neighbour solicitation for one is answered at once."""

    overlay: str
    addresses: Mapping[IPAddress, str]


@dataclass(frozen=True, slots=True)
class SetOwnAddresses:
    """This node's own overlay addresses its CA certificate names (not among `SetCertifiedAddresses`': the bridge
    answers for itself): a duplicate address detection probe for one from a tunnel port is dropped (decision 0076)."""

    overlay: str
    addresses: frozenset[IPAddress]


@dataclass(frozen=True, slots=True)
class SetRouterKeys:
    """Trust mode: this node's certificate key (a named router's node signs statements vouching for its RAs) and
    the named routers' certificate keys the host claims found the CA's (their statements are checked): decision 0081."""

    overlay: str
    signing_key: Any  # cryptography's EllipticCurvePrivateKey (not imported here: the boundary stays light)
    keys: Mapping[int, Any]  # router node id -> EllipticCurvePublicKey


ControllerCommand = (
    AttachOverlay | DetachOverlay | SetOnDemand | SetPolicy | PeerPortUp | PeerPortDown | SetMembers | SetMacOwners
    | SetCertifiedAddresses | SetOwnAddresses | SetRouterKeys
)


class CommandQueue:
    """Commands for the controller; `put` from any thread, `drain` in the os-ken thread."""

    def __init__(self) -> None:
        self._commands: queue.SimpleQueue[ControllerCommand] = queue.SimpleQueue()
        self._wake = threading.Event()

    def put(self, command: ControllerCommand) -> None:
        self._commands.put(command)
        self._wake.set()

    def attach(self, overlay: str, datapath_id: int, node_id: int, **settings: Any) -> None:
        self.put(AttachOverlay(overlay, datapath_id, node_id, **settings))

    def detach(self, overlay: str) -> None:
        self.put(DetachOverlay(overlay))

    def set_on_demand(self, overlay: str, on_demand: OnDemandConfig) -> None:
        self.put(SetOnDemand(overlay, on_demand))

    def set_policy(self, overlay: str, rules: tuple[PolicyRule, ...]) -> None:
        self.put(SetPolicy(overlay, rules))

    def peer_up(self, overlay: str, port_name: str, peer: int) -> None:
        self.put(PeerPortUp(overlay, port_name, peer))

    def peer_down(self, overlay: str, port_name: str) -> None:
        self.put(PeerPortDown(overlay, port_name))

    def set_members(self, overlay: str, members: frozenset[int]) -> None:
        self.put(SetMembers(overlay, members))

    def set_mac_owners(self, overlay: str, owners: Mapping[str, int]) -> None:
        self.put(SetMacOwners(overlay, owners))

    def set_certified_addresses(self, overlay: str, addresses: Mapping[IPAddress, str]) -> None:
        self.put(SetCertifiedAddresses(overlay, addresses))

    def set_own_addresses(self, overlay: str, addresses: frozenset[IPAddress]) -> None:
        self.put(SetOwnAddresses(overlay, addresses))

    def set_router_keys(self, overlay: str, signing_key: Any, keys: Mapping[int, Any]) -> None:
        self.put(SetRouterKeys(overlay, signing_key, keys))

    def drain(self) -> list[ControllerCommand]:
        out: list[ControllerCommand] = []
        while True:
            try:
                out.append(self._commands.get_nowait())
            except queue.Empty:
                return out

    def wake(self) -> None:
        """Wake a waiter without a command (the app is stopping, or wants its short tick back)."""
        self._wake.set()

    def wait(self, timeout: float) -> bool:
        """Block until a command is put or `timeout` passes; True if woken by a command."""
        woken = self._wake.wait(timeout)
        self._wake.clear()
        return woken


# ---------------------------------------------------------------------- events: os-ken -> asyncio


@dataclass(frozen=True, slots=True)
class SwitchConnected:
    overlay: str
    datapath_id: int


@dataclass(frozen=True, slots=True)
class SwitchDisconnected:
    overlay: str
    datapath_id: int


@dataclass(frozen=True, slots=True)
class PortAdded:
    overlay: str
    port_no: int
    name: str
    kind: str  # "leaf" or "peer" (evio.sdn.switch.PortKind values)
    peer: int | None


@dataclass(frozen=True, slots=True)
class PortRemoved:
    overlay: str
    port_no: int
    name: str


@dataclass(frozen=True, slots=True)
class OnDemandWanted:
    """Traffic with `peer`'s leaves is above the threshold and `peer` is not adjacent: link to it."""

    overlay: str
    peer: int
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class OnDemandIdle:
    """The on-demand link asked for `peer` carried less than the threshold for the idle timeout."""

    overlay: str
    peer: int


@dataclass(frozen=True, slots=True)
class DropCounts:
    """Totals so far, sent when they changed: `drops` by `evio.sdn.switch.Drop` name,
    `frb_errors` by `evio.sdn.frb.FrbReason` name, `segment_errors` (why an oversized frame
    was dropped) by `evio.sdn.segmentation.SegmentReason` name, `by_port` what a port's own bounds dropped
    (packet-ins over its rate, link-local multicast over its rate) by port name and `Drop` name."""

    overlay: str
    drops: Mapping[str, int]
    frb_errors: Mapping[str, int]
    segment_errors: Mapping[str, int] = field(default_factory=dict)
    by_port: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # port name -> its bounds' drops


@dataclass(frozen=True, slots=True)
class BroadcastCounts:
    """FRB broadcasts received so far (`evio.sdn.broadcast_log`), sent when they changed: totals,
    a count per root node, and the latest ones received, oldest first."""

    overlay: str
    received: int
    own_returned: int
    by_root: Mapping[int, int]
    recent: tuple[BroadcastReceived, ...]
    by_ethertype: Mapping[int, int] = field(default_factory=dict)  # of the inner frames (broadcast_log.OTHER_ETHERTYPE)


@dataclass(frozen=True, slots=True)
class TrafficCounts:
    """The switch's packet-ins, FRB copies sent (as root) and forwarded, frames it segmented and partial
    checksums it finished so far (`evio.sdn.switch.SwitchCounters`), sent when they changed."""

    overlay: str
    packet_ins: int
    broadcasts_originated: int
    frb_sent: int
    frb_forwarded: int
    segmented: int = 0
    checksums_completed: int = 0
    neighbors_answered: int = 0
    copied_ahead: int = 0  # of packet_ins: copies of frames a flow ahead by destination passed on (decision 0072)
    unicast_packet_ins: int = 0  # of packet_ins: frames for a unicast destination, FRBs aside
    # of packet_ins, by what came (`switch.PacketInKind`): which frames keep the controller busy (issue 23)
    by_kind: Mapping[str, int] = field(default_factory=dict)
    # routers' RA statements (decision 0081): signed here, taken, RAs vouched for, refused by reason
    router_adverts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PolicyCounts:
    """What each L2 policy rule matched (for a drop rule: dropped), in the rules' order; sent when it changed."""

    overlay: str
    rules: tuple[RuleCount, ...]


@dataclass(frozen=True, slots=True)
class HostedMacs:
    """What this node hosts (its bridge's and leaf ports' MACs, hosts learned on leaf ports), sent when it
    changed: the node announces it, signed, to the overlay (evio.node.host_claims)."""

    overlay: str
    macs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostAnnouncementFlooded:
    """A host announcement (its Ethernet frame) a flood brought from `peer`, rooted at `root`: the daemon checks it by
    the port it came in by (evio.node.host_claims; the bridge's own interface cannot say)."""

    overlay: str
    frame: bytes
    peer: int
    root: int


@dataclass(frozen=True, slots=True)
class DocumentUnicastIn:
    """A unicast frame of the signed documents' flood (0x88B5) for the bridge's interface, which table 0 brought to
    the controller instead (evio.sdn.switch.document_flows): `peer` the adjacent member whose tunnel it came by (None:
    a leaf port), `sender` the member the switch counts it as sent by, or None. The daemon's flood charges its check by
    these (evio.node.document_flood, decision 0043 amended): the interface would tell only its source MAC."""

    overlay: str
    frame: bytes
    peer: int | None
    sender: int | None


ControllerEvent = (
    HostedMacs
    | HostAnnouncementFlooded
    | DocumentUnicastIn
    | SwitchConnected
    | SwitchDisconnected
    | PortAdded
    | PortRemoved
    | OnDemandWanted
    | OnDemandIdle
    | DropCounts
    | BroadcastCounts
    | TrafficCounts
    | PolicyCounts
)


class EventSink(Protocol):
    def emit(self, event: ControllerEvent) -> None:
        """Called in the os-ken thread; must not block."""
        ...


class AsyncioEventSink:
    """Delivers controller events into an asyncio loop; the daemon awaits `get()` in that loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self.lost = 0  # events emitted after the loop closed

    def emit(self, event: ControllerEvent) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: the daemon is going away
            self.lost += 1

    async def get(self) -> ControllerEvent:
        return await self._queue.get()


class CollectingSink:
    """Keeps every event in a list (thread-safe); for tests and the standalone controller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[ControllerEvent] = []

    def emit(self, event: ControllerEvent) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[ControllerEvent]:
        with self._lock:
            return list(self._events)


def event_as_dict(event: ControllerEvent) -> dict[str, Any]:
    """A JSON-ready form: {"event": class name, fields...}; node ids as 32 hex digits."""
    fields = asdict(event)
    if isinstance(event, HostAnnouncementFlooded):
        fields["frame"], fields["root"] = event.frame.hex(), format_node_id(event.root)
    if isinstance(event, DocumentUnicastIn):
        fields["frame"] = event.frame.hex()
    for key in ("peer", "sender"):
        if isinstance(fields.get(key), int):
            fields[key] = format_node_id(fields[key])
    if "datapath_id" in fields:
        fields["datapath_id"] = f"{fields['datapath_id']:016x}"
    for key in ("drops", "frb_errors", "segment_errors"):
        if key in fields:
            fields[key] = dict(fields[key])
    if "by_port" in fields:
        fields["by_port"] = {port: dict(counts) for port, counts in fields["by_port"].items()}
    if isinstance(event, BroadcastCounts):
        fields["by_root"] = {format_node_id(root): n for root, n in sorted(event.by_root.items())}
        fields["recent"] = [
            {**asdict(seen), "root": format_node_id(seen.root), "peer": format_node_id(seen.peer)}
            for seen in event.recent
        ]
        fields["by_ethertype"] = {("other" if kind < 0 else f"0x{kind:04x}"): n
                                  for kind, n in sorted(event.by_ethertype.items())}
    return {"event": type(event).__name__, **fields}


@dataclass
class ControllerChannel:
    """Both directions of the boundary, as the daemon hands them to the controller."""

    events: EventSink
    commands: CommandQueue = field(default_factory=CommandQueue)
