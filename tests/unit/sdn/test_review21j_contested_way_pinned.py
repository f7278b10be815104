"""review21j J4: a member holds a root's flood way at a node past it, so that the root's real floods bring MACs new
there only at CONTESTED_NEW_RATE and the rest of its broadcasts are not passed on past that node.

Decision 0033 (amended, review21f F6 residual): at q, the port a root's floods came by *first* holds the way, and a
copy by any other port brings a MAC new here only within 10 at once, then 1/s; over it the broadcast is delivered
at q and neither learned nor passed on. Whoever is first holds it: a way lapses after a MAC's max age (300 s)
without a copy by it, and a member's interface broadcasts rarely (the review21i I4 docstring's premise). A member
on an arc from the root to q (plausible) forges one copy under the root every 200 s: while the root's own copies
come, the forgeries are contested (as intended); once the root was quiet for the max age the next forgery takes the
way, and from then on the root's real floods at q are the contested ones, kept so by one forged frame each 200 s.

Measured (the 7-node ring with two chords of tests/unit/sdn/test_review21f_shared_port_upstream_root.py, real
switch logic on the fake flow table): the root's node brings up 40 hosts (containers) 0.05 s apart, each
broadcasting an ARP once. Honest: all 40 delivered at every node. With the member's one frame per 200 s: q passes
on 11 (its burst, then 1/s); w and the node past it get 11 of 40 (29 CONTESTED_ROOT at q).

Fixed (decision 0033, amended review21j): a port that held a root's way until it lapsed and another port took it
takes it back with its next copy of the root's floods (`frb_receive._contested`, `BoundedFloodSwitch._lapsed_ways`).
The member holds the way only while the root stays quiet at q, when there is nothing of it to limit; the root's first
real broadcast by its old way ends it, and the member's copies are contested again. After: 40 of 40 at every node,
0 CONTESTED_ROOT at q (before: 11 of 40 past q, 29)."""

from __future__ import annotations

import random

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac
from evio.testing.frames import eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac


def _hosts_delivered(attack: bool) -> tuple[dict[int, int], int]:
    net = FakeNetwork(flow_idle_timeout=30)
    ids = [(i + 1) << 120 | (i + 1) for i in range(7)]
    for nid in ids:
        net.add_node(nid)
    for i, nid in enumerate(ids):
        net.connect(nid, ids[(i + 1) % 7])
    root, hostile, x, q = ids[:4]
    net.connect(root, x)  # the root's floods come to q by x
    net.connect(hostile, q)  # the member's chord to q: on an arc from the root, its copies are plausible
    told_members(net, ids)
    rng = random.Random(3)
    net.now = 1.0
    net.inject(root, 1, eth(BROADCAST, host_mac(net, root), 0x0806))  # the root's interface speaks once: way by x
    for t in (1.5, 201.0, 401.0):  # one forged copy every 200 s; the root says nothing for 400 s
        net.now = t
        if attack:
            net.from_neighbour(q, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), root, ids[6], hops=2))
    hosts = [random_mac(rng) for _ in range(40)]
    base = {n: len(net.nodes[n].received[1]) for n in ids}
    for i, mac in enumerate(hosts):  # 40 containers come up behind the root, each broadcasting an ARP once
        net.now = 450.0 + i * 0.05
        net.inject(root, 1, eth(BROADCAST, mac, 0x0806) + i.to_bytes(2, "big"))
    macs = {frb.parse_mac(h) for h in hosts}
    got = {n: sum(1 for f in net.nodes[n].received[1][base[n]:] if f[6:12] in macs) for n in ids if n != root}
    contested = net.nodes[q].switch.drops[Drop.CONTESTED_ROOT]
    print(f"{'attack' if attack else 'honest'}: of 40 broadcasts delivered {[got[n] for n in ids[1:]]} "
          f"(ids[1..6]); CONTESTED_ROOT at q: {contested}")
    return got, contested


def test_honest_new_hosts_reach_every_node() -> None:
    got, contested = _hosts_delivered(attack=False)
    assert set(got.values()) == {40} and contested == 0


def test_a_member_cannot_hold_a_quiet_roots_flood_way_against_its_real_floods() -> None:
    got, contested = _hosts_delivered(attack=True)
    assert set(got.values()) == {40}, got
    assert contested == 0
