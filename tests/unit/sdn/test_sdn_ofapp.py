"""The os-ken adapter without a switch: OF 1.3 encoding, several overlays on one app, the boundary."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from typing import Any

import pytest
from os_ken.controller import ofp_event
from os_ken.controller.handler import MAIN_DISPATCHER
from os_ken.ofproto import ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser

from evio.config.model import OnDemandConfig
from evio.sdn import frb, neighbor_guard
from evio.sdn.boundary import (
    AsyncioEventSink,
    CommandQueue,
    DropCounts,
    OnDemandIdle,
    OnDemandWanted,
    PortAdded,
    PortRemoved,
    SwitchConnected,
    SwitchDisconnected,
    event_as_dict,
)
from evio.sdn.flow_actions import (
    POLICY_RULE_PRIORITY,
    AddFlow,
    DeleteFlowsOfPort,
    DeleteFlowsToMac,
    FlowMatch,
    PacketOut,
)
from evio.sdn.ofapp import BoundedFloodApp, EventTick
from evio.sdn.openflow_messages import COUNTED_COOKIE, EVIO_COOKIE, base_flows, flow_byte_counts, to_ofp_messages
from evio.sdn.switch import PortKind
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, connect, make_app, port_desc
from evio.testing.frames import H1, H2, arp_request, eth

parser = ofproto_v1_3_parser
ofp = ofproto_v1_3


# ---------------------------------------------------------------- encoding


def test_actions_become_openflow_13_messages_that_encode() -> None:
    dp = FakeDatapath()
    (flow,) = to_ofp_messages(dp, AddFlow(FlowMatch(3, H1, H2), 7, 30))
    assert (flow.command, flow.idle_timeout, flow.cookie) == (ofp.OFPFC_ADD, 30, EVIO_COOKIE)
    assert flow.flags & ofp.OFPFF_SEND_FLOW_REM
    assert (flow.match["in_port"], flow.match["eth_src"], flow.match["eth_dst"]) == (3, H1, H2)
    assert flow.instructions[0].actions[0].port == 7
    (out,) = to_ofp_messages(dp, PacketOut(5, b"abc" * 20))
    assert out.actions[0].port == 5 and out.data == b"abc" * 20
    by_in, by_out = to_ofp_messages(dp, DeleteFlowsOfPort(9))
    assert by_in.match["in_port"] == 9 and by_out.out_port == 9
    assert by_in.cookie_mask and by_out.cookie_mask  # never the base flows
    (to_mac,) = to_ofp_messages(dp, DeleteFlowsToMac(H2))
    assert to_mac.match["eth_dst"] == H2 and to_mac.command == ofp.OFPFC_DELETE
    clear, past_policy, frb_past_policy, miss, frb_rule = base_flows(dp)
    assert frb_rule.match["eth_type"] == 0xC0C0 and frb_rule.priority > miss.priority
    assert (past_policy.table_id, frb_past_policy.table_id, miss.table_id, frb_rule.table_id, flow.table_id) == (
        0, 0, 1, 1, 1)  # the policy's table, then the switching
    assert frb_past_policy.priority > POLICY_RULE_PRIORITY  # an FRB passes every rule (its inner frame is policed)
    for msg in [flow, out, by_in, by_out, to_mac, clear, past_policy, frb_past_policy, miss, frb_rule]:
        dp.send_msg(msg)


def test_flow_stats_become_byte_counts_of_evio_flows_only() -> None:
    def stat(cookie: int, byte_count: int, **match: Any) -> Any:
        return parser.OFPFlowStats(0, 1, 0, 10, 30, 0, 0, cookie, 1, byte_count, parser.OFPMatch(**match), [])

    stats = [
        stat(EVIO_COOKIE, 1500, in_port=1, eth_src=H1, eth_dst=H2),
        stat(0, 99, in_port=1, eth_src=H1, eth_dst=H2),  # someone else's flow
        stat(EVIO_COOKIE, 7, eth_type=0xC0C0),  # not a unicast flow
    ]
    assert flow_byte_counts(stats) == {FlowMatch(1, H1, H2): 1500}


# ---------------------------------------------------------------- one app, several overlays


def test_two_overlays_share_one_app_each_switch_known_by_its_datapath_id() -> None:
    app, commands, sink, _ = make_app()
    red, blue = FakeDatapath(0xAAAA), FakeDatapath(0xBBBB)
    commands.attach("red", 0xAAAA, node_id=100)
    commands.attach("blue", 0xBBBB, node_id=100)
    commands.peer_up("red", "evot200", 200)  # announced before the TAP joins the bridge
    commands.peer_up("blue", "evot300", 300)
    connect(app, red, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    connect(app, blue, [port_desc(ofp.OFPP_LOCAL, "evoblue", H2), port_desc(2, "evot300", "02:00:00:00:00:98")])

    assert set(app.overlays) == {"red", "blue"}
    assert app.overlays["red"].switch.ports[2].peer == 200
    assert app.overlays["blue"].switch.ports[2].peer == 300
    assert app.overlays["blue"].switch.ports[ofp.OFPP_LOCAL].kind is PortKind.LEAF
    connected = [e for e in sink.events if isinstance(e, SwitchConnected)]
    assert connected == [SwitchConnected("red", 0xAAAA), SwitchConnected("blue", 0xBBBB)]
    added = {(e.overlay, e.name, e.kind) for e in sink.events if isinstance(e, PortAdded)}
    assert added == {("red", "evored", "leaf"), ("red", "evot200", "peer"),
                     ("blue", "evoblue", "leaf"), ("blue", "evot300", "peer")}
    # Each switch got its own base flows and port request; the peer ports their leaf announcements.
    for dp in (red, blue):
        assert [type(m).__name__ for m in dp.sent[:6]] == ["OFPFlowMod"] * 5 + ["OFPPortDescStatsRequest"]

    # A broadcast on red goes out of red only, as an FRB rooted here.
    red.sent.clear()
    blue.sent.clear()
    app.packet_in(FakeEvent(FakeMsg(datapath=red, match={"in_port": ofp.OFPP_LOCAL}, data=arp_request(H1))))
    frb_out, reverse_out = red.packet_outs()  # the broadcast, and its header the other way round
    assert frb_out.actions[0].port == 2 and frb.parse(frb_out.data).header.root_nid == 100
    assert frb.parse(reverse_out.data).header.frb_type is frb.FrbType.BROADCAST_REVERSE
    assert blue.sent == []
    assert app.overlays["blue"].switch.learning.lookup(H1, 100.0) is None

    # A port going on blue touches blue only.
    app.port_status(FakeEvent(FakeMsg(datapath=blue, reason=ofp.OFPPR_DELETE, desc=port_desc(2, "evot300", H2))))
    assert 2 not in app.overlays["blue"].switch.ports and 2 in app.overlays["red"].switch.ports
    assert sink.events[-1] == PortRemoved("blue", 2, "evot300")


def test_a_switch_that_connects_before_its_overlay_is_attached_waits_for_it() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(0xCAFE)
    app.switch_features(FakeEvent(FakeMsg(datapath=dp)))
    assert dp.sent == [] and sink.events == []
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 1}, data=arp_request(H1))))  # ignored, not raised
    assert app.handler_errors == 0

    commands.attach("green", 0xCAFE, node_id=7)
    app.tick(EventTick(periodic=False))
    assert sink.events == [SwitchConnected("green", 0xCAFE)]
    # Its ports are asked for (the RA guard's flows follow, decision 0068).
    assert any(isinstance(msg, parser.OFPPortDescStatsRequest) for msg in dp.sent)


def test_a_tunnel_port_announced_after_it_joined_turns_from_leaf_to_peer() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    connect(app, dp, [port_desc(5, "evot200", "02:00:00:00:00:99")])
    assert app.overlays["red"].switch.ports[5].kind is PortKind.LEAF
    commands.peer_up("red", "evot200", 200)
    app.tick(EventTick(periodic=False))
    assert app.overlays["red"].switch.ports[5].peer == 200
    assert sink.events[-1] == PortAdded("red", 5, "evot200", "peer", 200)


def test_a_peer_port_down_leaves_the_switch_at_once_and_is_no_leaf_while_the_bridge_still_has_it() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(5, "evot200", "02:00:00:00:00:99")])
    commands.peer_down("red", "evot200")
    app.tick(EventTick(periodic=False))
    assert 5 not in app.overlays["red"].switch.ports  # not reclassified as a host's port
    assert sink.events[-1] == PortRemoved("red", 5, "evot200")
    # The tunnel closed its TAP: the bridge reports the port changed (carrier down) before it drops it.
    app.port_status(FakeEvent(FakeMsg(datapath=dp, reason=ofp.OFPPR_MODIFY, desc=port_desc(5, "evot200", "02:00:00:00:00:99"))))
    assert 5 not in app.overlays["red"].switch.ports
    commands.peer_up("red", "evot200", 200)  # a new tunnel under that name before the bridge dropped it
    app.tick(EventTick(periodic=False))
    assert app.overlays["red"].switch.ports[5].peer == 200


def test_switch_disconnect_is_reported_and_forgets_its_ports_until_it_returns() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(5, "evot200", "02:00:00:00:00:99")])
    app.switch_gone(FakeEvent(datapath=dp))
    assert sink.events[-1] == SwitchDisconnected("red", 1)
    assert app.overlays["red"].switch.ports == {}
    again = FakeDatapath(1)
    connect(app, again, [port_desc(6, "evot200", "02:00:00:00:00:99")])
    assert app.overlays["red"].switch.ports[6].peer == 200  # the tunnel's name is still known


def test_tick_polls_flow_counters_and_a_busy_distant_peer_is_reported() -> None:
    app, commands, sink, clock = make_app(stats_interval=5.0)
    dp = FakeDatapath(1)
    on_demand = OnDemandConfig(threshold_bytes_per_s=1000.0, idle_timeout=30.0)
    commands.attach("red", 1, node_id=100, on_demand=on_demand)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    # H2 lives behind node 300 (not adjacent), reached through 200: its FRB taught us so (the copy that
    # comes counter-clockwise, 300 -> 200 -> 100: clockwise, 300's flood reaches 100 before 200).
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2},
                           data=frb.pack(frb.broadcast(arp_request(H2)[:14], 300, 100, 2, REVERSE)))))

    def poll(byte_count: int) -> None:
        dp.sent.clear()
        app.tick(EventTick(periodic=True))
        (request,) = [m for m in dp.sent if isinstance(m, parser.OFPFlowStatsRequest)]
        assert (request.cookie, request.cookie_mask) == (COUNTED_COOKIE, 0xFFFF_FFFF_FFFF_FFFF)  # counted flows only
        stat = parser.OFPFlowStats(0, 1, 0, 10, 30, 0, 0, COUNTED_COOKIE, 1, byte_count,
                                   parser.OFPMatch(in_port=ofp.OFPP_LOCAL, eth_src=H1, eth_dst=H2), [])
        # The reply comes in two parts; only the whole one counts.
        app.flow_stats_reply(FakeEvent(FakeMsg(datapath=dp, body=[], flags=ofp.OFPMPF_REPLY_MORE)))
        app.flow_stats_reply(FakeEvent(FakeMsg(datapath=dp, body=[stat], flags=0)))

    poll(0)
    clock.now += 5
    poll(50_000)
    assert [e for e in sink.events if isinstance(e, OnDemandWanted)] == [OnDemandWanted("red", 300, 10_000.0)]
    clock.now += 1
    dp.sent.clear()
    app.tick(EventTick(periodic=True))  # before stats_interval: no new poll
    assert not any(isinstance(m, parser.OFPFlowStatsRequest) for m in dp.sent)


def test_on_demand_enabled_by_a_reload_starts_polling_without_resetting_the_switch() -> None:
    app, commands, sink, clock = make_app(stats_interval=1.0)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, on_demand=OnDemandConfig(enabled=False))
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1)])
    switch = app.overlays["red"]
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    assert not any(isinstance(m, parser.OFPFlowStatsRequest) for m in dp.sent)  # disabled: no polls
    enabled = OnDemandConfig(threshold_bytes_per_s=1000.0, idle_timeout=3.0)
    commands.set_on_demand("red", enabled)
    clock.now += 1
    app.tick(EventTick(periodic=True))
    assert app.overlays["red"] is switch and switch.settings.on_demand == enabled
    assert switch.on_demand.config == enabled
    assert any(isinstance(m, parser.OFPFlowStatsRequest) for m in dp.sent)
    assert not any(isinstance(m, parser.OFPFlowMod) and m.command == ofp.OFPFC_DELETE and m.cookie == 0
                   for m in dp.sent)  # no base flows again: the switch kept its flows


def test_drop_counters_are_reported_when_they_change() -> None:
    app, commands, sink, clock = make_app(drop_report_interval=10.0)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=b"\xff" * 6 + bytes.fromhex(H2.replace(":", ""))
                           + b"\xc0\xc0" + b"\x00" * 10)))
    app.tick(EventTick(periodic=True))
    (report,) = [e for e in sink.events if isinstance(e, DropCounts)]
    assert report.drops == {"MALFORMED_FRB": 1} and report.frb_errors == {"TOO_SHORT": 1}
    clock.now += 20
    app.tick(EventTick(periodic=True))
    assert len([e for e in sink.events if isinstance(e, DropCounts)]) == 1  # unchanged: not again


def test_a_failing_handler_is_logged_and_counted_not_raised_into_os_ken() -> None:
    app, commands, _, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    connect(app, dp, [])

    def broken(*_: object) -> list:
        raise RuntimeError("bug")

    app.overlays["red"].switch.packet_in = broken  # type: ignore[method-assign,assignment]
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 1}, data=eth(H2, H1))))
    assert app.handler_errors == 1


# ---------------------------------------------------------------- the boundary


def test_putting_a_command_wakes_the_waiter_at_once() -> None:
    commands = CommandQueue()
    woke = threading.Event()

    def waiter() -> None:
        if commands.wait(timeout=30.0):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    commands.peer_up("red", "evot1", 5)
    thread.join(timeout=5.0)
    assert woke.is_set()
    assert [c.port_name for c in commands.drain()] == ["evot1"]  # type: ignore[union-attr]
    assert commands.drain() == []


async def test_events_cross_from_another_thread_into_the_asyncio_loop() -> None:
    sink = AsyncioEventSink(asyncio.get_running_loop())
    thread = threading.Thread(target=lambda: sink.emit(OnDemandWanted("red", 0xAB, 5.0)))
    thread.start()
    event = await asyncio.wait_for(sink.get(), timeout=5.0)
    thread.join()
    assert event == OnDemandWanted("red", 0xAB, 5.0)
    assert event_as_dict(event) == {"event": "OnDemandWanted", "overlay": "red", "peer": f"{0xAB:032x}",
                                    "bytes_per_s": 5.0}


def test_an_event_after_the_loop_closed_is_counted_not_raised() -> None:
    loop = asyncio.new_event_loop()
    sink = AsyncioEventSink(loop)
    loop.close()
    sink.emit(SwitchConnected("red", 1))
    assert sink.lost == 1


@pytest.mark.parametrize("event", [SwitchConnected("red", 0x1F), DropCounts("red", {"RUNT": 2}, {})])
def test_events_have_a_json_form(event: Any) -> None:
    import json

    as_json = json.loads(json.dumps(event_as_dict(event)))
    assert as_json["event"] == type(event).__name__ and as_json["overlay"] == "red"


# ---------------------------------------------------------------- the first packet: no thread hand-offs


def packet_in_event(dp: Any, in_port: int, data: bytes) -> Any:
    ev = ofp_event.EventOFPPacketIn(FakeMsg(datapath=dp, match={"in_port": in_port}, data=data))
    return ev


def test_a_packet_in_is_handled_in_the_thread_that_read_it_unless_that_switch_has_events_queued() -> None:
    app, commands, _, _ = make_app()
    dp = FakeDatapath(0xAAAA)
    commands.attach("red", 0xAAAA, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=eth(H1, H2))))  # H2 is behind port 2
    dp.sent.clear()

    app._send_event(packet_in_event(dp, ofp.OFPP_LOCAL, eth(H2, H1)), MAIN_DISPATCHER)
    assert app.packet_ins_inline == 1 and app.events.qsize() == 0
    # The frame, its flow and the flow back (the source was just heard on that port).
    assert [type(m).__name__ for m in dp.sent] == ["OFPPacketOut", "OFPFlowMod", "OFPFlowMod"]

    # A port change of the same switch still queued: the packet-in waits behind it, so order holds.
    status = ofp_event.EventOFPPortStatus(FakeMsg(datapath=dp, reason=ofp.OFPPR_DELETE,
                                               desc=port_desc(2, "evot200", "02:00:00:00:00:99")))
    app._send_event(status, MAIN_DISPATCHER)
    app._send_event(packet_in_event(dp, ofp.OFPP_LOCAL, eth(H2, H1, payload=b"y" * 46)), MAIN_DISPATCHER)
    assert app.packet_ins_inline == 1 and app.events.qsize() == 2
    dp.sent.clear()
    handlers = {ofp_event.EventOFPPortStatus: app.port_status, ofp_event.EventOFPPacketIn: app.packet_in}
    while app.events.qsize():  # what os-ken's event thread does, in order
        ev, _ = app.events.get()
        app._events_sem.release()
        handlers[type(ev)](ev)
    assert 2 not in app.overlays["red"].switch.ports
    assert not any(isinstance(m, parser.OFPPacketOut) and m.actions[0].port == 2 for m in dp.sent)
    # Nothing queued any more: inline again.
    app._send_event(packet_in_event(dp, ofp.OFPP_LOCAL, eth(H2, H1)), MAIN_DISPATCHER)
    assert app.packet_ins_inline == 2


class RecordingSocket:
    """A switch connection's socket: what was written, write by write, and the options set."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.options: dict[tuple[int, int], int] = {}

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def setsockopt(self, level: int, name: int, value: int) -> None:
        self.options[(level, name)] = value


