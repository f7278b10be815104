"""Flows between a node's interface and members' certified MACs, installed before a frame needs them (decision 0066).

Over the fake network (real switch logic, its actions as OpenFlow through a fake table): once the signed host
claims name each member's interface MAC, and the certificates its address, the first frame between two members'
interfaces asks neither end's controller; without trust nothing changes; a flow goes when its MAC's claim,
certificate or place goes, never leads anywhere learning would not, and never vouches for the remote MAC.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb, proactive_flows
from evio.sdn.flow_actions import FlowMatch
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import arp_request, eth
from evio.testing.host_claims import Announcer


def arp_for(src: str, src_ip: str, target_ip: str) -> bytes:
    """A real ARP request (addresses filled in), broadcast."""
    sha = frb.parse_mac(src)
    return struct.pack("!6s6sHHHBBH6s4s6s4s", b"\xff" * 6, sha, 0x0806, 1, 0x0800, 6, 4, 1, sha,
                       ipaddress.IPv4Address(src_ip).packed, b"\x00" * 6,
                       ipaddress.IPv4Address(target_ip).packed).ljust(60, b"\x00")  # fmt: skip


def packet_ins(net: FakeNetwork) -> dict[int, int]:
    return {nid: node.packet_ins for nid, node in net.nodes.items()}


def certify(net: FakeNetwork, ids: list[int]) -> dict[int, str]:
    """Every switch hears each member's certified address (10.7.0.i) with its interface's MAC (0062), as
    `SetCertifiedAddresses` tells it: the others', never its own."""
    macs = {nid: host_mac(net, nid) for nid in ids}
    addresses = {ipaddress.IPv4Address(f"10.7.0.{i + 1}"): macs[nid] for i, nid in enumerate(ids)}
    for nid in ids:
        net.nodes[nid].switch.neighbors.certified = {ip: mac for ip, mac in addresses.items() if mac != macs[nid]}
    return macs


def trusted_ring(n: int) -> tuple[FakeNetwork, list[int], dict[int, str], Announcer]:
    """A ring of n whose interfaces spoke once (a broadcast each: placed everywhere under their roots), whose
    claims are signed and told, and whose addresses are certified; one tick installs the flows ahead."""
    net, ids = ring_network(n)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    announcer = Announcer()
    announcer.announce(net, ids)
    macs = certify(net, ids)
    net.advance(0.5)
    return net, ids, macs, announcer


def test_the_first_frame_between_adjacent_members_and_its_answer_ask_no_controller() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, b = ids[0], ids[1]
    before = packet_ins(net)
    echo, reply = eth(macs[b], macs[a], payload=b"echo" * 16), eth(macs[a], macs[b], payload=b"ping" * 16)
    net.inject(a, 1, echo)
    net.inject(b, 1, reply)
    assert net.nodes[b].received[1][-1] == echo
    assert net.nodes[a].received[1][-1] == reply
    assert packet_ins(net) == before


def test_without_trust_the_first_frame_is_learned_as_before() -> None:
    net, ids = ring_network(6)
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    net.advance(31.0)  # the ARPs' flows idle out; the MACs stay learned
    a, b = ids[0], ids[1]
    before = packet_ins(net)
    net.inject(a, 1, eth(host_mac(net, b), host_mac(net, a)))
    asked = {nid: packet_ins(net)[nid] - before[nid] for nid in ids}
    assert asked == {nid: 1 if nid in (a, b) else 0 for nid in ids}
    assert all(node.switch.proactive_installed == 0 for node in net.nodes.values())


def test_on_a_longer_path_only_the_intermediate_switches_ask_once_each() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, c = ids[0], ids[2]  # a -> ids[1] -> c
    before = packet_ins(net)
    net.inject(a, 1, eth(macs[c], macs[a], payload=b"echo" * 16))
    net.inject(c, 1, eth(macs[a], macs[c], payload=b"ping" * 16))
    asked = {nid: packet_ins(net)[nid] - before[nid] for nid in ids}
    assert asked == {nid: 1 if nid == ids[1] else 0 for nid in ids}


def test_the_flows_lead_where_learning_places_the_mac_and_never_vouch_for_it() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a = ids[0]
    sw = net.nodes[a].switch
    table = net.nodes[a].table.flows
    for nid in ids[1:]:
        entry = sw.learning.lookup(macs[nid], net.now)
        assert entry is not None and entry.root == nid
        out = table[FlowMatch(1, macs[a], macs[nid])].out_port
        assert out == entry.port
        assert table[FlowMatch(entry.port, macs[nid], macs[a])].out_port == 1
        assert not sw.flows.sends_from(macs[nid], entry.port, net.now + 100)  # 0034: frames vouch, flows ahead not
    assert len(sw._proactive) == 2 * (len(ids) - 1)


def test_a_mac_not_certified_gets_no_flow_ahead() -> None:
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    net.nodes[a].switch.neighbors.certified = {}
    net.advance(0.5)
    assert not net.nodes[a].switch._proactive
    assert FlowMatch(1, macs[a], macs[b]) not in net.nodes[a].table.flows
    assert FlowMatch(1, macs[b], macs[a]) in net.nodes[b].table.flows  # b's table still has a's


def test_a_mac_claimed_by_another_member_loses_its_flows() -> None:
    """The claim changes: the MAC is now held by a member other than the one it was learned under (0055 forgets
    it): the flows towards it go at once, and none comes back while learning does not place it under its owner."""
    net, ids, macs, _ = trusted_ring(4)
    a, b, c = ids[0], ids[1], ids[2]
    owners = {macs[nid]: nid for nid in ids}
    owners[macs[b]] = c
    net.tell_owners(owners)
    net.advance(0.5)
    assert FlowMatch(1, macs[a], macs[b]) not in net.nodes[a].table.flows
    assert all(m.eth_dst != macs[b] and m.eth_src != macs[b] for m in net.nodes[a].switch._proactive)


