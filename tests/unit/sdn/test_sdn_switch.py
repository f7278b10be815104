"""Bounded Flood switch logic, alone and in a fake network of 16 switches (E1 in miniature)."""

from __future__ import annotations

import random

import pytest

from evio.ids import sorted_clockwise
from evio.sdn import frb, garp, neighbor_guard
from evio.sdn.flow_actions import AddFlow, DeleteFlowsOfPort, DeleteFlowsToMac, DeleteGuardFlow, FlowMatch, PacketOut
from evio.sdn.learning_table import MOVE_HOLD
from evio.sdn.switch import FLOW_HARD_TIMEOUT, BoundedFloodSwitch, Drop, PortKind, SwitchPort
from evio.testing.fake_flow_table import FakeNetwork, host_mac, symphony_network
from evio.testing.frames import H1, H2, H3, arp_reply, arp_request, eth


def switch_with_ports(node_id: int = 100) -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(node_id, "02:aa:00:00:00:01", flow_idle_timeout=30)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, H1), now=0)
    sw.port_added(SwitchPort(2, "app0", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    sw.port_added(SwitchPort(11, "t300", PortKind.PEER, 300), now=0)
    return sw


def frbs_by_port(actions: list, frb_type: frb.FrbType = frb.FrbType.BROADCAST) -> dict[int, frb.FrbFrame]:
    frames = [frb.parse(a.data) for a in actions if isinstance(a, PacketOut) and a.data[12:14] == b"\xc0\xc0"]
    ports = [a.port for a in actions if isinstance(a, PacketOut) and a.data[12:14] == b"\xc0\xc0"]
    return {p: f for p, f in zip(ports, frames) if f.header.frb_type is frb_type}


# ---------------------------------------------------------------- one switch


def test_broadcast_from_leaf_goes_to_other_leaves_and_to_peers_with_root_bounds() -> None:
    sw = switch_with_ports(100)
    frame = arp_request(H1)
    actions = sw.packet_in(1, frame, now=1)
    assert PacketOut(2, frame) in actions
    assert not any(isinstance(a, PacketOut) and a.port == 1 for a in actions)
    frbs = frbs_by_port(actions)
    assert set(frbs) == {10, 11}
    # Clockwise from 100: 200 then 300; 200 is bounded by 300, the last by the root.
    assert (frbs[10].header.root_nid, frbs[10].header.bound_nid) == (100, 300)
    assert (frbs[11].header.root_nid, frbs[11].header.bound_nid) == (100, 100)
    assert all(f.header.hop_count == 1 and f.payload == frame for f in frbs.values())
    # Its header goes the other way round too: counter-clockwise from 100, 300 (bounded by 200), then 200.
    reverse = frbs_by_port(actions, frb.FrbType.BROADCAST_REVERSE)
    assert {p: (f.header.root_nid, f.header.bound_nid) for p, f in reverse.items()} == {11: (100, 200), 10: (100, 100)}
    assert all(f.header.hop_count == 1 and f.payload == frame[:14] for f in reverse.values())


def test_frb_from_peer_is_delivered_to_leaves_and_forwarded_within_bound_only() -> None:
    sw = BoundedFloodSwitch(200, "02:aa:00:00:00:02")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF), now=0)
    for port, peer in ((10, 100), (11, 250), (12, 300), (13, 400)):
        sw.port_added(SwitchPort(port, f"t{peer}", PortKind.PEER, peer), now=0)
    inner = arp_request(H3)
    wire = frb.pack(frb.broadcast(inner, root_nid=100, bound_nid=350, hop_count=1))
    actions = sw.packet_in(10, wire, now=1)
    assert PacketOut(1, inner) in actions
    frbs = frbs_by_port(actions)
    # Responsible for [200, 350): 250 (bound 300) and 300 (bound 350); not 400, not back to 100.
    assert set(frbs) == {11, 12}
    assert frbs[11].header.bound_nid == 300 and frbs[12].header.bound_nid == 350
    assert all(f.header.hop_count == 2 and f.header.root_nid == 100 for f in frbs.values())
    entry = sw.learning.lookup(H3, now=1)
    assert entry is not None and (entry.port, entry.root) == (10, 100)
    assert sw.broadcasts_seen == 1


def test_unicast_to_known_mac_installs_flow_and_its_way_back_and_sends_packet() -> None:
    sw = switch_with_ports()
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1)), now=1)
    frame = arp_reply(H1, H2)
    actions = sw.packet_in(1, frame, now=2)
    # H1 was just heard on port 1: H2's answer needs no packet-in of its own (issue 25, the first packet).
    assert actions == [PacketOut(10, frame),
                       AddFlow(FlowMatch(1, H1, H2), 10, 30, hard_timeout=FLOW_HARD_TIMEOUT, counted=True),
                       AddFlow(FlowMatch(10, H2, H1), 1, int(MOVE_HOLD), hard_timeout=FLOW_HARD_TIMEOUT, counted=True)]
    # Both are booked on behalf of port 1, whose frame caused them: port 10 spent nothing. The way back enters by
    # a tunnel: it idles out within the move hold, as every flow from a peer does.
    assert (sw.flows.count(1), sw.flows.count(10)) == (2, 0)


