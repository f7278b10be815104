"""Flows ahead by destination at every switch (decision 0072): a frame between members' interfaces waits for no
controller on any switch of its path.

Over the fake network (real switch logic, its actions as OpenFlow through a fake table). An intermediate switch
passes the first frame on by a flow `(in_port, eth_dst) -> port, CONTROLLER` and its controller, from the copy,
installs the pair flow and its way back without sending the frame again; the answer and later frames ride the pair
flows. None enters by the port its MAC is on; a port or a MAC that goes takes them; without trust there are none;
their number is capped.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from types import SimpleNamespace

import pytest

from evio.sdn import destination_flows
from evio.sdn.flow_actions import (
    ARP_ANSWER_PRIORITY,
    ARP_ASK_PRIORITY,
    DESTINATION_HAIRPIN_PRIORITY,
    DESTINATION_PRIORITY,
    DestinationMatch,
    FlowMatch,
)
from evio.sdn.neighbor_answers import arp_reply
from evio.sdn.openflow_messages import DESTINATION_COOKIE, EVIO_COOKIE, copied_ahead
from evio.testing.fake_flow_table import CONTROLLER, FakeNetwork, host_mac, ring_network, symphony_network
from evio.testing.frames import arp_request, eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_sdn_proactive_flows import arp_for, certify, packet_ins, trusted_ring


def ahead(net: FakeNetwork, nid: int) -> dict[DestinationMatch, int]:
    """The flows ahead by destination in `nid`'s fake table: match -> out port (besides the copy)."""
    found: dict[DestinationMatch, int] = {}
    for flow in net.nodes[nid].table.entries:
        if flow.priority == DESTINATION_PRIORITY:
            (out,) = [p for p in flow.outputs if p != CONTROLLER]
            assert CONTROLLER in flow.outputs
            found[DestinationMatch(flow.fields["eth_dst"])] = out
    return found


def test_the_intermediate_switch_passes_the_first_frame_on_and_learns_from_its_copy() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, mid, c = ids[0], ids[1], ids[2]  # a -> mid -> c
    from_a, to_c = net.port_towards(mid, a), net.port_towards(mid, c)
    assert ahead(net, mid)[DestinationMatch(macs[c])] == to_c
    before, received = packet_ins(net), len(net.nodes[c].received[1])
    echo, reply = eth(macs[c], macs[a], payload=b"echo" * 16), eth(macs[a], macs[c], payload=b"ping" * 16)
    net.inject(a, 1, echo)
    assert net.nodes[c].received[1][received:] == [echo]  # once: the controller did not send it again
    net.inject(c, 1, reply)
    assert net.nodes[a].received[1][-1] == reply
    asked = {nid: packet_ins(net)[nid] - before[nid] for nid in ids}
    assert asked == {nid: 1 if nid == mid else 0 for nid in ids}
    assert net.nodes[mid].switch.destination_copies == 1  # the one packet-in was the flow's copy, not a wait
    # The copy installed the pair flow and its way back, as a packet-in would: later frames ask nothing.
    flows = net.nodes[mid].table.flows
    assert flows[FlowMatch(from_a, macs[a], macs[c])].out_port == to_c
    assert flows[FlowMatch(to_c, macs[c], macs[a])].out_port == from_a
    net.inject(a, 1, echo)
    assert {nid: packet_ins(net)[nid] - before[nid] for nid in ids} == asked


def test_one_flow_per_member_where_learning_places_it_and_one_to_the_interface_each_with_its_hairpin() -> None:
    net, ids, macs, _ = trusted_ring(6)
    for nid in ids:
        sw = net.nodes[nid].switch
        table = ahead(net, nid)
        assert table == sw._destinations
        for other in ids:
            entry = sw.learning.lookup(macs[other], net.now)
            assert entry is not None
            assert table[DestinationMatch(macs[other])] == entry.port  # the own interface: its leaf port
        hairpins = {(f.fields["in_port"], f.fields["eth_dst"]) for f in net.nodes[nid].table.entries
                    if f.priority == DESTINATION_HAIRPIN_PRIORITY and f.outputs == (CONTROLLER,)}
        assert hairpins == {(out, m.eth_dst) for m, out in table.items()}


def test_without_trust_there_are_none() -> None:
    net, ids = ring_network(6)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    net.advance(0.5)
    assert all(not ahead(net, nid) and not net.nodes[nid].switch._destinations for nid in ids)


def test_a_port_that_goes_takes_them_and_the_next_tick_installs_them_by_the_ports_left() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, b = ids[0], ids[1]
    old = net.port_towards(a, b)
    net.disconnect(a, b)
    assert all(out != old for out in ahead(net, a).values())
    assert ahead(net, a) == net.nodes[a].switch._destinations
    net.inject(b, 1, arp_request(macs[b]))  # b floods again: a places it round the ring
    net.advance(0.5)
    assert ahead(net, a) == net.nodes[a].switch._destinations
    assert all(out != old for out in ahead(net, a).values())
    assert DestinationMatch(macs[b]) in ahead(net, a)


