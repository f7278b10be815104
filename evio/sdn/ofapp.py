"""The os-ken (OpenFlow 1.3) adapter: thin by design, one controller for every overlay of the node.

os-ken's configuration and app manager are process-wide, so one app serves
all of the node's bridges (one per overlay). It keeps one `OverlaySwitch` per
overlay, found by the datapath id the bridge was created with; handlers turn
OpenFlow events into calls on it, and one method (`_send`) turns the neutral
actions it returns into OFP messages (evio.sdn.openflow_messages).

Threads. The daemon runs asyncio in the main thread and os-ken, with its
native (thread) hub, in others: one receive and one send thread per switch
connection, and this app's event thread. Everything that touches the switch
logic holds the app's lock, so the logic itself needs none. The only
crossings with the daemon are `evio.sdn.boundary`: commands in (drained
before every port and connection event and on every tick; putting one wakes
the ticker), and typed events out through an `EventSink`.

The first packet of a new flow is on the critical path of every connection,
so a packet-in is handled where it is read: in the switch's receive thread,
not queued for the event thread, and its messages are written to the socket
there, in one `sendall`, not queued for the send thread (the socket's writes
go through one lock, os-ken's included; TCP_NODELAY is set). Each hand-off
between threads is a wake-up and a GIL hand-over, up to the interpreter's 5 ms
switch interval while another thread runs Python. Only when events of that
switch are still queued (a port change, say) does a packet-in wait its turn
behind them, so the switch's events keep their order.

Only our own ovs-vswitchd may connect (`ControllerConfig.peer_check`, see
vswitchd_peer_check.py): datapath ids are predictable, and without the check any
local process could connect with a bridge's id and take the bridge over.
A refused connection is closed before it is registered; the bridge that is
connected stays.

Periodic work on the tick: expiring learned MACs, polling evio's flows' byte
counters for the on-demand policy every `stats_interval`, and reporting drop
counters when they changed. The tick is short (`tick_interval`) only while
something needs it: flows of ours whose counters to poll, on-demand links
wished for, fast-path flows to refresh; otherwise it is `idle_tick_interval`,
and a packet-in (a broadcast, say) brings one short tick for its reports.
A poll that would find no flow of ours is not sent (the switch can only
have the flows we added: `OverlaySwitch.may_have_flows`).

`start_controller_thread(config, listener=...)` runs it beside an asyncio loop
(the daemon's layout), serving a Unix socket the daemon made before its
bridges (evio.sdn.handed_listener, evio.sdn.controller_socket: no local process can
stand in for the controller); `python -m evio.lab.sdn_controller` runs a
standalone controller, laid out the same way but on loopback TCP, for tests
and the lab.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evio.ratelimit import LogLimiter
from evio.sdn import flow_actions, openflow_wire
from evio.sdn.boundary import (
    AttachOverlay,
    ControllerChannel,
    DetachOverlay,
    PeerPortDown,
    PeerPortUp,
    SetCertifiedAddresses,
    SetMacOwners,
    SetMembers,
    SetOnDemand,
    SetOwnAddresses,
    SetPolicy,
    SetRouterKeys,
)
from evio.sdn.openflow_messages import (
    base_flows,
    copied_ahead,
    flow_byte_counts,
    flow_stats_request,
    policy_packet_counts,
    policy_stats_request,
    removed_destination_match,
    removed_flow_match,
    to_ofp_messages,
)
from evio.sdn.osken_imports import trim_os_ken
from evio.sdn.overlay_switch import OverlaySwitch, Step
from evio.sdn.transit import write_batches

trim_os_ken()  # before os-ken is first imported: OpenFlow 1.3 only (about 11 MB less)

from os_ken import cfg  # noqa: E402
from os_ken.base import app_manager  # noqa: E402
from os_ken.controller import event as osken_event  # noqa: E402
from os_ken.controller import ofp_event, ofp_handler  # noqa: E402
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # noqa: E402
from os_ken.ofproto import ofproto_v1_3  # noqa: E402

from evio.sdn.handed_listener import HandedListener  # noqa: E402
from evio.sdn.osken_flow_stats import read_flow_stats_by_hand  # noqa: E402
from evio.sdn.osken_guard import guard_os_ken_parsers  # noqa: E402

guard_os_ken_parsers()  # lists whose elements say length 0 would loop forever (evio.sdn.osken_guard)
read_flow_stats_by_hand()  # the byte counters' poll, twice a second (evio.sdn.osken_flow_stats)

log = logging.getLogger(__name__)


@dataclass
class ControllerConfig:
    channel: ControllerChannel
    tick_interval: float = 0.5
    # The tick while nothing needs the short one (no flow of ours to poll, no on-demand link wished
    # for, no fast-path flow): an idle node's controller then wakes three threads and its switch every
    # few seconds, not twice a second. MACs age in minutes, drop reports come every 10 s; a packet-in
    # wakes the ticker for one short tick (its reports), and a flow it adds keeps the short tick.
    idle_tick_interval: float = 5.0
    # How often flow byte counters are polled for on-demand links: the first poll after a flow starts
    # sees its rate, so this bounds how long a busy pair waits before its link is asked for. Every
    # tick; the rate is still judged over a second (on_demand.RATE_WINDOW), so bursts count as before.
    stats_interval: float = 0.5
    drop_report_interval: float = 10.0
    # How often the L2 policy's flows' packet counters are read (only while the overlay has rules): the
    # status shows drops by rule this late at most. One small request per bridge.
    policy_stats_interval: float = 2.0
    clock: Callable[[], float] = time.monotonic
    peer_check: Callable[[Any], str | None] | None = None
    """Given a connecting switch's socket: None to accept it, or why it is refused. None: accept all."""