def test_unknown_unicast_is_flooded_with_bounds_not_dropped() -> None:
    sw = switch_with_ports()
    frame = eth(H3, H1)
    actions = sw.packet_in(1, frame, now=1)
    assert set(frbs_by_port(actions)) == {10, 11}
    assert PacketOut(2, frame) in actions
    assert not any(isinstance(a, AddFlow) for a in actions)


def test_unknown_unicast_from_a_peer_is_flooded_onward_rooted_here() -> None:
    """A path that ended here (its next hop went with churn): the sender still sends through us."""
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, H1), now=0)
    for port, peer in ((10, 200), (11, 300), (12, 400)):
        sw.port_added(SwitchPort(port, f"t{peer}", PortKind.PEER, peer), now=0)
    frame = eth(H3, H2)
    actions = sw.packet_in(11, frame, now=1)  # from 300, for H3, which nobody taught us
    assert PacketOut(1, frame) in actions
    frbs = frbs_by_port(actions)
    # Rooted here, with the root bounds: the whole ring is covered, the sender (300) included.
    assert set(frbs) == {10, 11, 12}
    assert [(frbs[p].header.root_nid, frbs[p].header.bound_nid) for p in (10, 11, 12)] == [(100, 300), (100, 400), (100, 100)]
    assert all(f.payload == frame for f in frbs.values())
    assert not any(isinstance(a, AddFlow) for a in actions) and sw.transit_floods == 1


def test_unicast_from_a_peer_whose_destination_we_learned_on_that_peer_is_flooded_not_bounced() -> None:
    sw = switch_with_ports(100)
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1)), now=1)  # H2 learned via port 10
    frame = eth(H2, H3)
    actions = sw.packet_in(10, frame, now=2)  # ...and 200 sends H2's frames to us: one view is stale
    assert not any(isinstance(a, AddFlow) for a in actions)
    assert set(frbs_by_port(actions)) == {10, 11} and sw.drops[Drop.HAIRPIN] == 1 and sw.transit_floods == 1


def test_own_frame_flooded_back_is_passed_on_but_not_delivered_or_learned() -> None:
    sw = BoundedFloodSwitch(200, "02:aa:00:00:00:02")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF), now=0)
    for port, peer in ((10, 100), (11, 300)):
        sw.port_added(SwitchPort(port, f"t{peer}", PortKind.PEER, peer), now=0)
    sw.packet_in(1, arp_request(H1), now=1)  # H1 lives here
    mine = eth(H3, H1)
    actions = sw.packet_in(10, frb.pack(frb.broadcast(mine, root_nid=100, bound_nid=100, hop_count=1)), now=2)
    entry = sw.learning.lookup(H1, now=2)
    assert entry is not None and entry.port == 1  # still local
    assert PacketOut(1, mine) not in actions and sw.drops[Drop.OWN_FRAME] == 1
    assert set(frbs_by_port(actions)) == {11}  # its part of the ring still gets it


def test_a_flooded_unicast_frame_does_not_move_a_sender_already_known() -> None:
    """A transit flood is rooted at the node that lost the way, and may arrive the long way round:
    moving the sender on it deleted the flows of a working path (the multi-hop collapse)."""
    sw = switch_with_ports(100)
    sw.packet_in(10, eth(H1, H2), now=1)  # H2's frames come in by port 10
    flooded = frb.pack(frb.broadcast(eth(H3, H2), root_nid=300, bound_nid=100, hop_count=2))
    actions = sw.packet_in(11, flooded, now=2)  # a copy flooded by 300 reaches us by port 11
    entry = sw.learning.lookup(H2, now=2)
    assert entry is not None and entry.port == 10
    assert not any(isinstance(a, DeleteFlowsToMac) for a in actions)
    assert sw.unicast_floods_not_learned == 1
    # A broadcast from H2 arriving the same way still moves it (a host that really moved says so).
    sw.packet_in(11, frb.pack(frb.broadcast(arp_request(H2), root_nid=300, bound_nid=100, hop_count=2)), now=3)
    moved = sw.learning.lookup(H2, now=3)
    assert moved is not None and moved.port == 11


def test_a_flooded_unicast_frame_teaches_a_sender_not_known() -> None:
    sw = switch_with_ports(100)
    sw.packet_in(11, frb.pack(frb.broadcast(eth(H3, H2), root_nid=300, bound_nid=100, hop_count=2)), now=1)
    entry = sw.learning.lookup(H2, now=1)
    assert entry is not None and entry.port == 11 and sw.unicast_floods_not_learned == 0


