"""The os-ken (OpenFlow 1.3) adapter around `BoundedFloodSwitch`: thin by design.

Handlers turn OpenFlow events into calls on the pure switch logic, and one
method (`_send`) turns the neutral actions it returns into OFP messages.

Threads. The daemon runs asyncio in the main thread and os-ken, with its
native (thread) hub, in another. Everything that touches the switch logic
runs in this app's event thread, so the logic needs no locks. The one
crossing is `TunnelPortQueue`: the tunnel side calls `peer_up`/`peer_down`
(which TAP leads to which peer) from any thread; the app drains it before
every port event and on a periodic tick. The tunnel side announces a TAP
before adding it to the bridge, so its port comes up as a peer port.

Started without osken-manager: `run_controller(config, host, port)` blocks,
and `python -m evio.sdn.ofapp` runs one controller for tests and the lab.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import event as osken_event
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from evio.overlay.node_id import format_node_id, parse_node_id
from evio.sdn.flow_actions import (
    FRB_TO_CONTROLLER_PRIORITY,
    TABLE_MISS_PRIORITY,
    AddFlow,
    DeleteFlowsOfPort,
    DeleteFlowsToMac,
    FlowAction,
    FlowMatch,
    PacketOut,
)
from evio.sdn.frb import ETH_TYPE_FRB
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

log = logging.getLogger(__name__)

# Marks the unicast flows evio installs, so deletes never touch the base flows.
EVIO_COOKIE = 0xE710_0001
ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF


# ---------------------------------------------------------------------- the thread boundary


@dataclass(frozen=True)
class PeerPortUp:
    port_name: str
    peer: int


@dataclass(frozen=True)
class PeerPortDown:
    port_name: str


TunnelPortEvent = PeerPortUp | PeerPortDown


class TunnelPortQueue:
    """Which TAP leads to which peer, handed from the tunnel side to the os-ken thread."""

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[TunnelPortEvent] = queue.SimpleQueue()

    def peer_up(self, port_name: str, peer: int) -> None:
        self._events.put(PeerPortUp(port_name, peer))

    def peer_down(self, port_name: str) -> None:
        self._events.put(PeerPortDown(port_name))

    def drain(self) -> list[TunnelPortEvent]:
        out: list[TunnelPortEvent] = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out


@dataclass
class ControllerConfig:
    node_id: int
    tunnel_ports: TunnelPortQueue = field(default_factory=TunnelPortQueue)
    flow_idle_timeout: int = 30
    mac_max_age: float = 300.0
    tick_interval: float = 0.5
    clock: Callable[[], float] = time.monotonic
    # Called in the os-ken thread with (event name, details); tests and the daemon observe through it.
    observer: Callable[[str, dict[str, Any]], None] | None = None

    @property
    def switch_mac(self) -> str:
        """A locally administered unicast MAC for FRBs this switch originates, from the node id."""
        return "02:" + (self.node_id & 0xFF_FFFF_FFFF).to_bytes(5, "big").hex(":")


# ---------------------------------------------------------------------- neutral actions -> OpenFlow


def to_ofp_messages(datapath: Any, action: FlowAction) -> list[Any]:
    """The OpenFlow 1.3 messages that carry out `action` on `datapath`."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    if isinstance(action, PacketOut):
        return [parser.OFPPacketOut(datapath, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                    actions=[parser.OFPActionOutput(action.port)], data=action.data)]
    if isinstance(action, AddFlow):
        m = action.match
        match = parser.OFPMatch(in_port=m.in_port, eth_src=m.eth_src, eth_dst=m.eth_dst)
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(action.out_port)])]
        return [parser.OFPFlowMod(datapath, cookie=EVIO_COOKIE, command=ofp.OFPFC_ADD,
                                  idle_timeout=action.idle_timeout, priority=action.priority,
                                  flags=ofp.OFPFF_SEND_FLOW_REM, match=match, instructions=inst)]
    if isinstance(action, DeleteFlowsOfPort):
        # Two deletes: flows entering by the port, and flows leaving through it.
        common = dict(cookie=EVIO_COOKIE, cookie_mask=ALL_BITS, table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                      out_group=ofp.OFPG_ANY)
        return [
            parser.OFPFlowMod(datapath, out_port=ofp.OFPP_ANY, match=parser.OFPMatch(in_port=action.port), **common),
            parser.OFPFlowMod(datapath, out_port=action.port, match=parser.OFPMatch(), **common),
        ]
    if isinstance(action, DeleteFlowsToMac):
        return [parser.OFPFlowMod(datapath, cookie=EVIO_COOKIE, cookie_mask=ALL_BITS, table_id=ofp.OFPTT_ALL,
                                  command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                                  match=parser.OFPMatch(eth_dst=action.mac))]
    raise TypeError(f"not a flow action: {action!r}")


