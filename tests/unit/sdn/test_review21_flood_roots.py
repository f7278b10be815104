"""review21 (fixed since: a root that is no member of the overlay gets no flood budget of its own): the residual of decision 0033 ("a member that first makes many invented roots known gets a
flood budget for each"), measured on the real switch and the fake flow table: a 6-node ring, the hostile member
flooding at its full per-port packet-in rate (1000/s) after a quiet warm-up that makes K invented roots known."""

from __future__ import annotations

import random

import pytest

from evio.sdn import frb
from evio.sdn.switch import FLOOD_BURST, FLOOD_RATE, Drop
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac


def told_members(net: object, ids: list[int]) -> None:
    """What the daemon does (evio/node/overlay_stack.py): each switch is told the overlay's members."""
    for nid in ids:
        net.nodes[nid].switch.members = frozenset(ids)  # type: ignore[attr-defined]


def storm(k_roots: int) -> dict[str, int]:
    net, ids = ring(6)
    told_members(net, ids)
    hostile, first_hop, second, target = ids[5], ids[0], ids[1], ids[3]
    victim = first_hop  # a member whose host's ARP shares the first hop's link to `second` with the storm
    victim_mac = host_mac(net, victim)
    rng = random.Random(5)
    roots = sorted(rng.randrange(ids[4] + 1, hostile) for _ in range(k_roots))
    # Warm-up, 0.02 s apart (within the shared bucket for unknown roots): one frame per invented root.
    net.now = 1.0
    for root in roots:
        net.now += 0.02
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), root, ids[4]))
    start = len(net.nodes[target].received[1])
    t0 = net.now + 1
    arps = 0
    for i in range(2000):  # 2 s at the per-port packet-in rate
        net.now = t0 + i / 1000
        root = roots[i % len(roots)] if roots else hostile
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), root, ids[4]))
        if i % 100 == 0:
            arps += 1
            net.inject(victim, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
    at_target = net.nodes[target].received[1][start:]
    answered = [f for f in at_target if f[6:12] == frb.parse_mac(victim_mac)]
    flood = [f for f in at_target if f[6:12] != frb.parse_mac(victim_mac) and f[:6] == b"\xff" * 6]
    return {
        "roots": k_roots,
        "storm_frames_at_target_2s": len(flood),
        "victim_arps_sent": arps,
        "victim_arps_arrived": len(answered),
        "rate_limited_at_second": net.nodes[second].switch.drops[Drop.RATE_LIMITED],
        "flood_limited_at_first": net.nodes[first_hop].switch.drops[Drop.FLOOD_LIMITED],
    }


@pytest.mark.parametrize("k", [0, 10, 40])
def test_invented_known_roots_multiply_what_passes(k: int) -> None:
    r = storm(k)
    print(r)
    assert r["victim_arps_arrived"] == r["victim_arps_sent"]
    if k == 0:
        assert r["storm_frames_at_target_2s"] <= 2 * (FLOOD_BURST + 2 * FLOOD_RATE)


def two_hostile_members(k_roots: int, seconds: float = 6.0) -> tuple[int, int, int]:
    """Two hostile members adjacent to one node (its ring neighbour and a chord), each at its full per-port rate,
    each cycling over `k_roots` invented roots it made known first (0: its own root only). A third member's host
    on that node ARPs 10 times a second; returns (sent, arrived 3 hops on, packet-ins refused at the next node)."""
    net, ids = ring(6)
    told_members(net, ids)
    hostile, hostile2, first_hop, second, target = ids[5], ids[4], ids[0], ids[1], ids[3]
    net.connect(first_hop, hostile2)
    victim_mac = host_mac(net, first_hop)
    rng = random.Random(5)
    roots1 = sorted(rng.randrange(ids[4] + 1, hostile) for _ in range(k_roots)) or [hostile]
    roots2 = sorted(rng.randrange(ids[3] + 1, hostile2) for _ in range(k_roots)) or [hostile2]
    net.now = 1.0
    for r1, r2 in zip(roots1, roots2):  # warm-up: 0.02 s apart, within the shared bucket for unknown roots
        net.now += 0.02
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), r1, ids[4]))
        net.from_neighbour(first_hop, hostile2, forged(eth(BROADCAST, random_mac(rng), 0x0806), r2, ids[3]))
    start, t0, arps = len(net.nodes[target].received[1]), net.now + 1, 0
    for i in range(int(seconds * 1000)):
        net.now = t0 + i / 1000
        net.from_neighbour(
            first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), roots1[i % len(roots1)], ids[4])
        )
        net.from_neighbour(
            first_hop, hostile2, forged(eth(BROADCAST, random_mac(rng), 0x0806), roots2[i % len(roots2)], ids[3])
        )
        if i % 100 == 0:
            arps += 1
            net.inject(first_hop, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
    at = net.nodes[target].received[1][start:]
    arrived = sum(1 for f in at if f[6:12] == frb.parse_mac(victim_mac))
    return arps, arrived, net.nodes[second].switch.drops[Drop.RATE_LIMITED]


def test_two_hostile_members_with_their_own_roots_only_leave_others_arp_alone() -> None:
    sent, arrived, refused = two_hostile_members(0)
    print(f"own roots only: {arrived}/{sent} ARPs arrived, {refused} packet-ins refused at the next node")
    assert arrived == sent


# Fixed since the review: a root that is no member spends the port's one bucket for unknown roots.
def test_two_hostile_members_with_twelve_invented_known_roots_each_crowd_out_a_third_members_arp() -> None:
    sent, arrived, refused = two_hostile_members(12)
    print(f"12 invented roots each: {arrived}/{sent} ARPs arrived, {refused} packet-ins refused at the next node")
    assert arrived == sent