def test_unicast_from_peer_to_local_mac_installs_flow_and_learns_source() -> None:
    sw = switch_with_ports()
    sw.packet_in(1, arp_request(H1), now=1)
    frame = arp_reply(H2, H1)
    actions = sw.packet_in(11, frame, now=2)
    # From a peer, delivered to a local host, which answers at once: the way back goes in before the frame,
    # or the answer would reach the switch before the FlowMod did (and come to the controller after all). The
    # flow from the peer idles out within the move hold (its place speaks while it lives); the way back
    # enters by the leaf and idles out as leaf flows do.
    assert actions == [AddFlow(FlowMatch(11, H2, H1), 1, int(MOVE_HOLD), hard_timeout=FLOW_HARD_TIMEOUT),
                       AddFlow(FlowMatch(1, H1, H2), 11, 30, hard_timeout=FLOW_HARD_TIMEOUT), PacketOut(1, frame)]
    entry = sw.learning.lookup(H2, now=2)
    assert entry is not None and entry.port == 11
    assert (sw.flows.count(11), sw.flows.count(1)) == (2, 0)  # the peer's frame: the peer's share


def test_peer_port_removed_deletes_its_flows_and_learned_macs_at_once() -> None:
    sw = switch_with_ports()
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1)), now=1)
    assert sw.learning.lookup(H2, now=1) is not None
    # Its flows, and the guard flows of the tunnel port (decision 0068 amended: review21k K1-K3).
    assert sw.port_removed(10, now=2) == [DeleteFlowsOfPort(10),
                                          *(DeleteGuardFlow(f) for f in sorted(neighbor_guard.tunnel_flows(10), key=repr))]
    assert sw.learning.lookup(H2, now=2) is None
    assert 200 not in sw.peer_ports()


def test_mac_moving_to_another_port_deletes_flows_towards_it() -> None:
    sw = switch_with_ports()
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1)), now=1)
    actions = sw.packet_in(2, arp_request(H2), now=2)  # H2 now sits on a local app port
    assert DeleteFlowsToMac(H2) in actions


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff" * 6 + frb.parse_mac(H2) + b"\xc0\xc0" + b"\x00" * 10, frb.FrbReason.TOO_SHORT),
        (frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1))[:49] + b"\x00" * 5, frb.FrbReason.TRUNCATED_PAYLOAD),
    ],
)
def test_malformed_frb_is_dropped_and_counted(data: bytes, reason: frb.FrbReason) -> None:
    sw = switch_with_ports()
    assert sw.packet_in(10, data, now=1) == []
    assert sw.drops[Drop.MALFORMED_FRB] == 1
    assert sw.frb_parse_errors[reason] == 1


@pytest.mark.parametrize("frb_type", [6, 9, 0xFF])
def test_an_frb_of_a_newer_type_is_ignored_and_counted_apart_from_malformed_ones(frb_type: int) -> None:
    sw = switch_with_ports()
    data = frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1))
    newer = data[:47] + bytes([frb_type]) + data[48:]
    assert sw.packet_in(10, newer, now=1) == []  # neither delivered nor forwarded
    assert sw.drops == {Drop.UNKNOWN_FRB_TYPE: 1}
    assert sw.frb_parse_errors == {}


def test_bad_frames_are_dropped_and_counted_never_raised() -> None:
    sw = switch_with_ports(100)
    assert sw.packet_in(10, b"\x01\x02", now=1) == []
    assert sw.packet_in(99, arp_request(H1), now=1) == []
    assert sw.packet_in(1, frb.pack(frb.broadcast(arp_request(H2), 200, 100, 1)), now=1) == []
    assert sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), 100, 100, 3)), now=1) == []
    assert sw.packet_in(10, arp_request(H2), now=1) == []
    assert sw.packet_in(1, eth(H2, "01:00:5e:00:00:01"), now=1) == []
    assert sw.drops == {
        Drop.GROUP_SOURCE: 1,
        Drop.RUNT: 1,
        Drop.UNKNOWN_PORT: 1,
        Drop.FRB_ON_LEAF: 1,
        Drop.OWN_BROADCAST: 1,
        Drop.GROUP_FROM_PEER: 1,
    }


def test_new_peer_port_gets_a_leaf_announcement_of_local_macs() -> None:
    sw = switch_with_ports(100)
    sw.packet_in(2, arp_request(H3), now=1)
    actions = sw.port_added(SwitchPort(12, "t400", PortKind.PEER, 400), now=2)
    (announce,) = frbs_by_port(actions, frb.FrbType.LEAF_ANNOUNCE).values()
    assert announce.header.frb_type is frb.FrbType.LEAF_ANNOUNCE
    assert set(announce.leaf_macs) == {H1, H3}
    # The receiving side learns them as hosted by node 100.
    peer = BoundedFloodSwitch(400, "02:aa:00:00:00:04")
    peer.port_added(SwitchPort(5, "t100", PortKind.PEER, 100), now=0)
    answer = peer.packet_in(5, frb.pack(announce), now=3)
    assert peer.learning.leaf_macs(100) == {H1, H3}
    # The first announcement by a port is answered with the receiver's own (see the next test).
    assert [(a.port, frb.parse(a.data).header.root_nid) for a in answer if isinstance(a, PacketOut)] == [(5, 400)]