REFUSAL_LOG_INTERVAL = 10.0  # seconds between warnings about refused switch connections


# ---------------------------------------------------------------------- the app


_Handler = Callable[["BoundedFloodApp", Any], None]


def _contained(handler: _Handler) -> _Handler:
    """Log and count a handler's exception instead of letting it reach os-ken.

    With the native hub os-ken's `TaskExit` is plain `Exception`, so its event
    loop re-raises whatever a handler raises and the app's event thread dies:
    one bad frame would take the controller down.
    """

    @functools.wraps(handler)
    def wrapper(self: BoundedFloodApp, ev: Any) -> None:
        with self._lock:
            try:
                handler(self, ev)
            except Exception:
                self.handler_errors += 1
                log.exception("handler %s failed on %s", handler.__name__, type(ev).__name__)
            finally:
                self._handled(ev)

    return wrapper


class EventTick(osken_event.EventBase):
    """Work run in the app's event thread: commands always, periodic work when `periodic`."""

    def __init__(self, periodic: bool) -> None:
        super().__init__()
        self.periodic = periodic


class _SerializedSocket:
    """A switch connection's socket whose writes go through one lock: os-ken's send thread and ours.

    Concurrent `sendall`s on one stream could interleave their bytes once the
    send buffer fills; everything else is the socket's own.
    """

    def __init__(self, sock: Any) -> None:
        self.raw = sock
        self._write_lock = threading.Lock()

    def sendall(self, data: bytes, *args: Any) -> None:
        with self._write_lock:
            self.raw.sendall(data, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _next_xid(dp: Any) -> int:
    """The datapath's next transaction id, as os-ken's `Datapath.set_xid` counts them (for a message packed here)."""
    dp.xid = (dp.xid + 1) & dp.ofproto.MAX_XID
    return int(dp.xid)


def _event_datapath(ev: Any) -> Any:
    """The connection an os-ken event came from (None for our own ticks)."""
    msg = getattr(ev, "msg", None)
    if msg is not None:
        return getattr(msg, "datapath", None)
    return getattr(ev, "datapath", None)


class BoundedFloodApp(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, evio_controller: ControllerConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if evio_controller is None:
            raise RuntimeError("BoundedFloodApp needs evio_controller=ControllerConfig(...)")
        self.config = evio_controller
        self.commands = evio_controller.channel.commands
        self.sink = evio_controller.channel.events  # (OSKenApp.events is os-ken's own queue)
        self.overlays: dict[str, OverlaySwitch] = {}
        self.by_datapath_id: dict[int, OverlaySwitch] = {}
        self.datapaths: dict[int, Any] = {}  # connected switches, claimed by an overlay or not
        self._stats_parts: dict[int, dict[flow_actions.FlowMatch, int]] = {}
        self._policy_polls: dict[int, tuple[int, dict[int, int]]] = {}  # dpid -> (xid of the poll, counts so far)
        self._next_policy_poll = 0.0
        self._next_stats = 0.0
        self._next_drop_report = 0.0
        self._stopping = threading.Event()
        self.handler_errors = 0
        self.refused_switches = 0
        self._refusal_log = LogLimiter[None](REFUSAL_LOG_INTERVAL)  # one line for every refused switch
        # Held by every handler, in whichever thread it runs (see the module docstring).
        self._lock = threading.RLock()
        self._fast_ticks = True  # the pace the ticker chose last; a packet-in while slow wakes it
        self._last_packet_in = float("-inf")
        self._queued: dict[Any, int] = {}  # connection -> its events queued for the event thread, not yet handled
        self.packet_ins_inline = 0  # handled in the receive thread (the rest waited behind that switch's events)

    def start(self) -> Any:
        thread = super().start()
        threading.Thread(target=self._ticker, name="evio-of-tick", daemon=True).start()
        return thread

    def stop(self) -> None:
        self._stopping.set()
        self.commands.wake()
        super().stop()

    def _send_event(self, ev: Any, state: Any) -> None:
        """os-ken hands this app an event (in the thread that made it: a switch's receive thread for its messages)."""
        dp = _event_datapath(ev)
        if dp is not None:
            with self._lock:
                if isinstance(ev, ofp_event.EventOFPPacketIn) and state == MAIN_DISPATCHER and not self._queued.get(dp):
                    self.packet_ins_inline += 1
                    self.packet_in(ev)
                    return
                self._queued[dp] = self._queued.get(dp, 0) + 1
                ev.evio_queued = True  # see _contained: the handler marks it done
        super()._send_event(ev, state)

    def _handled(self, ev: Any) -> None:
        """A queued event's handler ran (os-ken only queues events whose handler's state matches)."""
        if getattr(ev, "evio_queued", False):
            ev.evio_queued = False
            dp = _event_datapath(ev)
            left = self._queued.get(dp, 0) - 1
            if left > 0:
                self._queued[dp] = left
            else:
                self._queued.pop(dp, None)

    def _ticker(self) -> None:
        next_tick = time.monotonic() + self.tick_pace()
        while not self._stopping.is_set():
            self.commands.wait(max(0.0, next_tick - time.monotonic()))
            if self._stopping.is_set():
                return
            now = time.monotonic()
            periodic = now >= next_tick
            if periodic:
                next_tick = now + self.tick_pace()
            else:  # a command, or a packet-in that needs the short tick again
                next_tick = min(next_tick, now + self.tick_pace())
            self.send_event(self.name, EventTick(periodic))

    def tick_pace(self) -> float:
        """Seconds to the next periodic tick: short while anything needs it (see the module docstring)."""
        with self._lock:
            # A packet-in's reports go out on the tick after it (E1 reads them), not a slow tick later.
            recent = self.config.clock() - self._last_packet_in < self.config.tick_interval
            self._fast_ticks = recent or any(o.needs_fast_ticks for o in self.overlays.values())
        return self.config.tick_interval if self._fast_ticks else self.config.idle_tick_interval

    # ---------------------------------------------------------------- sending

    def _send(self, overlay: OverlaySwitch, actions: Sequence[flow_actions.FlowAction]) -> None:
        """The one place OFP messages for the logic's actions leave for a switch: one write for them all."""
        dp = self.datapaths.get(overlay.datapath_id) if overlay.connected else None
        if dp is None or not actions:
            return
        # The transit fast path's entries (evio.sdn.transit): those a delete removes go before it leaves,
        # an added flow's after it, each batch in one write.
        now = self.config.clock()
        for batch in write_batches(actions):
            for action in batch:
                overlay.before_send(action, now)
            self._write_actions(dp, batch)
            for action in batch:
                overlay.after_send(action, now)

    def _write_actions(self, dp: Any, actions: Sequence[flow_actions.FlowAction]) -> None:
        """A packet-in's answer (PacketOut, AddFlow, DeleteFlow) packed by evio.sdn.openflow_wire, not built and
        serialized by os-ken's classes: about 0.15 ms less per packet-in (docs/performance.md)."""
        sock = getattr(dp, "socket", None)
        if not isinstance(sock, _SerializedSocket):
            self._write(dp, [msg for action in actions for msg in to_ofp_messages(dp, action)])
            return
        chunks: list[bytes] = []
        for action in actions:
            if isinstance(action, openflow_wire.ENCODED):
                chunks.append(openflow_wire.encode(action, _next_xid(dp)))
                continue
            for msg in to_ofp_messages(dp, action):
                dp.set_xid(msg)
                msg.serialize()
                chunks.append(bytes(msg.buf))
        self._sendall(dp, sock, b"".join(chunks))

    def _write(self, dp: Any, messages: Sequence[Any]) -> None:
        """Every OFP message of ours goes this way, so none overtakes another."""
        sock = getattr(dp, "socket", None)
        if not isinstance(sock, _SerializedSocket):
            for msg in messages:
                dp.send_msg(msg)  # os-ken's send thread writes them
            return
        for msg in messages:
            dp.set_xid(msg)
            msg.serialize()
        self._sendall(dp, sock, b"".join(msg.buf for msg in messages))

    @staticmethod
    def _sendall(dp: Any, sock: _SerializedSocket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except OSError as err:  # the receive thread sees the connection end and os-ken tears it down
            log.debug("write to switch failed dpid=%016x: %s", dp.id or 0, err)

    def _run(self, overlay: OverlaySwitch, step: Step) -> None:
        self._send(overlay, step.actions)
        for event in step.events:
            self.sink.emit(event)

    # ---------------------------------------------------------------- commands from the daemon

    def _apply_commands(self) -> None:
        for command in self.commands.drain():
            now = self.config.clock()
            if isinstance(command, AttachOverlay):
                self._attach(command)
            elif isinstance(command, DetachOverlay):
                self._detach(command.overlay)
            else:
                overlay = self.overlays.get(command.overlay)
                if overlay is None:
                    log.warning("command for an overlay not attached overlay=%s command=%s",
                                command.overlay, type(command).__name__)
                elif isinstance(command, SetOnDemand):
                    overlay.set_on_demand(command.on_demand)
                elif isinstance(command, SetPolicy):
                    self._send(overlay, overlay.set_policy(command.rules))
                elif isinstance(command, PeerPortUp):
                    self._run(overlay, overlay.peer_up(command.port_name, command.peer, now))
                elif isinstance(command, PeerPortDown):
                    self._run(overlay, overlay.peer_down(command.port_name, now))
                elif isinstance(command, SetMembers):
                    overlay.switch.members = command.members
                elif isinstance(command, SetMacOwners):
                    self._send(overlay, overlay.switch.set_mac_owners(command.owners, now))
                elif isinstance(command, SetCertifiedAddresses):
                    overlay.switch.neighbors.certified = dict(command.addresses)
                elif isinstance(command, SetOwnAddresses):
                    overlay.switch.own_certified = command.addresses  # its guard flows at the next tick
                elif isinstance(command, SetRouterKeys):
                    overlay.switch.use_router_keys(command.overlay, command.signing_key, command.keys, time.time)

    def _attach(self, settings: AttachOverlay) -> None:
        known = self.overlays.get(settings.overlay)
        if known is not None and known.settings == settings:
            return
        if known is not None:
            self._detach(settings.overlay)
        other = self.by_datapath_id.get(settings.datapath_id)
        if other is not None:
            log.error("datapath id already attached dpid=%016x overlay=%s wanted_by=%s",
                      settings.datapath_id, other.overlay, settings.overlay)
            return
        overlay = OverlaySwitch(settings)
        self.overlays[settings.overlay] = overlay
        self.by_datapath_id[settings.datapath_id] = overlay
        log.info("overlay attached overlay=%s dpid=%016x", settings.overlay, settings.datapath_id)
        dp = self.datapaths.get(settings.datapath_id)
        if dp is not None:
            self._take_over(overlay, dp)

    def _detach(self, name: str) -> None:
        overlay = self.overlays.pop(name, None)
        if overlay is not None:
            overlay.clear_transit()
            self.by_datapath_id.pop(overlay.datapath_id, None)
            log.info("overlay detached overlay=%s dpid=%016x", name, overlay.datapath_id)

    def _take_over(self, overlay: OverlaySwitch, dp: Any) -> None:
        """A connected switch meets its overlay: base flows, then ask for its ports."""
        overlay.clear_transit()  # before the base flows clear the switch's
        self._write(dp, [*base_flows(dp), dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0)])
        self._run(overlay, overlay.switch_connected())

    def _refusal(self, dp: Any) -> str | None:
        check = self.config.peer_check
        if check is None:
            return None
        try:
            return check(dp.socket)
        except Exception as exc:  # noqa: BLE001 - an unverifiable peer is refused, not let in
            return f"peer check failed: {exc!r}"

    def _refuse(self, dp: Any, reason: str) -> None:
        """Close a connection that may not control a bridge; whatever is connected stays."""
        self.refused_switches += 1
        now = self.config.clock()
        if self._refusal_log.should_log(None, now):
            log.warning("switch connection refused dpid=%016x address=%s reason=%s (refused so far: %d)",
                        dp.id or 0, getattr(dp, "address", None), reason, self.refused_switches)
        with contextlib.suppress(OSError):
            dp.socket.shutdown(socket.SHUT_RDWR)  # os-ken's receive loop ends; the datapath goes DEAD

    def _overlay_of(self, dp: Any) -> OverlaySwitch | None:
        overlay = self.by_datapath_id.get(dp.id)
        return overlay if overlay is not None and self.datapaths.get(dp.id) is dp else None

    # ---------------------------------------------------------------- handlers

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    @_contained
    def switch_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        self._apply_commands()
        refusal = self._refusal(dp)
        if refusal is not None:
            self._refuse(dp, refusal)
            return
        self.datapaths[dp.id] = dp
        sock = getattr(dp, "socket", None)
        if sock is not None and not isinstance(sock, _SerializedSocket):
            with contextlib.suppress(OSError):  # a Unix socket has no Nagle to turn off
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            dp.socket = _SerializedSocket(sock)  # from now on our handlers write directly, os-ken's thread too
        overlay = self.by_datapath_id.get(dp.id)
        if overlay is None:
            log.warning("switch connected for no attached overlay dpid=%016x (waiting for one)", dp.id)
            return
        self._take_over(overlay, dp)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    @_contained
    def switch_gone(self, ev: Any) -> None:
        dpid: int | None = ev.datapath.id
        if dpid is None or self.datapaths.get(dpid) is not ev.datapath:
            return  # died before its features reply, or a newer connection replaced it
        del self.datapaths[dpid]
        self._stats_parts.pop(dpid, None)
        self._policy_polls.pop(dpid, None)
        overlay = self.by_datapath_id.get(dpid)
        if overlay is not None and overlay.connected:
            self._run(overlay, Step(events=overlay.switch_disconnected(self.config.clock())))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    @_contained
    def port_desc_reply(self, ev: Any) -> None:
        self._apply_commands()
        overlay = self._overlay_of(ev.msg.datapath)
        if overlay is None:
            return
        now = self.config.clock()
        step = Step()
        for p in ev.msg.body:
            step += overlay.port_up(p.port_no, _text(p.name), p.hw_addr, now)
        self._run(overlay, step)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    @_contained
    def port_status(self, ev: Any) -> None:
        self._apply_commands()
        msg = ev.msg
        overlay = self._overlay_of(msg.datapath)
        if overlay is None:
            return
        p = msg.desc
        now = self.config.clock()
        if msg.reason == msg.datapath.ofproto.OFPPR_DELETE:
            self._run(overlay, overlay.port_deleted(p.port_no, _text(p.name), now))
        else:
            self._run(overlay, overlay.port_up(p.port_no, _text(p.name), p.hw_addr, now))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    @_contained
    def packet_in(self, ev: Any) -> None:
        msg = ev.msg
        overlay = self._overlay_of(msg.datapath)
        if overlay is not None and "in_port" in msg.match:  # every packet-in of OVS has it (the fuzz sent one without)
            now = self.config.clock()
            self._last_packet_in = now
            self._run(overlay, Step(overlay.packet_in(msg.match["in_port"], bytes(msg.data), now, copied_ahead(msg)),
                                    overlay.flooded_announcements() + overlay.document_unicasts()))
            if not self._fast_ticks:  # its reports, and the counters of a flow it adds, are due soon
                self._fast_ticks = True
                self.commands.wake()  # after the answer: the woken ticker would only wait for our lock

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    @_contained
    def flow_removed(self, ev: Any) -> None:
        msg = ev.msg
        overlay = self._overlay_of(msg.datapath)
        match = removed_flow_match(msg) or removed_destination_match(msg)
        if overlay is None or match is None:
            return
        self._send(overlay, overlay.flow_removed(match))

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    @_contained
    def flow_stats_reply(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        overlay = self._overlay_of(dp)
        if overlay is None:
            return
        policy_poll = self._policy_polls.get(dp.id)
        if policy_poll is not None and policy_poll[0] == msg.xid:
            for rule, packets in policy_packet_counts(msg.body).items():
                policy_poll[1][rule] = policy_poll[1].get(rule, 0) + packets
            if not msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                del self._policy_polls[dp.id]
                overlay.policy_stats(policy_poll[1])
                self._run(overlay, Step(events=overlay.policy_report()))
            return
        parts = self._stats_parts.setdefault(dp.id, {})
        parts.update(flow_byte_counts(msg.body))
        if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            return  # more parts of this reply follow
        del self._stats_parts[dp.id]
        self._run(overlay, Step(events=overlay.flow_stats(parts, self.config.clock())))

    @set_ev_cls(EventTick)
    @_contained
    def tick(self, ev: EventTick) -> None:
        self._apply_commands()
        if not ev.periodic:
            return
        now = self.config.clock()
        # Half a tick early counts: ticks drift by a few ms, and a poll due on every tick must not skip one.
        poll = now >= self._next_stats - self.config.tick_interval / 2
        if poll:
            self._next_stats = now + self.config.stats_interval
        report = now >= self._next_drop_report
        if report:
            self._next_drop_report = now + self.config.drop_report_interval
        policy_poll = now >= self._next_policy_poll - self.config.tick_interval / 2
        if policy_poll:
            self._next_policy_poll = now + self.config.policy_stats_interval
        for overlay in list(self.overlays.values()):
            self._send(overlay, overlay.expire(now))
            self._send(overlay, overlay.transit_refresh(now))
            dp = self.datapaths.get(overlay.datapath_id)
            if poll and overlay.connected and dp is not None and overlay.settings.on_demand.enabled:
                self._stats_parts.pop(dp.id, None)  # an unanswered earlier poll is superseded
                if overlay.needs_counter_poll:
                    overlay.stats_requested()
                    self._write(dp, [flow_stats_request(dp)])
                else:  # no flow of ours on the switch: what the poll would say, without asking
                    self._run(overlay, Step(events=overlay.flow_stats({}, now)))
            if report:
                self._run(overlay, Step(events=overlay.drop_report()))
            if policy_poll and dp is not None and overlay.needs_policy_poll:
                request = policy_stats_request(dp)
                self._write(dp, [request])  # numbers the request: its reply is told apart by that xid
                self._policy_polls[dp.id] = (request.xid, {})
            # Every tick, not every drop report: E1 reads them right after a broadcast.
            self._run(overlay, Step(events=overlay.broadcast_report()))
            self._run(overlay, Step(events=overlay.traffic_report()))
            self._run(overlay, Step(events=overlay.hosted_report()))


def _text(name: bytes | str) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else name


# ---------------------------------------------------------------------- running it


def run_controller(
    config: ControllerConfig,
    listen_host: str = "127.0.0.1",
    listen_port: int = 6653,
    listener: HandedListener | None = None,
) -> None:
    """Run os-ken with the Bounded Flood app until the process ends (blocks; once per process).

    With `listener` os-ken serves that socket (the daemon's Unix socket, evio.sdn.controller_socket)
    and binds nothing itself; without, it listens on `listen_host`:`listen_port` (the lab's tool).
    """
    if listener is not None:
        # os-ken 4.2 cannot be handed a listener: its OpenFlow server binds its own, by name in
        # ofp_handler. Swap in one serving ours; this runs once per process, before the apps start.
        ofp_handler.OpenFlowController = listener.openflow_server
        cfg.CONF(args=[], project="os_ken")
    else:
        cfg.CONF(args=["--ofp-listen-host", listen_host, "--ofp-tcp-listen-port", str(listen_port)],
                 project="os_ken")
    manager = app_manager.AppManager.get_instance()
    manager.load_apps(["evio.sdn.ofapp"])  # by name: under `python -m` this module is __main__
    contexts = manager.create_contexts()
    services = manager.instantiate_apps(evio_controller=config, **contexts)
    try:
        app_manager.hub.joinall(services)
    finally:
        manager.close()


def start_controller_thread(
    config: ControllerConfig,
    listen_host: str = "127.0.0.1",
    listen_port: int = 6653,
    on_exit: Callable[[BaseException | None], None] | None = None,
    listener: HandedListener | None = None,
) -> threading.Thread:
    """Run the controller beside an asyncio loop (the daemon's layout); the thread ends with the process.

    `on_exit` is called in the controller's thread if it ever stops, with the
    exception that stopped it (None if it returned): the owner must hear of it.
    """

    def serve() -> None:
        error: BaseException | None = None
        try:
            run_controller(config, listen_host, listen_port, listener)
        except BaseException as err:
            error = err
            log.exception("os-ken controller stopped")
        if on_exit is not None:
            on_exit(error)

    thread = threading.Thread(target=serve, name="evio-os-ken", daemon=True)
    thread.start()
    return thread
