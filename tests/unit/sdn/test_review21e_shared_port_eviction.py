"""review21e E2: decision 0033 bounds the MACs one port holds (a quarter of the table) so that "a peer sending from
invented addresses churns only its own share and never evicts what other ports taught". That holds at the hostile
member's neighbours only. Its floods from invented source MACs, rooted at itself (its own root's share, 100/s), are
passed on, and every node further on learns them on a port it shares with honest members: the port towards the
hostile member's neighbour, which also carries that neighbour's hosts and all behind it. After about 20 s the share
is full and every remote MAC on that port not heard for 20 s is evicted with its flows: its traffic floods, thinned by
the flood budgets and copied to every node, the attacker's among them (before: u forgot the host; of 1000 frames it got 108, the attacker 108, two bystanders 1000
each). Now a full port evicts from the root holding most of it (roots that are no member count as one): the
attacker's own. Real switches on the fake flow table."""

from __future__ import annotations

import random

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac


def test_a_members_invented_macs_relayed_by_its_neighbour_evict_no_other_members_mac_further_on() -> None:
    net, ids = ring(6)
    told_members(net, ids)
    hostile, neighbour, u = ids[5], ids[0], ids[2]
    victim, u_mac = host_mac(net, neighbour), host_mac(net, u)  # the neighbour's host: receives, quiet
    rng = random.Random(3)
    net.now = 1.0
    net.inject(neighbour, 1, eth(BROADCAST, victim, 0x0806))
    for i in range(3000):  # 30 s at the hostile root's flood share (100/s)
        net.now = 2.0 + i / 100
        net.from_neighbour(neighbour, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), hostile, ids[4]))
    at_u = net.nodes[u].switch.learning.lookup(victim, net.now)
    base = {n: len(net.nodes[n].received[1]) for n in ids}
    for i in range(1000):  # 1 s of u's stream to the neighbour's host
        net.now = 40 + i / 1000
        net.inject(u, 1, eth(victim, u_mac) + i.to_bytes(4, "big"))
    got = {n: sum(1 for f in net.nodes[n].received[1][base[n]:] if f[:6] == frb.parse_mac(victim)) for n in ids}
    print(f"u's entry for the neighbour's host after 30 s of relayed invented MACs: {at_u}; of 1000 u->host frames "
          f"the host got {got[neighbour]}, the hostile member {got[hostile]}, the other nodes "
          f"{[got[n] for n in ids if n not in (neighbour, hostile, u)]}")
    assert at_u is not None and at_u.root == neighbour
    assert got[neighbour] == 1000 and got[hostile] == 0
