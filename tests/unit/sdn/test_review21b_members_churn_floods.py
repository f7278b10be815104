"""review21b: what the members-set churn (tests/unit/node/test_review21b_members_churn.py) buys at the switch.

The hostile members first cycle their presence through the invented roots they will flood under, so the daemon
tells every switch those roots are members; review21's two-hostile-members storm then crowds out a third
member's ARP again, as before SetMembers."""

from __future__ import annotations

from tests.unit.sdn import test_review21_flood_roots as roots_test


class Churned(frozenset):  # type: ignore[type-arg]
    """The members set after the churn: the real members and every id the hostile accounts announced once."""

    def __contains__(self, item: object) -> bool:
        return True


# Fixed at the node since: an id an account stops announcing leaves the members set (one id per account;
# tests/unit/node/test_review21b_members_churn.py). Here the switch is handed the churned set as if it had not;
# fixed at the switch too since: a port's floods share one total among their roots (evio/sdn/flood_shares.py).
def test_invented_roots_announced_once_in_presence_crowd_out_a_third_members_arp(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def told(net, ids):  # type: ignore[no-untyped-def]
        for nid in ids:
            net.nodes[nid].switch.members = Churned(ids)

    monkeypatch.setattr(roots_test, "told_members", told)
    sent, arrived, refused = roots_test.two_hostile_members(12)
    print(f"12 churned-in roots each: {arrived}/{sent} ARPs arrived, {refused} packet-ins refused at the next node")
    assert arrived == sent


def real_members_as_roots(n: int, seconds: float = 3.0) -> tuple[int, int, int]:
    """review21's two-hostile-members storm, in a ring of `n` members the daemon knows from presence (no churn,
    no invented id): the hostile members, the first node's ring predecessor and the one before it (by a chord),
    name the real members upstream of them as the roots of their forged floods, each flood bounded at its root
    (plausible by `_plausible`: every root lies behind the sender). A host on the first node ARPs 10 times a
    second; returns (sent, arrived 3 hops on, packet-ins refused at the next node)."""
    import random

    from evio.sdn import frb
    from evio.sdn.switch import Drop
    from evio.testing.fake_flow_table import host_mac
    from evio.testing.fake_flow_table import ring_network as ring
    from evio.testing.frames import eth
    from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac

    net, ids = ring(n)
    for nid in ids:
        net.nodes[nid].switch.members = frozenset(ids)
    first_hop, second, target, hostile, hostile2 = ids[0], ids[1], ids[3], ids[-1], ids[-2]
    net.connect(first_hop, hostile2)
    victim_mac = host_mac(net, first_hop)
    rng = random.Random(11)
    roots1 = ids[4:-1] if n > 6 else [hostile]  # behind hostile, past the target: each a member
    roots2 = ids[4:-2] if n > 6 else [hostile2]
    net.now = 1.0
    start, t0, arps = len(net.nodes[target].received[1]), net.now + 1, 0
    for i in range(int(seconds * 1000)):
        net.now = t0 + i / 1000
        r1, r2 = roots1[i % len(roots1)], roots2[i % len(roots2)]
        net.from_neighbour(first_hop, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), r1, r1))
        net.from_neighbour(first_hop, hostile2, forged(eth(BROADCAST, random_mac(rng), 0x0806), r2, r2))
        if i % 100 == 0:
            arps += 1
            net.inject(first_hop, 1, eth(BROADCAST, victim_mac, 0x0806)[:38] + arps.to_bytes(4, "big") + b"a" * 18)
    at = net.nodes[target].received[1][start:]
    arrived = sum(1 for f in at if f[6:12] == frb.parse_mac(victim_mac))
    print("drops at the first hop:", dict(net.nodes[first_hop].switch.drops))
    return arps, arrived, net.nodes[second].switch.drops[Drop.RATE_LIMITED]


def test_real_members_as_roots_in_a_small_overlay_leave_others_arp_alone() -> None:
    sent, arrived, refused = real_members_as_roots(6)
    print(f"6 members, own roots only: {arrived}/{sent} ARPs arrived, {refused} refused")
    assert arrived == sent


# Fixed since: a port's floods share one total among their roots, evenly (evio/sdn/flood_shares.py).
def test_two_hostile_members_naming_real_members_as_roots_crowd_out_a_third_members_arp() -> None:
    sent, arrived, refused = real_members_as_roots(30)
    print(f"30 members, 25 of them named as roots: {arrived}/{sent} ARPs arrived, {refused} packet-ins refused"
          " at the next node")
    assert arrived == sent