def test_an_announcement_lost_to_a_port_not_yet_on_the_peers_bridge_is_made_good_by_its_answer() -> None:
    """The two ends of a new link get their ports 0.02-0.2 s apart; the first end's announcement reaches a TAP
    no bridge reads yet. Answering the second end's announcement teaches the first end's MACs all the same, so
    a stand-in link carries their frames at once instead of the dead link it replaces (E4)."""
    a = BoundedFloodSwitch(100, "02:aa:00:00:00:01")
    a.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, H1), now=0)
    b = BoundedFloodSwitch(300, "02:aa:00:00:00:03")
    b.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, H3), now=0)
    b.port_added(SwitchPort(7, "t200", PortKind.PEER, 200), now=0)
    # b reached H1 through 200 (2 hops), the node that is about to die; a and b get a direct link.
    b.packet_in(7, frb.pack(frb.broadcast(arp_request(H1), root_nid=100, bound_nid=300, hop_count=2)), now=1)
    b.packet_in(1, eth(H1, H3), now=1.5)  # a flow from H3 to H1, by 200
    a.port_added(SwitchPort(9, "t300", PortKind.PEER, 300), now=5)  # a's announcement: lost, b has no port yet
    from_b = b.port_added(SwitchPort(8, "t100", PortKind.PEER, 100), now=5.1)
    (b_announce,) = [x for x in from_b if isinstance(x, PacketOut)]
    answer = a.packet_in(9, b_announce.data, now=5.11)
    (a_announce,) = [x for x in answer if isinstance(x, PacketOut) and x.port == 9]
    moved = b.packet_in(8, a_announce.data, now=5.12)
    entry = b.learning.lookup(H1, now=5.12)
    assert entry is not None and (entry.port, entry.hops) == (8, 1)
    assert DeleteFlowsToMac(H1) in moved  # the flow by 200 goes: H3's next frame takes the direct link
    # b answered too (a's answer was the first it heard by that port); a does not answer again, nor b later.
    (b_answer,) = [x for x in moved if isinstance(x, PacketOut)]
    assert not [x for x in a.packet_in(9, b_answer.data, now=5.13) if isinstance(x, PacketOut)]
    assert not [x for x in b.packet_in(8, a_announce.data, now=5.14) if isinstance(x, PacketOut)]
    # A port that comes again (a new tunnel under the name) is answered again.
    b.port_removed(8, now=6)
    b.port_added(SwitchPort(8, "t100", PortKind.PEER, 100), now=6)
    assert [x for x in b.packet_in(8, a_announce.data, now=6.1) if isinstance(x, PacketOut)]


