"""review21u finding 2: decision 0076's probe flow (review21s 1: every NS from ::, whatever its target, to the
controller, at every switch) makes a member's unicast probe a packet-in at every switch on its way, charged beyond
the first to the port it came by: the transit member's. A hostile member sending at its own full per-port packet-in
rate, every probe passed (its target an address made from no MAC and certified for no one), spends the whole budget
of the member it sends through at the next switch, and that member's floods (its host's ARP) are dropped there
(`RATE_LIMITED`) before any flood share (0033, review21) judges them.

Measured (6-node trusted ring, the fake network with the real switch; the per-port budget and every rate scaled down
tenfold: 100/s and a burst of 200, the probes at 100/s, the transit member's host ARPing 10/s): 0 probes refused at
the first switch (the hostile member within its budget), 4,000 probes delivered to the target's interface, and after
the burst drained 602 packet-ins refused at the next switch: 99 of the transit member's 400 ARPs arrived in 40 s.

Fixed (decision 0082): a tunnel port's unicast packet-ins have a budget apart from its floods',
shared fairly among the senders the switch vouches for, each at most half of it (`switch.unicast_shares`): the probes
spend the hostile member's share of the unicasts only, at the first switch as at the next, and past it are dropped
and counted (`UNICAST_LIMITED`); every ARP arrives.
"""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import host_mac
from evio.testing.frames import dad_probe, eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_review21u_transit_copies_budget import scale_packet_in_budgets
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

PACKET_IN_RATE = 100.0  # the default 1,000/s (burst 2,000) scaled down tenfold: the fake table's lookups are linear


def probes_through(seconds: float) -> dict[str, int]:
    """Hostile ids[5] sends unicast probes for fd00::99 to ids[2]'s certified MAC through ids[0] and ids[1], at the
    full per-port packet-in rate; ids[0]'s host ARPs 10 times a second."""
    net, ids, macs, _ = trusted_ring(6)
    told_members(net, ids)
    for nid in ids:
        scale_packet_in_budgets(net.nodes[nid].switch, PACKET_IN_RATE)
    hostile, first, second, third = ids[5], ids[0], ids[1], ids[2]
    victim_mac = host_mac(net, first)
    probe = frb.parse_mac(macs[third]) + dad_probe(macs[hostile], "fd00::99")[6:]  # Ethernet to the target's MAC
    start, heard, t0, arps = len(net.nodes[second].received[1]), len(net.nodes[third].received[1]), net.now + 1, 0
    for i in range(int(seconds * PACKET_IN_RATE)):
        net.now = t0 + i / PACKET_IN_RATE
        net.from_neighbour(first, hostile, probe)
        if i % int(PACKET_IN_RATE / 10) == 0:
            arps += 1
            net.inject(first, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
    return {
        "arps_sent": arps,
        "arps_arrived": sum(1 for f in net.nodes[second].received[1][start:] if f[6:12] == frb.parse_mac(victim_mac)),
        "probes_delivered": net.nodes[third].received[1][heard:].count(probe),
        "refused_at_first": net.nodes[first].switch.drops[Drop.RATE_LIMITED],
        "refused_at_second": net.nodes[second].switch.drops[Drop.RATE_LIMITED],
        "unicasts_refused_at_first": net.nodes[first].switch.drops[Drop.UNICAST_LIMITED],
        "unicasts_refused_at_second": net.nodes[second].switch.drops[Drop.UNICAST_LIMITED],
    }


def test_the_hostile_members_probes_spend_its_own_share_and_within_it_are_delivered() -> None:
    r = probes_through(3.0)
    print(r)
    # A sender's share of a tunnel port's unicasts is half the port's: its burst (100) and 50/s pass, the rest is
    # refused (at the first switch, but for a rounding's one further on) and counted, and spends nothing of the
    # floods' budget there or further on.
    assert r["refused_at_first"] == r["refused_at_second"] == 0
    assert r["probes_delivered"] + r["unicasts_refused_at_first"] + r["unicasts_refused_at_second"] == 3 * PACKET_IN_RATE
    assert r["probes_delivered"] >= PACKET_IN_RATE + 3 * PACKET_IN_RATE / 2 - 2
    assert r["arps_arrived"] == r["arps_sent"]


def test_a_members_unicast_probes_at_its_full_rate_leave_the_transit_members_floods_alone() -> None:
    r = probes_through(40.0)
    print(r)
    assert r["arps_arrived"] == r["arps_sent"] and r["refused_at_second"] == 0