def message_types(data: bytes) -> list[int]:
    types = []
    while data:
        _, msg_type, msg_len, _ = ofproto_parser.header(data)
        types.append(msg_type)
        data = data[msg_len:]
    return types


def test_once_connected_a_switch_gets_each_steps_messages_in_one_write_on_a_nodelay_socket() -> None:
    app, commands, _, _ = make_app()
    sock = RecordingSocket()
    dp = FakeDatapath(0xAAAA)
    dp.socket = sock  # type: ignore[attr-defined]
    commands.attach("red", 0xAAAA, node_id=100)
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    assert sock.options[(socket.IPPROTO_TCP, socket.TCP_NODELAY)] == 1
    assert dp.sent == []  # nothing through os-ken's send queue
    # Connect: base flows and the port request in one write, the RA guard's two flows (0068), the IPv4 redirect's
    # (review21l L5), the one for NAs whose target OVS does not read (0075), the one for every DAD probe and the one
    # for NAs of the switch MAC's EUI-64 addresses (review21s 1) in the connect step's; the local port's (its own MAC's
    # NA flow, review21s 1), the new peer port's leaf announcement and its four guard flows (0068 amended: review21k
    # K1-K3) in another, with the two flows that the interface's port brought: its MAC's NA flow (review21s 1) and
    # the one taking the signed documents' unicasts for it to the controller (0043 amended for review21r's residual).
    flow_mod = ofp.OFPT_FLOW_MOD
    assert [message_types(w) for w in sock.writes] == [[flow_mod] * 5 + [ofp.OFPT_MULTIPART_REQUEST], [flow_mod] * 6,
                                                       [flow_mod] * 2 + [ofp.OFPT_PACKET_OUT] + [flow_mod] * 4]
    sock.writes.clear()
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=eth(H1, H2))))  # teaches H2 on port 2
    sock.writes.clear()
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": ofp.OFPP_LOCAL}, data=eth(H2, H1))))
    # The frame, its flow and the flow back: one step, one write.
    assert [message_types(w) for w in sock.writes] == [[ofp.OFPT_PACKET_OUT, ofp.OFPT_FLOW_MOD, ofp.OFPT_FLOW_MOD]]