def test_link_check_is_answered_with_link_ack() -> None:
    sw = switch_with_ports(100)
    check = frb.pack(frb.link_check(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:02"), 200))
    (out,) = sw.packet_in(10, check, now=1)
    assert isinstance(out, PacketOut) and out.port == 10
    assert frb.parse(out.data).header.frb_type is frb.FrbType.LINK_ACK


# ---------------------------------------------------------------- 16 switches (E1 in miniature)


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_arp_broadcast_reaches_every_node_exactly_once_and_the_reply_comes_back(seed: int) -> None:
    net, ids, _ = symphony_network(16, seed)
    src, dst = ids[0], ids[9]
    request = arp_request(host_mac(net, src))
    net.inject(src, 1, request)

    for nid in ids:
        got = net.nodes[nid].received[1]
        assert got == ([] if nid == src else [request]), f"node {nid:x}"
        assert net.nodes[nid].switch.broadcasts_seen == (0 if nid == src else 1)

    reply = arp_reply(host_mac(net, dst), host_mac(net, src))
    net.inject(dst, 1, reply)
    assert net.nodes[src].received[1] == [reply]
    assert all(net.nodes[n].received[1] == ([] if n == src else [request]) for n in ids if n != src)

    # Flows were installed along the path: follow them from dst to src.
    match_src, match_dst = host_mac(net, dst), host_mac(net, src)
    node, in_port, hops = dst, 1, 0
    while node != src:
        flow = net.nodes[node].table.flows[FlowMatch(in_port, match_src, match_dst)]
        (far_node, far_port) = net.tunnels[(node, flow.out_port)]
        node, in_port, hops = far_node, far_port, hops + 1
    assert net.nodes[src].table.flows[FlowMatch(in_port, match_src, match_dst)].out_port == 1
    assert hops >= 1

    # A second reply is switched by the flows alone: no controller involved.
    packet_ins = {n: net.nodes[n].packet_ins for n in ids}
    net.inject(dst, 1, reply)
    assert net.nodes[src].received[1] == [reply, reply]
    assert {n: net.nodes[n].packet_ins for n in ids} == packet_ins


def test_removed_tunnel_takes_its_flows_and_learned_macs_with_it() -> None:
    net, ids, _ = symphony_network(16, seed=3)
    src, dst = ids[0], ids[5]
    net.inject(src, 1, arp_request(host_mac(net, src)))
    net.inject(dst, 1, arp_reply(host_mac(net, dst), host_mac(net, src)))
    dst_node = net.nodes[dst]
    (flow,) = [f for f in dst_node.table.flows.values() if f.match.in_port == 1]
    far_node, _ = net.tunnels[(dst, flow.out_port)]
    port = flow.out_port
    assert dst_node.switch.learning.macs_on_port(port)

    far_port = net.port_towards(far_node, dst)
    net.disconnect(dst, far_node)
    assert dst_node.table.flows_of_port(port) == []
    assert dst_node.switch.learning.macs_on_port(port) == frozenset()
    assert net.nodes[far_node].table.flows_of_port(far_port) == []
    assert net.nodes[far_node].switch.learning.macs_on_port(far_port) == frozenset()


def test_after_a_tunnel_goes_a_new_broadcast_still_reaches_everyone_at_most_once() -> None:
    net, ids, links = symphony_network(16, seed=11)
    a, b = sorted(links)[3]
    net.disconnect(a, b)
    src = ids[2]
    request = arp_request(host_mac(net, src))
    net.inject(src, 1, request)
    counts = [len(net.nodes[n].received[1]) for n in ids if n != src]
    assert max(counts) == 1  # never twice, whatever the graph


def test_idle_flows_expire_and_traffic_then_goes_through_the_controller_again() -> None:
    net, ids, _ = symphony_network(16, seed=5)
    src, dst = ids[1], ids[12]
    net.inject(src, 1, arp_request(host_mac(net, src)))
    net.inject(dst, 1, arp_reply(host_mac(net, dst), host_mac(net, src)))
    assert any(net.nodes[n].table.flows for n in ids)
    net.advance(31)
    assert not any(net.nodes[n].table.flows for n in ids)


def test_every_node_is_reached_in_clockwise_order_of_bounds() -> None:
    # Sanity of the graph builder: the ring closes through successors.
    _, ids, links = symphony_network(16, seed=2)
    ring = sorted_clockwise(ids[0], ids)
    for i, nid in enumerate(ring):
        assert tuple(sorted((nid, ring[(i + 1) % len(ring)]))) in links


# ---------------------------------------------------------------- IP relocation (E2 in miniature)


OVERLAY_IP = "10.10.0.2"


def talk(net: FakeNetwork, a: int, a_port: int, mac_a: str, b: int, b_port: int, mac_b: str) -> None:
    """a ARPs for b (a bounded flood), b replies, a sends one frame: flows are installed on the path."""
    net.inject(a, a_port, arp_request(mac_a))
    net.inject(b, b_port, arp_reply(mac_b, mac_a))
    net.inject(a, a_port, eth(mac_b, mac_a))


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_ip_moved_to_another_node_and_mac_is_reached_at_once_after_its_gratuitous_arp(seed: int) -> None:
    net, ids, _ = symphony_network(16, seed)
    n1, n2, n3 = ids[0], ids[5], ids[11]
    m1, m2, m3 = host_mac(net, n1), host_mac(net, n2), host_mac(net, n3)
    talk(net, n1, 1, m1, n2, 1, m2)
    assert any(f.match.eth_dst == m2 for f in net.nodes[n1].table.flows.values())
    for node in net.nodes.values():
        node.received[1].clear()

    announcement = garp.gratuitous_arp(m3, OVERLAY_IP)  # n3's host took the address over
    net.inject(n3, 1, announcement)
    (heard,) = net.nodes[n1].received[1]
    arp = garp.parse_arp(heard)
    assert arp is not None and arp.is_gratuitous and (str(arp.sender_ip), arp.sender_mac) == (OVERLAY_IP, m3)

    # n1's ARP cache now says m3: the next echo reaches n3 with no time passing (no idle timeouts).
    echo = eth(m3, m1)
    net.inject(n1, 1, echo)
    assert net.nodes[n3].received[1] == [echo]
    assert net.nodes[n2].received[1] == [announcement]


@pytest.mark.parametrize("seed", [1, 7, 42, 99])
def test_a_mac_moving_to_another_node_has_its_stale_flows_deleted_wherever_the_frb_goes(seed: int) -> None:
    """The same MAC (a migrated VM or container) moves from n2 to n3 and announces itself."""
    net, ids, _ = symphony_network(16, seed)
    n1, n2, n3 = ids[0], ids[5], ids[11]
    m1, moving = host_mac(net, n1), "02:00:00:00:be:ef"
    old_port, new_port = net.add_leaf(n2, "app"), net.add_leaf(n3, "app")
    talk(net, n1, 1, m1, n2, old_port, moving)
    assert net.nodes[n2].received[old_port][-1] == eth(moving, m1)
    had_flows = {n for n in ids if any(f.match.eth_dst == moving for f in net.nodes[n].table.flows.values())}
    assert n1 in had_flows and len(had_flows) >= 2

    net.inject(n3, new_port, garp.gratuitous_arp(moving, OVERLAY_IP))
    # Its old place spoke just now (the talk): a node that heard it there takes the move once it has been
    # silent for the move hold (a member could be claiming the MAC; docs/design.md, "Who may move a MAC").
    net.advance(MOVE_HOLD)
    # Every flow towards the MAC that is left leads where the MAC is now learned.
    for nid in ids:
        node = net.nodes[nid]
        entry = node.switch.learning.lookup(moving, net.now)
        assert entry is not None, f"node {nid:x} did not hear the announcement"
        stale = [f for f in node.table.flows.values() if f.match.eth_dst == moving and f.out_port != entry.port]
        assert stale == [], f"node {nid:x}"

    before = len(net.nodes[n2].received[old_port])
    echo = eth(moving, m1, payload=b"after the move".ljust(46, b"."))
    net.inject(n1, 1, echo)
    assert net.nodes[n3].received[new_port][-1] == echo
    assert len(net.nodes[n2].received[old_port]) == before


def test_malformed_frbs_from_one_peer_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    sw = switch_with_ports()
    junk = b"\xff" * 6 + frb.parse_mac(H2) + b"\xc0\xc0" + b"\x00" * 10
    with caplog.at_level("WARNING", logger="evio.sdn.switch"):
        for t in range(10):
            sw.packet_in(10, junk, now=float(t))
        sw.packet_in(10, junk, now=61.0)
    assert sw.drops[Drop.MALFORMED_FRB] == 11
    assert sum("malformed FRB" in r.getMessage() for r in caplog.records) == 2


# ---------------------------------------------------------------- property: over random overlays


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=12),
    seed=st.integers(min_value=0, max_value=2**32),
    failures=st.integers(min_value=0, max_value=4),
)
def test_any_overlay_delivers_each_broadcast_at_most_once_and_a_ring_exactly_once(
    n: int, seed: int, failures: int
) -> None:
    net, ids, links = symphony_network(n, seed, long_distance=min(2, n - 2))
    rng = random.Random(seed)
    src = rng.choice(ids)
    request = arp_request(host_mac(net, src))
    net.inject(src, 1, request)
    assert all(len(net.nodes[x].received[1]) == (0 if x == src else 1) for x in ids)

    # Take some links away (a successor link too, possibly): still never twice.
    for a, b in rng.sample(sorted(links), min(failures, len(links))):
        net.disconnect(a, b)
    for node in net.nodes.values():
        node.received[1].clear()
    net.inject(src, 1, request)
    assert all(len(net.nodes[x].received[1]) <= (0 if x == src else 1) for x in ids)



