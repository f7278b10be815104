"""The first packet of a new flow and its answer (issue 25, deliverable 4): one packet-in per switch on the path.

Over the fake network: the first frame of a flow goes through each switch's controller once, which
installs the flow and the way back (its source was just heard on its ingress port), so the answer
rides flows all the way and asks no controller.
"""

from __future__ import annotations

from evio.sdn.flow_actions import AddFlow
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import arp_reply, arp_request, eth


def packet_ins(net: FakeNetwork) -> dict[int, int]:
    return {nid: node.packet_ins for nid, node in net.nodes.items()}


def test_a_new_flow_costs_one_packet_in_per_switch_on_its_path_and_its_answer_none() -> None:
    net, ids = ring_network(6)
    a, c = ids[0], ids[2]  # 2 hops clockwise, 4 the other way
    ma, mc = host_mac(net, a), host_mac(net, c)
    net.inject(a, 1, arp_request(ma))
    net.inject(c, 1, arp_reply(mc, ma))
    net.advance(31.0)  # the ARP exchange's flows idle out; the MACs stay learned
    assert all(not node.table.flows for node in net.nodes.values())

    before = packet_ins(net)
    echo = eth(mc, ma, payload=b"echo" * 16)
    net.inject(a, 1, echo)
    after_echo = packet_ins(net)
    asked = {nid: after_echo[nid] - before[nid] for nid in ids}
    assert net.nodes[c].received[1][-1] == echo
    # The shortest path a -> ids[1] -> c, one packet-in each; nobody else heard of it.
    assert asked == {nid: 1 if nid in ids[:3] else 0 for nid in ids}

    reply = eth(ma, mc, payload=b"ping" * 16)
    net.inject(c, 1, reply)
    assert net.nodes[a].received[1][-1] == reply
    assert packet_ins(net) == after_echo  # the answer rode the ways back

    # Later frames both ways ask no controller either.
    for _ in range(3):
        net.inject(a, 1, echo)
        net.inject(c, 1, reply)
    assert packet_ins(net) == after_echo


def test_a_flow_from_a_source_held_elsewhere_gets_no_way_back() -> None:
    """The way back is installed only where the source was just learned on the ingress port: a frame whose
    source the switch holds elsewhere (its place spoke lately: a refused move) installs its own flow and
    nothing towards that source, so no member gets a flow to a MAC it only claims."""
    net, ids = ring_network(6)
    a, b, c = ids[0], ids[1], ids[2]
    ma, mb = host_mac(net, a), host_mac(net, b)
    net.inject(b, 1, arp_request(mb))
    net.inject(a, 1, arp_request(ma))  # ma spoke: b holds it on the port towards a
    node = net.nodes[b]
    towards_a = net.port_towards(b, a)
    net.from_neighbour(b, c, eth(mb, ma))  # c claims ma, to b's host
    entry = node.switch.learning.lookup(ma, net.now)
    assert entry is not None and entry.port == towards_a
    assert node.received[1][-1] == eth(mb, ma)  # the frame itself went on
    assert [(m.in_port, m.eth_src) for m in node.table.flows] == [(net.port_towards(b, c), ma)]


def test_every_delete_goes_before_the_adds_and_a_port_with_room_for_one_keeps_the_way_back() -> None:
    net = FakeNetwork(max_flows_per_port=1)
    a, b = 1 << 120 | 1, 2 << 120 | 2  # distinct low bits: distinct host MACs
    for nid in (a, b):
        net.add_node(nid)
    net.connect(a, b)
    ma, mb = host_mac(net, a), host_mac(net, b)
    net.inject(b, 1, arp_request(mb))
    net.inject(a, 1, arp_request(ma))
    switch = net.nodes[a].switch
    actions = switch.packet_in(1, eth(mb, ma), net.now)
    kinds = [type(x).__name__ for x in actions]
    assert kinds == ["PacketOut", "AddFlow"]  # the flow itself was evicted by its way back: not added
    (way_back,) = [x for x in actions if isinstance(x, AddFlow)]
    assert way_back.match.eth_src == mb and switch.flows.count(1) == 1
    # Again (the flow's frames still come here): the flow evicts the way back, which evicts the flow; the
    # delete of the installed one goes before any add.
    actions = switch.packet_in(1, eth(mb, ma), net.now)
    assert [type(x).__name__ for x in actions] == ["PacketOut", "DeleteFlow", "AddFlow"]


def test_through_four_intermediate_switches_each_asks_once_and_the_answer_never() -> None:
    """node_bench's longest usual path (4 intermediate nodes, 6 switches), both directions started in turn: one
    packet-in per switch for each new flow, none for its answer (issue 25: at most 2 per switch)."""
    net, ids = ring_network(11)
    a, c = ids[0], ids[5]  # 5 hops clockwise, 6 the other way
    ma, mc = host_mac(net, a), host_mac(net, c)
    net.inject(a, 1, arp_request(ma))
    net.inject(c, 1, arp_reply(mc, ma))
    net.advance(31.0)
    path = ids[:6]
    for src, dst, ms, md in ((a, c, ma, mc), (c, a, mc, ma)):
        net.advance(31.0)  # the last exchange's flows idle out
        before = packet_ins(net)
        net.inject(src, 1, eth(md, ms, payload=b"new!" * 16))
        net.inject(dst, 1, eth(ms, md, payload=b"back" * 16))
        asked = {nid: packet_ins(net)[nid] - before[nid] for nid in ids}
        assert asked == {nid: 1 if nid in path else 0 for nid in ids}
        assert net.nodes[src].received[1][-1] == eth(ms, md, payload=b"back" * 16)
