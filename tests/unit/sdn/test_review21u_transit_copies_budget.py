"""review21u finding 1: a member's unicasts with invented sources, riding decision 0072's flows ahead by destination,
are copied to the controller of every switch on their way and charged there to the port they came by, the transit
member's: beyond one switch the hostile member spent another member's packet-in budget, which that member's floods
shared, and the floods were dropped (`RATE_LIMITED`) before any flood share (0033, review21) could judge them.

0072 lists the copies ("each copied to the controllers on the way, within their packet-in budgets") as a cost on the
controllers, and 0043's last amendment said such a member "spends its own port's packet-ins, as unicasts from invented
sources (each a copy, 0072) and floods could before": past its neighbour it spent the transit member's. The forwarding
itself runs in Open vSwitch at line rate, so the hostile member's own packet-in budget at its neighbour (its copies
there are dropped past it) does not bound what reaches the next switch. Measured (6-node trusted ring, the fake network
with the real switch, default budgets of 1,000/s and a burst of 2,000, 3 s): at 1,000 frames a second nothing was
lost; at 2,000 a second the first hop's host's ARP floods lost a third at the next node (20 of 30 arrived), 1,061
packet-ins refused there.

Fixed (decision 0082): a tunnel port's unicast packet-ins have a budget apart from its floods',
shared fairly among the senders the switch vouches for, invented sources all in nobody's share
(`BoundedFloodSwitch.unicast_budget`, `Drop.UNICAST_LIMITED`). The tests scale the budgets and the rate down tenfold
(the fake table's lookups are linear in its flows: unscaled, one run takes minutes; its figures are in 0082).
"""

from __future__ import annotations

import random

from evio.ratelimit import PeerRateLimiter, Rate
from evio.sdn import frb
from evio.sdn.switch import BoundedFloodSwitch, Drop, unicast_shares
from evio.testing.fake_flow_table import host_mac
from evio.testing.frames import eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, random_mac
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

PACKET_IN_RATE = 100.0


def scale_packet_in_budgets(switch: BoundedFloodSwitch, rate: float) -> None:
    """Both of a switch's per-port packet-in budgets (the floods' and the tunnel ports' unicasts') at `rate`, a burst
    of twice that, as the defaults are."""
    switch.packet_in_budget = PeerRateLimiter[int](Rate(rate, int(2 * rate)))
    switch.unicast_budget = unicast_shares(rate, int(2 * rate))


def transit_storm(rate: float, budget: float = PACKET_IN_RATE, seconds: float = 3.0) -> dict[str, int]:
    """Hostile ids[5] sends unicasts to ids[2]'s certified MAC, each from a new invented source, through ids[0] and
    ids[1]; ids[0]'s host ARPs 10 times a second, and two thirds in (the storm's share long spent) sends ids[2]'s
    interface its first unicast, which rides the same flows ahead: its copy must install the pair flow at ids[1]."""
    net, ids, macs, _ = trusted_ring(6)
    told_members(net, ids)
    for nid in ids:
        scale_packet_in_budgets(net.nodes[nid].switch, budget)
    hostile, first, second, third = ids[5], ids[0], ids[1], ids[2]
    victim_mac = host_mac(net, first)
    rng = random.Random(3)
    start, t0, arps, learned = len(net.nodes[second].received[1]), net.now + 1, 0, -1
    frames = int(seconds * rate)
    for i in range(frames):
        net.now = t0 + i / rate
        net.from_neighbour(first, hostile, eth(macs[third], random_mac(rng), 0x0800, payload=b"x" * 46))
        if i % int(rate / 10) == 0:
            arps += 1
            net.inject(first, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
        if i == 2 * frames // 3:
            pair = [f for f in net.nodes[second].table.entries
                    if f.is_unicast and (f.match.eth_src, f.match.eth_dst) == (victim_mac, macs[third])]
            assert not pair
            net.inject(first, 1, eth(macs[third], victim_mac, 0x0800, payload=b"h" * 46))
            learned = sum(1 for f in net.nodes[second].table.entries
                          if f.is_unicast and (f.match.eth_src, f.match.eth_dst) == (victim_mac, macs[third]))
    return {
        "arps_sent": arps,
        "arps_arrived": sum(1 for f in net.nodes[second].received[1][start:] if f[6:12] == frb.parse_mac(victim_mac)),
        "pair_flows_learned_at_second": learned,
        "refused_at_second": net.nodes[second].switch.drops[Drop.RATE_LIMITED],
        "unicasts_refused_at_first": net.nodes[first].switch.drops[Drop.UNICAST_LIMITED],
        "unicasts_refused_at_second": net.nodes[second].switch.drops[Drop.UNICAST_LIMITED],
    }


def test_at_the_per_port_packet_in_rate_the_transit_members_arp_arrives() -> None:
    r = transit_storm(PACKET_IN_RATE)
    print(f"{PACKET_IN_RATE:.0f}/s: {r}")
    assert r["arps_arrived"] == r["arps_sent"] and r["refused_at_second"] == 0


def test_unicasts_copied_ahead_do_not_crowd_out_the_transit_members_floods() -> None:
    r = transit_storm(2 * PACKET_IN_RATE)
    print(f"{2 * PACKET_IN_RATE:.0f}/s: {r}")
    assert r["arps_arrived"] == r["arps_sent"] and r["refused_at_second"] == 0
    # The hostile member pays from nobody's share of the unicasts (its invented sources), at both switches
    assert r["unicasts_refused_at_first"] > 0 and r["unicasts_refused_at_second"] > 0
    # and the transit member's own first contact through the same tunnel is still learned at the next switch.
    assert r["pair_flows_learned_at_second"] == 1