@pytest.mark.parametrize("seed", [3, 8, 21])
def test_a_path_cut_in_the_middle_by_churn_heals_on_the_next_frame(seed: int) -> None:
    """E8's black hole: a transit node loses its link towards the destination while the source keeps its
    flow through that node. The next frame must still arrive (the transit node floods it onward).
    Two successor links per node, as in E8, so one cut link does not partition the ring."""
    net, ids, links = symphony_network(16, seed)
    for i, nid in enumerate(ids):
        second = tuple(sorted((nid, ids[(i + 2) % len(ids)])))
        if second not in links:
            links.add(second)  # type: ignore[arg-type]
            net.connect(*second)
    for src, dst in ((a, b) for a in ids[:4] for b in ids[8:12]):
        s_mac, d_mac = host_mac(net, src), host_mac(net, dst)
        net.inject(src, 1, arp_request(s_mac))
        net.inject(dst, 1, arp_reply(d_mac, s_mac))
        net.inject(src, 1, eth(d_mac, s_mac))
        first = net.nodes[src].table.flows.get(FlowMatch(1, s_mac, d_mac))
        assert first is not None
        hop = net.tunnels[(src, first.out_port)][0]
        onward = net.nodes[hop].table.flows.get(FlowMatch(net.tunnels[(src, first.out_port)][1], s_mac, d_mac))
        if hop == dst or onward is None:
            continue  # no transit node to cut behind
        beyond = net.tunnels[(hop, onward.out_port)][0]
        if beyond == ids[(ids.index(hop) + 1) % len(ids)]:
            continue  # not a link churn takes while the ring holds: the ring repairs its first successor link
        net.disconnect(hop, beyond)
        before = len(net.nodes[dst].received[1])
        net.inject(src, 1, eth(d_mac, s_mac, payload=b"y" * 46))
        assert len(net.nodes[dst].received[1]) == before + 1, f"frame lost behind {hop:x} (cut {hop:x}-{beyond:x})"
        assert net.nodes[hop].switch.transit_floods >= 1
        # The answer teaches the path again: from then on the flows carry it.
        net.inject(dst, 1, eth(s_mac, d_mac))
        net.inject(src, 1, eth(d_mac, s_mac, payload=b"z" * 46))
        assert len(net.nodes[dst].received[1]) == before + 2
        return
    pytest.fail("no pair with a transit node on its path")