def base_flows(datapath: Any) -> list[Any]:
    """At connect: clear old flows; unmatched frames and every FRB go to the controller, whole."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    to_controller = [parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS, [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
    return [
        parser.OFPFlowMod(datapath, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                          out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
        parser.OFPFlowMod(datapath, priority=TABLE_MISS_PRIORITY, match=parser.OFPMatch(),
                          instructions=to_controller),
        parser.OFPFlowMod(datapath, priority=FRB_TO_CONTROLLER_PRIORITY,
                          match=parser.OFPMatch(eth_type=ETH_TYPE_FRB), instructions=to_controller),
    ]


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
        try:
            handler(self, ev)
        except Exception:
            self.handler_errors += 1
            log.exception("handler %s failed on %s", handler.__name__, type(ev).__name__)

    return wrapper


class EventTick(osken_event.EventBase):
    """Periodic work (draining the tunnel queue, expiring MACs), run in the app's event thread."""


class BoundedFloodApp(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, evio_controller: ControllerConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if evio_controller is None:
            raise RuntimeError("BoundedFloodApp needs evio_controller=ControllerConfig(...)")
        self.config = evio_controller
        self.switch = BoundedFloodSwitch(self.config.node_id, self.config.switch_mac,
                                         self.config.flow_idle_timeout, self.config.mac_max_age)
        self.datapath: Any = None
        self.peer_by_name: dict[str, int] = {}
        self.port_desc: dict[int, tuple[str, str]] = {}  # port number -> (name, hw_addr)
        self._stopping = threading.Event()
        self.handler_errors = 0

    def start(self) -> Any:
        thread = super().start()
        threading.Thread(target=self._ticker, name="evio-of-tick", daemon=True).start()
        return thread

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def _ticker(self) -> None:
        while not self._stopping.wait(self.config.tick_interval):
            self.send_event(self.name, EventTick())

    def _observe(self, what: str, **details: Any) -> None:
        if self.config.observer is not None:
            self.config.observer(what, details)

    # ---------------------------------------------------------------- sending

    def _send(self, actions: Sequence[FlowAction]) -> None:
        """The one place OFP messages leave for the switch."""
        dp = self.datapath
        if dp is None:
            return
        for action in actions:
            for msg in to_ofp_messages(dp, action):
                dp.send_msg(msg)

    # ---------------------------------------------------------------- handlers

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    @_contained
    def switch_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        self.datapath = dp
        for msg in base_flows(dp):
            dp.send_msg(msg)
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))
        log.info("switch connected dpid=%016x node=%s", dp.id, format_node_id(self.config.node_id))
        self._observe("switch_features", dpid=dp.id)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    @_contained
    def switch_gone(self, ev: Any) -> None:
        if ev.datapath is self.datapath and self.datapath is not None:
            log.warning("switch disconnected dpid=%016x", self.datapath.id)
            self._observe("switch_gone", dpid=self.datapath.id)
            self.datapath = None

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    @_contained
    def port_desc_reply(self, ev: Any) -> None:
        self._drain_tunnel_ports()
        for p in ev.msg.body:
            self._port_up(p.port_no, _text(p.name), p.hw_addr)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    @_contained
    def port_status(self, ev: Any) -> None:
        self._drain_tunnel_ports()
        msg = ev.msg
        ofp = msg.datapath.ofproto
        p = msg.desc
        if msg.reason == ofp.OFPPR_DELETE:
            self.port_desc.pop(p.port_no, None)
            self._send(self.switch.port_removed(p.port_no, self.config.clock()))
            self._observe("port_removed", port=p.port_no, name=_text(p.name))
        else:
            self._port_up(p.port_no, _text(p.name), p.hw_addr)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    @_contained
    def packet_in(self, ev: Any) -> None:
        msg = ev.msg
        self._send(self.switch.packet_in(msg.match["in_port"], bytes(msg.data), self.config.clock()))

    @set_ev_cls(ofp_event.EventOFPFlowRemoved, MAIN_DISPATCHER)
    @_contained
    def flow_removed(self, ev: Any) -> None:
        m = ev.msg.match
        if ev.msg.cookie != EVIO_COOKIE or "in_port" not in m:
            return
        self._send(self.switch.flow_removed(FlowMatch(m["in_port"], m["eth_src"], m["eth_dst"])))

    @set_ev_cls(EventTick)
    @_contained
    def tick(self, ev: EventTick) -> None:
        self._drain_tunnel_ports()
        self._send(self.switch.expire(self.config.clock()))

    # ---------------------------------------------------------------- ports

    def _drain_tunnel_ports(self) -> None:
        for event in self.config.tunnel_ports.drain():
            if isinstance(event, PeerPortUp):
                self.peer_by_name[event.port_name] = event.peer
            else:
                self.peer_by_name.pop(event.port_name, None)
            # A port already on the bridge changes kind now that we know where it leads.
            for port_no, (name, hw_addr) in list(self.port_desc.items()):
                if name == event.port_name:
                    self._port_up(port_no, name, hw_addr)

    def _port_up(self, port_no: int, name: str, hw_addr: str) -> None:
        self.port_desc[port_no] = (name, hw_addr)
        peer = self.peer_by_name.get(name)
        if peer is not None:
            port = SwitchPort(port_no, name, PortKind.PEER, peer)
        else:
            port = SwitchPort(port_no, name, PortKind.LEAF, None, hw_addr)
        if self.switch.ports.get(port_no) == port:
            return
        self._send(self.switch.port_added(port, self.config.clock()))
        self._observe("port_added", port=port_no, name=name, kind=port.kind.value,
                      peer=format_node_id(peer) if peer is not None else None)