def test_a_mac_forgotten_takes_them_and_comes_back_when_placed_again() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    net.forget(a, macs[b])  # the delete of the flows to it, as the switch sends it: theirs go too
    assert all(m.eth_dst != macs[b] for m in ahead(net, a))
    net.advance(0.5)
    assert all(m.eth_dst != macs[b] for m in net.nodes[a].switch._destinations)
    net.inject(b, 1, arp_request(macs[b]))
    net.advance(0.5)
    assert any(m.eth_dst == macs[b] for m in ahead(net, a))


def test_a_mac_not_certified_gets_none() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a = ids[0]
    net.nodes[a].switch.neighbors.certified = {}
    net.advance(0.5)
    assert not ahead(net, a)
    certify(net, ids)
    net.advance(0.5)
    assert ahead(net, a)


def test_their_number_is_capped_and_the_rest_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(destination_flows, "MAX_DESTINATION_FLOWS", 3)
    net, ids, macs, _ = trusted_ring(6)
    sw = net.nodes[ids[0]].switch
    assert len(ahead(net, ids[0])) == 3
    assert sw.destination_flows_capped == len(ids) - 3  # 5 members and the interface


def test_over_a_symphony_overlay_every_first_frame_arrives_once_and_no_switch_waits() -> None:
    """Long links, paths of several hops: each first frame between two members' interfaces, and its answer, is
    delivered once, and every packet-in it causes is a flow's copy."""
    net, ids, _links = symphony_network(12, seed=3)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    Announcer().announce(net, ids)
    macs = certify(net, ids)
    net.advance(0.5)
    for i, a in enumerate(ids):
        b = ids[(i * 5 + 3) % len(ids)]
        if a == b:
            continue
        before_ins = sum(packet_ins(net).values())
        before_copies = sum(node.switch.destination_copies for node in net.nodes.values())
        got = {n: len(net.nodes[n].received[1]) for n in (a, b)}
        echo, reply = eth(macs[b], macs[a], payload=b"echo" * 16), eth(macs[a], macs[b], payload=b"ping" * 16)
        net.inject(a, 1, echo)
        net.inject(b, 1, reply)
        assert net.nodes[b].received[1][got[b]:] == [echo]
        assert net.nodes[a].received[1][got[a]:] == [reply]
        copies = sum(node.switch.destination_copies for node in net.nodes.values()) - before_copies
        assert sum(packet_ins(net).values()) - before_ins == copies


def test_a_packet_in_is_known_for_a_copy_by_its_cookie() -> None:
    """os-ken reads an OFPPacketIn's cookie (the flow's that sent it; the table-miss flow's is 0)."""
    for cookie, copied in ((DESTINATION_COOKIE, True), (0, False), (EVIO_COOKIE, False)):
        assert copied_ahead(SimpleNamespace(cookie=cookie)) is copied


def test_a_members_frames_reach_the_interface_by_any_tunnel_but_not_while_an_ask_of_it_floods() -> None:
    """0066's way back enters by the port a member is placed on; a path that is not the way back brings its frames by
    another tunnel, where the interface's flow by destination takes them on, and like the way back it waits out a
    flooded ask (0056)."""
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    place = net.nodes[a].switch.learning.lookup(macs[b], net.now)
    assert place is not None
    (other,) = [p for p in net.nodes[a].switch.peer_ports().values() if p != place.port]
    assert net.nodes[a].table.lookup(other, eth(macs[a], macs[b]), net.now) == [1, CONTROLLER]
    net.inject(a, 1, arp_for(macs[a], "10.7.0.1", "10.7.0.99"))  # for an address nobody certified: it floods
    net.advance(0.5)
    assert net.nodes[a].table.lookup(other, eth(macs[a], macs[b]), net.now) == [CONTROLLER]
    net.advance(3.0)
    assert net.nodes[a].table.lookup(other, eth(macs[a], macs[b]), net.now) == [1, CONTROLLER]


# -- ARP for members' certified addresses, answered by the bridge ------------------------------------------------


def test_an_arp_for_a_members_certified_address_is_answered_by_the_bridge_without_a_packet_in() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    before, tunnels = packet_ins(net), net.frames_on_tunnels
    net.inject(a, 1, arp_for(macs[a], "10.7.0.1", "10.7.0.2"))
    assert net.nodes[a].received[1][-1] == arp_reply(macs[b], IPv4Address("10.7.0.2"), macs[a], IPv4Address("10.7.0.1"))
    assert packet_ins(net) == before and net.frames_on_tunnels == tunnels
    assert net.nodes[a].switch.neighbors.answered == 0  # not the controller's answer (0062): the bridge's