# ---------------------------------------------------------------- an idle controller's pace


REVERSE = frb.FrbType.BROADCAST_REVERSE


def _stats_requests(dp: FakeDatapath) -> list[Any]:
    return [m for m in dp.sent if isinstance(m, parser.OFPFlowStatsRequest)]


def _reply(app: BoundedFloodApp, dp: FakeDatapath, *stats: Any) -> None:
    app.flow_stats_reply(FakeEvent(FakeMsg(datapath=dp, body=list(stats), flags=0)))


def _stat(byte_count: int) -> Any:
    return parser.OFPFlowStats(0, 1, 0, 10, 30, 0, 0, EVIO_COOKIE, 1, byte_count,
                               parser.OFPMatch(in_port=ofp.OFPP_LOCAL, eth_src=H1, eth_dst=H2), [])


def test_with_no_flow_of_ours_on_the_switch_counters_are_not_polled_until_one_is_added() -> None:
    app, commands, sink, clock = make_app(stats_interval=0.5)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, on_demand=OnDemandConfig(threshold_bytes_per_s=1500.0))
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    assert len(_stats_requests(dp)) == 1  # connected: flows may be left over, so ask once
    _reply(app, dp)  # none
    for _ in range(4):
        dp.sent.clear()
        clock.now += 0.5
        app.tick(EventTick(periodic=True))
        assert _stats_requests(dp) == []
    # H2 lives behind node 300 (its FRB says so); H1 -> H2 puts a flow of ours on the switch: polls resume.
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2},
                           data=frb.pack(frb.broadcast(arp_request(H2)[:14], 300, 100, 2, REVERSE)))))
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": ofp.OFPP_LOCAL}, data=eth(H2, H1))))
    assert any(isinstance(m, parser.OFPFlowMod) and m.cookie == COUNTED_COOKIE for m in dp.sent)
    clock.now += 0.5
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    assert len(_stats_requests(dp)) == 1
    # 1000 bytes in the half second since the flow was added: 2000 B/s, over the threshold (spread over
    # the two seconds without polls before it, it would not be).
    _reply(app, dp, _stat(1000))
    assert [e.peer for e in sink.events if isinstance(e, OnDemandWanted)] == [300]