def test_a_transit_flood_does_not_turn_the_path_behind_it_around() -> None:
    """The multi-hop collapse (docs/performance.md): a transit node that lost its way floods the
    sender's frame rooted at itself; the node between it and the sender got that copy from the transit
    node's side, and learning the sender there sent the replies back into the flood, hairpin after
    hairpin. A ring of 10, s -> p1 -> p2 -> d."""
    net, ids, _ = symphony_network(10, seed=5, long_distance=0)
    s, p1, p2, d = ids[0], ids[1], ids[2], ids[3]
    sm, dm = host_mac(net, s), host_mac(net, d)
    net.inject(s, 1, arp_request(sm))
    net.inject(d, 1, arp_reply(dm, sm))
    net.inject(s, 1, eth(dm, sm))
    toward_s = net.port_towards(p1, s)
    entry = net.nodes[p1].switch.learning.lookup(sm, net.now)
    assert entry is not None and entry.port == toward_s
    net.forget(p2, dm)  # p2 lost its way on to d
    net.inject(s, 1, eth(dm, sm, payload=b"y" * 46))
    assert net.nodes[p2].switch.transit_floods >= 1
    entry = net.nodes[p1].switch.learning.lookup(sm, net.now)
    assert entry is not None and entry.port == toward_s, "the sender moved behind the transit node"
    floods = sum(net.nodes[n].switch.transit_floods for n in ids)
    received = len(net.nodes[s].received[1])
    net.inject(d, 1, eth(sm, dm))  # the reply goes back along the path, not into another flood
    assert len(net.nodes[s].received[1]) == received + 1
    assert sum(net.nodes[n].switch.transit_floods for n in ids) == floods


# ---------------------------------------------------------------- learning takes the short way round


def learned_path(net: FakeNetwork, start: int, mac: str) -> list[int]:
    """The nodes a frame for `mac` crosses from `start`, following each node's learned port."""
    path, node = [start], start
    while True:
        entry = net.nodes[node].switch.learning.lookup(mac, net.now)
        assert entry is not None, f"node {node:x} does not know {mac}"
        if entry.local:
            return path
        node, _ = net.tunnels[(node, entry.port)]
        assert node not in path, f"loop: {[f'{n:x}' for n in path + [node]]}"
        path.append(node)


def overlay_distances(ids: list[int], links: set[tuple[int, int]], src: int) -> dict[int, int]:
    neighbours: dict[int, set[int]] = {n: set() for n in ids}
    for a, b in links:
        neighbours[a].add(b)
        neighbours[b].add(a)
    dist, frontier = {src: 0}, [src]
    while frontier:
        frontier = [m for n in frontier for m in sorted(neighbours[n]) if m not in dist and not dist.update({m: dist[n] + 1})]
    return dist


@pytest.mark.parametrize("n", [10, 18])
def test_in_a_ring_of_successors_every_learned_path_is_a_shortest_one(n: int) -> None:
    """One orientation of Bounded Flood reaches every node clockwise: alone, a node learned a host 3 hops
    clockwise 15 hops the other way (docs/performance.md). The reverse copy teaches the short way."""
    net, ids, _ = symphony_network(n, seed=5, long_distance=0)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if a != b:
                hops = len(learned_path(net, a, host_mac(net, b))) - 1
                assert hops == min((j - i) % n, (i - j) % n), f"{i} -> {j}"


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_with_long_distance_links_learned_paths_are_loop_free_and_short(seed: int) -> None:
    net, ids, links = symphony_network(24, seed, long_distance=2)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    stretch = []
    for b in ids:
        shortest = overlay_distances(ids, links, b)
        for a in ids:
            if a != b:
                hops = len(learned_path(net, a, host_mac(net, b))) - 1
                entry = net.nodes[a].switch.learning.lookup(host_mac(net, b), net.now)
                assert entry is not None and entry.hops is not None and hops <= entry.hops  # never longer than taught
                stretch.append(hops - shortest[a])
    assert min(stretch) >= 0 and sum(stretch) / len(stretch) < 1.0


def test_traffic_and_more_broadcasts_do_not_turn_a_short_path_around() -> None:
    """The flap the lab showed: a unicast packet-in moved a MAC the short way, the next broadcast the long
    way back, and every move deleted the flows towards it. Now nothing moves."""
    net, ids, _ = symphony_network(12, seed=5, long_distance=0)
    macs = {nid: host_mac(net, nid) for nid in ids}
    for nid in ids:
        net.inject(nid, 1, arp_request(macs[nid]))
    learned = {(a, b): net.nodes[a].switch.learning.lookup(macs[b], net.now) for a in ids for b in ids}
    for a in ids:
        for b in ids:
            if a != b:
                net.inject(a, 1, eth(macs[b], macs[a]))
    for nid in ids:
        net.advance(1)
        net.inject(nid, 1, arp_request(macs[nid]))
    for (a, b), before in learned.items():
        after = net.nodes[a].switch.learning.lookup(macs[b], net.now)
        assert before is not None and after is not None and (after.port, after.hops) == (before.port, before.hops)
    assert sum(net.nodes[n].switch.longer_paths_held for n in ids) > 0