@pytest.mark.parametrize("sender", ["0.0.0.0", "10.7.0.2"], ids=["probe", "announcement"])
def test_a_probe_or_an_announcement_of_the_address_still_goes_to_the_controller(sender: str) -> None:
    net, ids, macs, _ = trusted_ring(4)
    a = ids[0]
    before, received = packet_ins(net)[a], len(net.nodes[a].received[1])
    net.inject(a, 1, arp_for(macs[a], sender, "10.7.0.2"))
    assert packet_ins(net)[a] > before
    assert all(frame[20:22] != b"\x00\x02" for frame in net.nodes[a].received[1][received:])  # nobody answered


def test_no_answer_for_an_address_not_certified_or_whose_mac_is_not_placed_under_its_owner() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    answered = {m.address for m in net.nodes[a].switch._arp_answers}
    assert answered == {"10.7.0.2", "10.7.0.3", "10.7.0.4"}
    net.forget(a, macs[b])
    net.advance(0.5)
    assert {m.address for m in net.nodes[a].switch._arp_answers} == {"10.7.0.3", "10.7.0.4"}
    net.nodes[a].switch.neighbors.certified = {}
    net.advance(0.5)
    assert not net.nodes[a].switch._arp_answers
    assert not [f for f in net.nodes[a].table.entries if f.priority in (ARP_ANSWER_PRIORITY, ARP_ASK_PRIORITY)]
    before = packet_ins(net)[a]
    net.inject(a, 1, arp_for(macs[a], "10.7.0.1", "10.7.0.2"))
    assert packet_ins(net)[a] == before + 1  # the controller's, as before 0072


def test_arp_answers_are_capped_and_the_rest_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(destination_flows, "MAX_ARP_ANSWERS", 2)
    net, ids, _macs, _ = trusted_ring(4)
    sw = net.nodes[ids[0]].switch
    assert len(sw._arp_answers) == 2 and sw.arp_answers_capped == 1


def test_a_tick_that_changes_nothing_recomputes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flows ahead are recomputed only when what they are made of changed (2-3 ms a tick at 31 members behind 15
    tunnels otherwise); a flow of theirs that goes is such a change."""
    net, ids, macs, _ = trusted_ring(6)
    a = ids[0]
    sw = net.nodes[a].switch
    calls: list[int] = []
    wanted = destination_flows.wanted_destination_flows
    monkeypatch.setattr(destination_flows, "wanted_destination_flows",
                        lambda *args: calls.append(1) or wanted(*args))  # type: ignore[func-returns-value]
    assert sw.expire(net.now + 0.5) == [] and calls == []
    net.forget(a, macs[ids[3]])  # the flows to it went (as the switch's own delete would take them)
    sw._forget_destinations(mac=macs[ids[3]])
    net.advance(0.5)
    assert calls


def test_our_own_frames_coming_back_by_a_tunnel_go_to_the_controller_not_on() -> None:
    """A flow by destination must not keep a loop going: a frame in our interface's name that comes in by a tunnel
    (a loop, or a peer forging it) goes to the controller, which drops it, as before 0072."""
    net, ids, macs, _ = trusted_ring(4)
    a, c = ids[0], ids[2]
    table = net.nodes[a].table
    port = net.port_towards(a, ids[1])
    assert table.lookup(port, eth(macs[c], macs[a]), net.now) == [CONTROLLER]
    place = net.nodes[a].switch.learning.lookup(macs[c], net.now)
    assert place is not None and table.lookup(1, eth(macs[c], macs[a]), net.now) == [place.port]  # 0066's
    before = net.frames_on_tunnels
    net.from_neighbour(a, ids[1], eth(macs[c], macs[a]))
    assert net.frames_on_tunnels == before


def test_packet_ins_of_unicast_frames_are_counted_apart_from_broadcasts_and_frbs() -> None:
    # A first contact's cost is read from these (test_sdn_proactive_flows_lab.py): the overlay's broadcasts, a
    # packet-in at every switch each, are not counted, nor FRBs.
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[2]
    sw = {nid: net.nodes[nid].switch for nid in ids}
    before = {nid: (sw[nid].counters.packet_ins, sw[nid].unicast_packet_ins) for nid in ids}
    net.inject(a, 1, eth("ff:ff:ff:ff:ff:ff", macs[a], ethertype=0x88B5, payload=b"have" * 16))
    flooded = {nid: (sw[nid].counters.packet_ins - before[nid][0], sw[nid].unicast_packet_ins - before[nid][1])
               for nid in ids}
    assert all(total >= 1 and unicast == 0 for total, unicast in flooded.values()), flooded
    stranger = "02:00:00:00:99:01"  # no flow ahead for it: the controller is asked
    net.inject(a, 1, eth(stranger, macs[a], payload=b"unknown" * 8))
    assert sw[a].unicast_packet_ins - before[a][1] == 1
    assert sw[b].unicast_packet_ins == before[b][1]  # flooded to the others as an FRB: not counted there