def test_an_empty_reply_to_a_poll_asked_before_a_flow_was_added_does_not_stop_the_polls() -> None:
    app, commands, _, clock = make_app(stats_interval=0.5)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, on_demand=OnDemandConfig())
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.tick(EventTick(periodic=True))  # the poll goes out ...
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2},
                           data=frb.pack(frb.broadcast(arp_request(H2)[:14], 300, 100, 2, REVERSE)))))  # H2 behind node 300
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": ofp.OFPP_LOCAL}, data=eth(H2, H1))))  # ... a counted flow ...
    _reply(app, dp)  # ... and the switch answers the poll it had before the flow
    clock.now += 0.5
    dp.sent.clear()
    app.tick(EventTick(periodic=True))
    assert len(_stats_requests(dp)) == 1


def test_a_wished_link_is_released_when_idle_even_while_no_counters_are_polled() -> None:
    app, commands, sink, clock = make_app(stats_interval=0.5)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, on_demand=OnDemandConfig(threshold_bytes_per_s=1000.0, idle_timeout=3.0))
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2},
                           data=frb.pack(frb.broadcast(arp_request(H2)[:14], 300, 100, 2, REVERSE)))))  # H2 behind node 300
    app.tick(EventTick(periodic=True))
    _reply(app, dp, _stat(0))
    clock.now += 1
    app.tick(EventTick(periodic=True))
    _reply(app, dp, _stat(50_000))
    assert [e.peer for e in sink.events if isinstance(e, OnDemandWanted)] == [300]
    clock.now += 1
    app.tick(EventTick(periodic=True))
    _reply(app, dp)  # the flow expired on the switch
    overlay = app.overlays["red"]
    assert not overlay.may_have_flows and overlay.needs_fast_ticks  # the wish still needs its ticks
    dp.sent.clear()
    for _ in range(6):
        clock.now += 0.5
        app.tick(EventTick(periodic=True))
    assert _stats_requests(dp) == []
    assert [e.peer for e in sink.events if isinstance(e, OnDemandIdle)] == [300]
    assert not overlay.needs_fast_ticks