def test_a_peer_cannot_claim_to_be_nearer_a_root_than_one_hop_beyond_itself() -> None:
    sw = switch_with_ports(100)  # 200 on port 10, 300 on port 11
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2), root_nid=200, bound_nid=200, hop_count=1)), now=1)
    # 300 forwards a copy of a broadcast by H2's root 200, claiming it is 1 hop old: at least 2, so 200's own stays.
    lie = frb.pack(frb.broadcast(arp_request(H2), root_nid=200, bound_nid=100, hop_count=1))
    actions = sw.packet_in(11, lie, now=2)
    entry = sw.learning.lookup(H2, now=2)
    assert entry is not None and (entry.port, entry.hops) == (10, 1)
    assert sw.hop_counts_raised == 1 and not any(isinstance(a, DeleteFlowsToMac) for a in actions)


def test_a_shorter_copy_moves_a_mac_a_longer_one_only_once_the_short_one_is_unconfirmed() -> None:
    sw = switch_with_ports(100)
    # Copies of 500's floods reach 100 by 200 or 300 only counter-clockwise (500 -> 300 -> 200 -> 100).
    far = frb.pack(frb.broadcast(arp_request(H2)[:14], 500, 100, 6, frb.FrbType.BROADCAST_REVERSE))
    near = frb.pack(frb.broadcast(arp_request(H2)[:14], 500, 100, 3, frb.FrbType.BROADCAST_REVERSE))
    sw.packet_in(11, far, now=1)
    assert DeleteFlowsToMac(H2) in sw.packet_in(10, near, now=2)  # shorter: moved
    assert not any(isinstance(a, DeleteFlowsToMac) for a in sw.packet_in(11, far, now=3))  # longer: held
    assert sw.learning.lookup(H2, now=3).port == 10  # type: ignore[union-attr]
    # Within the unicast hold of the confirming copy, a packet-in does not move it either.
    assert sw.packet_in(11, eth(H1, H2), now=2 + sw.learning.unicast_hold / 2)[0] == PacketOut(1, eth(H1, H2))
    assert sw.learning.lookup(H2, now=2.5).port == 10  # type: ignore[union-attr]
    hold = sw.learning.path_hold
    assert DeleteFlowsToMac(H2) in sw.packet_in(11, far, now=2 + hold)  # the short way unconfirmed: the copies' way wins
    # A different root is a host that moved: it moves, however long its way, once its old place has been
    # silent for the move hold (the far copy at 2 + hold was the last to speak for it).
    moved = frb.pack(frb.broadcast(arp_request(H2), root_nid=300, bound_nid=100, hop_count=9))
    sw.packet_in(11, moved, now=2 + hold + MOVE_HOLD)  # an adjacent root speaks over its own link
    entry = sw.learning.lookup(H2, now=2 + hold + MOVE_HOLD)
    assert entry is not None and (entry.port, entry.root, entry.hops) == (11, 300, 9)


def test_reverse_copies_are_learned_from_and_passed_on_but_never_delivered() -> None:
    sw = BoundedFloodSwitch(200, "02:aa:00:00:00:02")
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF), now=0)
    for port, peer in ((10, 100), (11, 150), (12, 300)):
        sw.port_added(SwitchPort(port, f"t{peer}", PortKind.PEER, peer), now=0)
    header = arp_request(H3)[:14]
    # Counter-clockwise from 300 down to (bound) 100: 200 is responsible for (100, 200], so 150 gets it.
    wire = frb.pack(frb.broadcast(header, 300, 100, 1, frb.FrbType.BROADCAST_REVERSE))
    actions = sw.packet_in(12, wire, now=1)
    assert not any(isinstance(a, PacketOut) and a.port == 1 for a in actions)
    out = frbs_by_port(actions, frb.FrbType.BROADCAST_REVERSE)
    assert {p: (f.header.bound_nid, f.header.hop_count) for p, f in out.items()} == {11: (100, 2)}
    entry = sw.learning.lookup(H3, now=1)
    assert entry is not None and (entry.port, entry.root, entry.hops) == (12, 300, 1)
    assert sw.broadcasts_seen == 0 and sw.reverse_forwarded == 1


def test_long_after_its_last_copy_a_packet_in_by_another_port_moves_a_mac_again() -> None:
    """A link cut beyond the next hop leaves this port up: the sender's frames by a new way heal the path."""
    sw = switch_with_ports(100)
    # Copies of 500's floods reach 100 by 200 or 300 only counter-clockwise (500 -> 300 -> 200 -> 100).
    sw.packet_in(10, frb.pack(frb.broadcast(arp_request(H2)[:14], 500, 100, 3, frb.FrbType.BROADCAST_REVERSE)), now=1)
    hold = sw.learning.move_hold  # a MAC whose root spoke for it: a plain frame by another way waits this long
    assert sw.packet_in(11, eth(H1, H2), now=1 + hold / 2)[0] == PacketOut(1, eth(H1, H2))
    assert sw.learning.lookup(H2, now=1 + hold / 2).port == 10  # type: ignore[union-attr]
    assert DeleteFlowsToMac(H2) in sw.packet_in(11, eth(H1, H2), now=1 + hold)
    assert sw.learning.lookup(H2, now=1 + hold).port == 11  # type: ignore[union-attr]
