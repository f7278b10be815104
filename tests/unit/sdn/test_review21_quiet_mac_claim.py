"""review21 (fixed since: live flows from a MAC vouch for its place, and flows from peers idle out within the move hold): decision 0034's residual ("a MAC not heard here for 5 s can be claimed by an adjacent member") in the
common case: a host in a steady conversation is *not heard* by the controller at all, since its frames match flows
in the switch and never come up as packet-ins. One forged flood then moves it on the attacker's neighbour."""

from __future__ import annotations

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def test_one_forged_flood_takes_a_busy_hosts_mac_at_the_attackers_neighbour() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]  # hostile is adjacent to u; v is two hops from u
    u_mac, v_mac = host_mac(net, u), host_mac(net, v)
    net.now = 1.0
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))  # v's host says hello (an ARP): known everywhere
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    for _ in range(100):  # 10 s of a steady two-way conversation, 10 frames/s each way
        net.advance(0.1)
        net.inject(v, 1, eth(u_mac, v_mac))
        net.inject(u, 1, eth(v_mac, u_mac))
    before = len(net.nodes[v].received[1])
    to_hostile = net.port_towards(u, hostile)
    intercepted: list[bytes] = []
    output = net._output

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(v_mac):
            intercepted.append(frame)
        return output(node, port, frame)

    net._output = spy  # type: ignore[method-assign]
    packet_ins = net.nodes[u].packet_ins
    # One FRB from the adjacent hostile member: v's host's MAC as the inner source, its own root.
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, v_mac, 0x0806), hostile, ids[4]))
    moved_to = net.nodes[u].switch.learning.lookup(v_mac, net.now)
    for _ in range(100):  # the conversation goes on for 10 s
        net.advance(0.1)
        net.inject(v, 1, eth(u_mac, v_mac))
        net.inject(u, 1, eth(v_mac, u_mac))
    arrived = len(net.nodes[v].received[1]) - before
    still = net.nodes[u].switch.learning.lookup(v_mac, net.now)
    print(
        f"packet-ins at u during the steady 10 s: {packet_ins}; v's MAC at u now on port {moved_to.port}"
        f" (towards hostile: {to_hostile}); of the next 10 s's 100 u->v frames, {len(intercepted)} went to the"
        f" hostile member (which here, an honest fake, floods them on: {arrived} reached v); 10 s later v's MAC"
        f" at u is still on port {still.port}"
    )
    assert not intercepted


def test_one_forged_flood_moves_a_busy_hosts_mac_overlay_wide() -> None:
    net, ids = ring(8)
    u, v, hostile = ids[0], ids[3], ids[7]
    v_mac = host_mac(net, v)
    net.now = 1.0
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))
    for _ in range(100):  # 10 s: every other node's host talks with v's host, both ways (flows, no packet-ins)
        net.advance(0.1)
        for other in ids:
            if other not in (v, hostile):
                net.inject(other, 1, eth(v_mac, host_mac(net, other)))
                net.inject(v, 1, eth(host_mac(net, other), v_mac))
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, v_mac, 0x0806), hostile, ids[6]))
    moved = [
        f"{n >> 120:x}"
        for n in ids
        if (e := net.nodes[n].switch.learning.lookup(v_mac, net.now)) is not None and e.root == hostile
    ]
    print("nodes where v's host's MAC now belongs to the hostile member's root:", moved)
    assert moved == []