def _text(name: bytes | str) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else name


# ---------------------------------------------------------------------- running it


def run_controller(config: ControllerConfig, listen_host: str = "127.0.0.1", listen_port: int = 6653) -> None:
    """Run os-ken with the Bounded Flood app until the process ends (blocks; once per process)."""
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
    config: ControllerConfig, listen_host: str = "127.0.0.1", listen_port: int = 6653
) -> threading.Thread:
    """Run the controller beside an asyncio loop (the daemon's layout); the thread ends with the process."""
    thread = threading.Thread(target=run_controller, args=(config, listen_host, listen_port),
                              name="evio-os-ken", daemon=True)
    thread.start()
    return thread


def _parse_peer(text: str) -> tuple[str, int]:
    name, _, nid = text.partition("=")
    if not name or not nid:
        raise argparse.ArgumentTypeError(f"expected TAPNAME=NODEID, got {text!r}")
    return name, parse_node_id(nid)


def main(argv: Sequence[str] | None = None) -> int:
    """One controller in this process: `python -m evio.sdn.ofapp --node-id HEX [--peer TAP=HEX]...`."""
    ap = argparse.ArgumentParser(prog="python -m evio.sdn.ofapp", description=main.__doc__)
    ap.add_argument("--node-id", type=parse_node_id, required=True)
    ap.add_argument("--listen-host", default="127.0.0.1")
    ap.add_argument("--listen-port", type=int, default=6653)
    ap.add_argument("--peer", type=_parse_peer, action="append", default=[], help="TAPNAME=NODEID")
    ap.add_argument("--flow-idle-timeout", type=int, default=30)
    ap.add_argument("--events", help="append controller events here as JSON lines")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ControllerConfig(args.node_id, flow_idle_timeout=args.flow_idle_timeout)
    for name, peer in args.peer:
        config.tunnel_ports.peer_up(name, peer)
    if args.events:
        sink = open(args.events, "a", buffering=1)  # noqa: SIM115 - open for the process's life

        def write_event(what: str, details: dict[str, Any]) -> None:
            sink.write(json.dumps({"event": what, **details}) + "\n")

        config.observer = write_event
    run_controller(config, args.listen_host, args.listen_port)
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so os-ken and we share one set of classes.
    from evio.sdn import ofapp as _ofapp

    sys.exit(_ofapp.main())
