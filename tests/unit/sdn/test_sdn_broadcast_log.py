"""Broadcast counters for E1: per root and per inner frame, from the switch logic to the daemon's status."""

from __future__ import annotations

import json
from collections import Counter

from evio.sdn import frb
from evio.sdn.boundary import AttachOverlay, BroadcastCounts, event_as_dict
from evio.sdn.broadcast_log import MAX_ETHERTYPES, OTHER_ETHERTYPE, BroadcastLog, BroadcastReceived, frame_digest
from evio.sdn.ofapp import EventTick
from evio.sdn.overlay_switch import OverlaySwitch
from evio.sdn.switch import BoundedFloodSwitch, Drop, PortKind, SwitchPort
from evio.testing.fake_flow_table import host_mac, symphony_network
from evio.testing.fake_ofapp import FakeDatapath, FakeEvent, FakeMsg, make_app, port_desc
from evio.testing.frames import H1, H3, arp_request
from evio.testing.node_fleet import Fleet, nid
from evio.testing.virtual_clock import VirtualClock
from evio.testing.waiting import wait_until

H1_BYTES = bytes.fromhex(H1.replace(":", ""))


def test_the_log_counts_per_root_and_keeps_the_latest_frames_by_digest() -> None:
    log = BroadcastLog(keep=2)
    a, b = arp_request(H1), arp_request(H3)
    log.record(100, a, peer=7, hop_count=1)
    log.record(100, b, peer=7, hop_count=2)
    last = log.record(200, a, peer=8, hop_count=3)
    assert (log.received, dict(log.by_root)) == (3, {100: 2, 200: 1})
    assert [e.seq for e in log.recent] == [2, 3]  # bounded: the oldest went
    assert last == BroadcastReceived(3, 200, frame_digest(a), 0x0806, 8, 3)
    assert frame_digest(a) == frame_digest(bytes(a)) != frame_digest(b)


def test_the_log_counts_inner_ethertypes_and_lumps_the_invented_ones_past_its_bound() -> None:
    log = BroadcastLog()
    log.record(100, arp_request(H1), peer=7, hop_count=1)
    log.record(100, arp_request(H1), peer=7, hop_count=1)
    for kind in range(0x9000, 0x9000 + MAX_ETHERTYPES + 5):  # a peer inventing ethertypes
        log.record(100, b"\xff" * 6 + H1_BYTES + kind.to_bytes(2, "big"), peer=7, hop_count=1)
    assert log.by_ethertype[0x0806] == 2
    assert len(log.by_ethertype) == MAX_ETHERTYPES + 1 and log.by_ethertype[OTHER_ETHERTYPE] == 6


def test_the_switch_counts_its_packet_ins_by_kind() -> None:
    sw = BoundedFloodSwitch(200, "02:aa:00:00:00:02")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "t100", PortKind.PEER, 100), now=0)
    inner = arp_request(H3)
    sw.packet_in(10, frb.pack(frb.broadcast(inner, root_nid=100, bound_nid=100, hop_count=2)), now=1)
    sw.packet_in(10, frb.pack(frb.broadcast(inner[:14], 100, 100, 2, frb.FrbType.BROADCAST_REVERSE)), now=1)
    sw.packet_in(1, arp_request(H1), now=1)
    sw.packet_in(1, b"\x02" * 6 + H1_BYTES + b"\x08\x00" + bytes(46), now=1)
    sw.packet_in(10, b"\x02" * 6 + bytes.fromhex(H3.replace(":", "")) + b"\x08\x00" + bytes(46), now=1)
    sw.packet_in(10, b"\x02" * 6 + bytes.fromhex(H3.replace(":", "")) + b"\x08\x00" + bytes(46), now=1, forwarded=True)
    sw.packet_in(10, b"\x02" * 5, now=1)
    assert dict(sw.packet_in_kinds) == {"frb_broadcast": 1, "frb_reverse": 1, "leaf_group": 1, "leaf_unicast": 1,
                                        "peer_unicast": 1, "copy": 1, "other": 1}
    assert sum(sw.packet_in_kinds.values()) == sw.counters.packet_ins


def test_the_switch_logs_each_broadcast_from_a_peer_and_counts_its_own_coming_back() -> None:
    sw = BoundedFloodSwitch(200, "02:aa:00:00:00:02")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "t100", PortKind.PEER, 100), now=0)
    inner = arp_request(H3)
    sw.packet_in(10, frb.pack(frb.broadcast(inner, root_nid=100, bound_nid=100, hop_count=2)), now=1)
    (seen,) = sw.broadcasts.recent
    assert (seen.root, seen.frame, seen.peer, seen.hop_count) == (100, frame_digest(inner), 100, 2)
    assert sw.broadcasts_seen == 1 and sw.broadcasts.own_returned == 0

    sw.packet_in(10, frb.pack(frb.broadcast(inner, root_nid=200, bound_nid=200, hop_count=3)), now=2)
    assert sw.broadcasts.own_returned == 1 and sw.drops[Drop.OWN_BROADCAST] == 1
    assert sw.broadcasts_seen == 1  # not counted as received


