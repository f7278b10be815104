"""review21e E8: the switch gives a flood root its own budget only if it is a member (decision 0033, review21: "roots
that are no member share one bucket per port"), and the daemon tells it the members signaling sees present
(`overlay_stack._members`). In the member-list mode of decision 0059 (overlays past a few hundred members) signaling
holds presence of a node's contacts only, about 20: every other member's floods then share the bucket for unknown
roots with a hostile member's invented roots, and its ARPs are thinned at every node they cross: the review21 attack,
back for all but a node's contacts. A ring of 6 whose nodes know their ring neighbours only (contacts), the hostile
member flooding over 40 invented roots at its per-port rate: 13 of 20 ARPs arrived. Fixed: the daemon tells the
switch the ids the member list names too (`overlay_stack._send_members`, tested in
tests/unit/node/test_review21e_listed_members_told.py): 20 of 20. Real switches on the fake flow table."""

from __future__ import annotations

import random

import pytest

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac


def storm(listed: bool) -> tuple[int, int]:
    net, ids = ring(6)
    for i, nid in enumerate(ids):  # presence to contacts only: each node sees its ring neighbours
        seen = {nid, ids[i - 1], ids[(i + 1) % len(ids)]}
        net.nodes[nid].switch.members = frozenset(seen | (set(ids) if listed else set()))
    hostile, first_hop, target = ids[5], ids[0], ids[3]
    victim_mac = host_mac(net, first_hop)
    rng = random.Random(5)
    roots = sorted(rng.randrange(ids[4] + 1, hostile) for _ in range(40))
    net.now = 1.0
    for root in roots:
        net.now += 0.02
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), root, ids[4]))
    start, t0, arps = len(net.nodes[target].received[1]), net.now + 1, 0
    for i in range(2000):
        net.now = t0 + i / 1000
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), roots[i % 40], ids[4]))
        if i % 100 == 0:
            arps += 1
            net.inject(first_hop, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
    arrived = sum(1 for f in net.nodes[target].received[1][start:] if f[6:12] == frb.parse_mac(victim_mac))
    return arrived, arps


@pytest.mark.parametrize("listed", [False, True])
def test_a_members_arp_crosses_nodes_that_know_it_only_from_the_member_list(listed: bool) -> None:
    arrived, arps = storm(listed)
    print(f"members told: contacts{' and the member list' if listed else ' only'}; the victim's ARPs 3 hops on, "
          f"at a node that does not see it present: {arrived} of {arps}")
    assert (arrived == arps) == listed  # contacts only: thinned (the finding); with the list: all arrive