def test_a_port_that_goes_takes_its_flows_and_the_next_tick_installs_them_the_other_way() -> None:
    net, ids, macs, announcer = trusted_ring(6)
    a, b = ids[0], ids[1]
    old = net.port_towards(a, b)
    net.disconnect(a, b)
    assert all(m.in_port != old and f.out_port != old for m, f in net.nodes[a].table.flows.items())
    # b floods again (its claims at the link change): a places it round the ring, under b's root.
    net.inject(b, 1, arp_request(macs[b]))
    net.advance(0.5)
    entry = net.nodes[a].switch.learning.lookup(macs[b], net.now)
    assert entry is not None and entry.port != old
    assert net.nodes[a].table.flows[FlowMatch(1, macs[a], macs[b])].out_port == entry.port
    # a's end sends b's frames the new way by the flow, without its controller.
    assert net.nodes[a].table.lookup(1, eth(macs[b], macs[a]), net.now) == [entry.port]


def test_a_ports_share_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proactive_flows, "PROACTIVE_MACS_PER_PORT", 1)
    net, ids, macs, _ = trusted_ring(6)
    sw = net.nodes[ids[0]].switch
    by_port: dict[int, int] = {}
    for match, out in sw._proactive.items():
        if match.in_port == 1:
            by_port[out] = by_port.get(out, 0) + 1
    assert by_port and all(count == 1 for count in by_port.values())


def test_a_flooded_request_of_the_interface_keeps_its_way_back_off_while_answers_may_come() -> None:
    """0056: a local host's request that floods is confirmed only by an answer the controller sees, so no flow
    ahead may carry one to the asker for the ask window; then it is installed again."""
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    towards_b = net.nodes[a].switch.learning.lookup(macs[b], net.now)
    assert towards_b is not None
    way_back = FlowMatch(towards_b.port, macs[b], macs[a])
    assert way_back in net.nodes[a].table.flows
    net.inject(a, 1, arp_for(macs[a], "10.7.0.1", "10.7.0.99"))  # for an address nobody certified: it floods
    net.advance(0.5)
    assert way_back not in net.nodes[a].table.flows
    net.advance(3.0)
    assert way_back in net.nodes[a].table.flows


def test_the_hard_timeout_removes_a_flow_ahead_and_the_next_tick_installs_it_again() -> None:
    net, ids, macs, announcer = trusted_ring(4)
    a, b = ids[0], ids[1]
    match = FlowMatch(1, macs[a], macs[b])
    installed = net.nodes[a].switch.proactive_installed
    for _ in range(2):  # keep the MACs live (their interfaces speak) past the flows' hard timeout
        net.advance(150.0)
        for nid in ids:
            net.inject(nid, 1, arp_request(macs[nid]))
    net.advance(0.5)
    assert match in net.nodes[a].table.flows
    assert net.nodes[a].switch.proactive_installed > installed


def test_a_learned_flow_taken_over_ahead_no_longer_vouches_for_its_source() -> None:
    """Learned before the claims came, the way back from an adjacent member's MAC vouched for it once it outlived
    its idle timeout (0034); installed again ahead, the same match proves nothing."""
    net, ids = ring_network(4)
    a, b = ids[0], ids[1]
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    ma, mb = host_mac(net, a), host_mac(net, b)
    net.inject(b, 1, eth(ma, mb))  # b's frame to a: a learns the flow from b and its way back
    sw = net.nodes[a].switch
    port = net.port_towards(a, b)
    assert FlowMatch(port, mb, ma) in sw.flows and sw.flows.sends_from(mb, port, net.now)
    Announcer().announce(net, ids)
    certify(net, ids)
    net.advance(0.5)
    assert FlowMatch(port, mb, ma) in sw._proactive
    assert not sw.flows.sends_from(mb, port, net.now + 100)


def test_a_frame_that_reached_the_controller_before_the_flow_ahead_leaves_it_ahead_by_the_next_tick() -> None:
    """The daemon sends its first frames to a member (the claims it passes on) as it tells the switch who owns the
    member's MAC, so one of them may reach the controller after the flow ahead went in: its learned flow (with an
    idle timeout) replaces the one ahead on the bridge. The next tick installs the flow ahead again, not only
    once the learned one idled out (the CI failure of the lab test on 017e288)."""
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    node = net.nodes[a]
    match = FlowMatch(1, macs[a], macs[b])
    assert node.table.flows[match].idle_timeout == 0
    late = eth(macs[b], macs[a], payload=b"late" * 16)  # upcalled before the flow ahead was on the bridge
    net.upcalled(a, 1, late)
    assert node.table.flows[match].idle_timeout > 0  # the learned flow, as the packet-in installs it
    net.advance(0.5)
    assert node.table.flows[match].idle_timeout == 0
    assert match in node.switch._proactive


def test_a_learned_flow_that_replaced_one_ahead_is_not_deleted_when_the_flow_ahead_is_no_longer_wanted() -> None:
    """The flow the switch believes ahead was replaced by a learned one (as above); once the MAC is no longer
    certified, the learned flow is learning's own, and stays until it idles out."""
    net, ids, macs, _ = trusted_ring(4)
    a, b = ids[0], ids[1]
    node = net.nodes[a]
    match = FlowMatch(1, macs[a], macs[b])
    late = eth(macs[b], macs[a], payload=b"late" * 16)
    net.upcalled(a, 1, late)
    node.switch.neighbors.certified = {}
    net.advance(0.5)
    assert match in node.table.flows and node.table.flows[match].idle_timeout > 0