def test_in_a_16_node_overlay_every_node_logs_the_arp_exactly_once_under_one_digest() -> None:
    net, ids, _ = symphony_network(16, seed=3)
    request = arp_request(host_mac(net, ids[0]))
    net.inject(ids[0], 1, request)
    for node in ids[1:]:
        log = net.nodes[node].switch.broadcasts
        assert Counter((e.root, e.frame) for e in log.recent) == {(ids[0], frame_digest(request)): 1}
    assert net.nodes[ids[0]].switch.broadcasts.received == 0
    assert net.nodes[ids[0]].switch.broadcasts.own_returned == 0


def test_overlay_switch_reports_broadcast_counts_only_when_they_changed() -> None:
    overlay = OverlaySwitch(AttachOverlay("red", 1, node_id=200))
    overlay.port_up(1, "br0", "02:00:00:00:00:99", now=0)
    overlay.peer_up("t100", 100, now=0)
    overlay.port_up(10, "t100", "02:00:00:00:00:98", now=0)
    assert overlay.broadcast_report() == []
    inner = arp_request(H1)
    overlay.packet_in(10, frb.pack(frb.broadcast(inner, 100, 100, 1)), now=1)
    (report,) = overlay.broadcast_report()
    assert isinstance(report, BroadcastCounts)
    assert (report.received, report.own_returned, dict(report.by_root)) == (1, 0, {100: 1})
    assert [e.frame for e in report.recent] == [frame_digest(inner)]
    assert overlay.broadcast_report() == []


def test_the_app_emits_broadcast_counts_at_its_next_tick_and_they_have_a_json_form() -> None:
    app, commands, sink, _ = make_app()
    dp = FakeDatapath(1)
    commands.attach("red", 1, node_id=100)
    commands.peer_up("red", "evot200", 200)
    app.switch_features(FakeEvent(FakeMsg(datapath=dp)))
    app.port_desc_reply(FakeEvent(FakeMsg(datapath=dp, body=[port_desc(1, "br0", "02:00:00:00:00:01"),
                                                     port_desc(2, "evot200", "02:00:00:00:00:99")])))
    inner = arp_request(H3)
    app.packet_in(FakeEvent(FakeMsg(datapath=dp, match={"in_port": 2}, data=frb.pack(frb.broadcast(inner, 200, 200, 1)))))
    app.tick(EventTick(periodic=True))
    (report,) = [e for e in sink.events if isinstance(e, BroadcastCounts)]
    as_json = json.loads(json.dumps(event_as_dict(report)))
    assert as_json["by_root"] == {f"{200:032x}": 1}
    assert as_json["recent"] == [{"seq": 1, "root": f"{200:032x}", "frame": frame_digest(inner),
                                  "ethertype": 0x0806, "peer": f"{200:032x}", "hop_count": 1}]
    app.tick(EventTick(periodic=True))
    assert len([e for e in sink.events if isinstance(e, BroadcastCounts)]) == 1  # unchanged: not again


async def test_the_daemon_status_shows_the_latest_broadcast_counts() -> None:
    fleet = Fleet(1, clock=VirtualClock())
    await fleet.start()
    try:
        node = fleet.nodes[1]
        assert node.status()["overlays"]["ov1"]["broadcasts"] == {
            "received": 0, "own_returned": 0, "by_root": {}, "by_ethertype": {}, "recent": []}
        seen = BroadcastReceived(1, nid(2), "00" * 8, 0x0806, nid(3), 2)
        fleet.platforms[1].sdn.emit(BroadcastCounts("ov1", 1, 0, {nid(2): 1}, (seen,), {0x0806: 1}))
        counts = node.status
        await wait_until(lambda: counts()["overlays"]["ov1"]["broadcasts"]["received"] == 1, clock=fleet.clock)
        broadcasts = node.status()["overlays"]["ov1"]["broadcasts"]
        assert broadcasts["by_root"] == {f"{nid(2):032x}": 1}
        assert broadcasts["by_ethertype"] == {"0x0806": 1}
        assert broadcasts["recent"] == [{"seq": 1, "root": f"{nid(2):032x}", "frame": "00" * 8, "ethertype": 0x0806,
                                         "peer": f"{nid(3):032x}", "hop_count": 2}]
    finally:
        await fleet.stop_all()
