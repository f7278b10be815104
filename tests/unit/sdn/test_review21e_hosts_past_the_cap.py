"""review21e E1: a node announces at most `MAX_MACS` (64) of the MACs it hosts and "leaves the rest to today's
rules" (decision 0055). But a hostile member may name any of the rest in its *own* signed list: it is then
their one claimant, so every switch places them only under the hostile member's root, forgets them where
they were learned under their real node, and refuses that node's floods of them (`NOT_ANNOUNCER`). One
forged flood then moves such a host to the attacker, however busy the host is: worse than the rules the
cap meant to leave it under. A node hosting more than 64 MACs is a site gateway bridging a LAN, evio's
ordinary use. Real switches on the fake flow table, real claim codec.

Closed: a node names all it hosts in up to `MAX_PAGES` signed pages (decision 0055, *Amended (review21e E1)*), so
v is the host's first claimant and the hostile member's claim is a dispute it loses."""

from __future__ import annotations

from evio.sdn import frb
from evio.signal import host_claims
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def test_a_host_past_its_nodes_announcement_cap_cannot_be_claimed_and_taken_by_another_member() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    u_mac = host_mac(net, u)
    net.now = 1.0
    lan = [f"02:1a:00:00:00:{i:02x}" for i in range(80)]  # v bridges a LAN of 80 hosts
    for mac in lan:
        net.inject(v, 1, eth(BROADCAST, mac, 0x0806))
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    hosted = net.nodes[v].switch.hosted_macs()
    assert len(hosted) > host_claims.MAX_MACS
    victim = hosted[-1]  # past one page: v's daemon names it on its second page (evio/node/host_claims.py)
    assert victim in lan
    claims = Announcer().announce(net, ids, {hostile: [victim]})
    print(f"owner of v's host {victim}: {claims.owners().get(victim) == hostile and 'the hostile member' or 'v'}")
    to_hostile = net.port_towards(u, hostile)
    intercepted: list[bytes] = []
    output = net._output

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(victim):
            intercepted.append(frame)
        return output(node, port, frame)

    net._output = spy  # type: ignore[method-assign]
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, victim, 0x0806), hostile, ids[4]))
    for step in range(50):  # 5 s: u streams to the host, which speaks (a broadcast) every second
        net.advance(0.1)
        if step % 10 == 0:
            net.inject(v, 1, eth(BROADCAST, victim, 0x0806))
        net.inject(u, 1, eth(victim, u_mac))
    entry = net.nodes[u].switch.learning.lookup(victim, net.now)
    print(f"of 50 u->host frames, {len(intercepted)} went to the hostile member; u places the host under "
          f"{'the hostile member' if entry is not None and entry.root == hostile else entry}")
    assert not intercepted
