"""review21c C1: a member announces another's receiving-only host in its own signed claim (its certificate is
genuine; nothing can check that it hosts the MAC). Before, the MAC became *disputed*, owned by neither, and fell
back to 0034's rules, which lost such a host to one forged flood (review21b: 50 of 50 frames to the attacker).
Now a disputed MAC stays with the member that claimed it first (decision 0055, amended): the claim is seen
(`disputed`) and takes nothing. Real switches on the fake flow table, real claim codec."""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def test_a_member_claiming_a_receiving_hosts_mac_is_seen_and_one_forged_flood_takes_none_of_its_stream() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    u_mac, v_mac = host_mac(net, u), host_mac(net, v)
    net.now = 1.0
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    net.advance(0.1)
    net.inject(v, 1, eth(u_mac, v_mac, 0x0806))  # the ARP reply: v's last frame
    claims = Announcer().announce(net, ids, {hostile: [v_mac]})  # the hostile member's claim names v's host too
    assert v_mac in claims.disputed and claims.owners()[v_mac] == v  # v claimed it first: v holds it
    for _ in range(100):  # 10 s of a steady one-way stream u -> v, 10 frames/s
        net.advance(0.1)
        net.inject(u, 1, eth(v_mac, u_mac))
    to_hostile = net.port_towards(u, hostile)
    intercepted: list[bytes] = []
    output = net._output

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(v_mac):
            intercepted.append(frame)
        return output(node, port, frame)

    net._output = spy  # type: ignore[method-assign]
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, v_mac, 0x0806), hostile, ids[4]))
    for _ in range(50):
        net.advance(0.1)
        net.inject(u, 1, eth(v_mac, u_mac))
    print(f"v's host disputed; of the next 5 s's 50 u->v frames, {len(intercepted)} went to the hostile member")
    assert not intercepted
    assert net.nodes[u].switch.learning.lookup(v_mac, net.now).root == v  # type: ignore[union-attr]
    assert net.nodes[u].switch.drops[Drop.NOT_ANNOUNCER] >= 1