def test_the_tick_slows_down_when_nothing_needs_it_and_a_packet_in_brings_it_back_at_once() -> None:
    app, commands, _, clock = make_app(tick_interval=0.5, idle_tick_interval=5.0)
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, on_demand=OnDemandConfig())
    commands.peer_up("red", "evot200", 200)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1), port_desc(2, "evot200", "02:00:00:00:00:99")])
    assert app.tick_pace() == 0.5  # flows may be on the switch until a poll says otherwise
    app.tick(EventTick(periodic=True))
    _reply(app, dp)
    clock.now += 1.0
    assert app.tick_pace() == 5.0
    commands.wait(0.0)  # (the commands above woke it)
    assert not commands.wait(0.0)
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=eth(H1, H2))))  # a broadcast: no flow
    assert commands.wait(0.0)  # the ticker is woken to take up the short tick
    assert app.tick_pace() == 0.5  # its reports go out on the next tick ...
    clock.now += 0.5
    assert app.tick_pace() == 5.0  # ... and then the slow pace again: it added no flow



def test_the_nodes_own_certified_address_gets_the_flows_of_its_probes_and_advertisements() -> None:
    # Decision 0076 (review21n N3): none from a tunnel port is the node's own, so none rides a flow to its interface.
    app, commands, _, clock = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1)])
    dp.sent.clear()
    own = ipaddress.IPv6Address("fd00::3")
    commands.set_own_addresses("red", frozenset({own}))
    clock.now += 1
    app.tick(EventTick(periodic=True))
    assert app.overlays["red"].switch.own_certified == {own}
    guarded = sorted((m.match["icmpv6_type"], m.match.get("ipv6_src")) for m in dp.sent
                     if isinstance(m, parser.OFPFlowMod) and m.match.get("ipv6_nd_target") == str(own))
    assert guarded == [(136, None)]  # its probes: the one flow for every probe, installed at connect (review21s 1)
    assert app.overlays["red"].switch._guards >= {neighbor_guard.DAD_PROBE_FLOW}


def test_the_router_keys_reach_the_switch_and_later_ones_keep_what_it_took() -> None:
    # Decision 0081: in trust mode the overlay stack tells the switch its own key and the named routers' keys.
    from cryptography.hazmat.primitives.asymmetric import ec

    app, commands, _, clock = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100, ipv6_routers=(7,))
    connect(app, dp, [port_desc(ofp.OFPP_LOCAL, "evored", H1)])
    assert app.overlays["red"].switch.router_adverts is None  # no trust: nothing asked of a router's RA
    own, router = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    commands.set_router_keys("red", own, {})
    clock.now += 1
    app.tick(EventTick(periodic=True))
    adverts = app.overlays["red"].switch.router_adverts
    assert adverts is not None and adverts.overlay == "red"
    commands.set_router_keys("red", own, {7: router.public_key()})
    app.tick(EventTick(periodic=True))
    assert app.overlays["red"].switch.router_adverts is adverts  # the same: statements taken are kept
    assert adverts.has_key(7) and not adverts.has_key(8)
