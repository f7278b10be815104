"""A root's floods keep the way they came by first (review21f F6 residual without trust, decision 0033 amended):
a copy under that root by another peer brings MACs new here only at CONTESTED_NEW_RATE per port
(`frb_receive._contested`, `Drop.CONTESTED_ROOT`). The attack is in
tests/unit/sdn/test_review21f_shared_port_upstream_root.py; here its bound, and what honest overlays pay for it.
Real switches on the fake flow table."""

from __future__ import annotations

import random

import pytest

from evio.sdn import frb
from evio.sdn.frb_receive import CONTESTED_NEW_BURST, CONTESTED_NEW_RATE, ROOT_LINK_GRACE
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import host_mac, symphony_network
from evio.testing.frames import eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_review21f_shared_port_upstream_root import _off_path_attack
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, random_mac


def test_a_forger_off_the_roots_tree_gets_at_most_the_contested_rate_of_new_macs_past_the_node() -> None:
    at_w, got, victim, hostile, _ = _off_path_attack(owners=False)
    assert at_w is not None and got[victim] == 1000 and got[hostile] == 0


def test_the_contested_budget_bounds_what_passes_the_node_where_the_ways_meet() -> None:
    from evio.testing.fake_flow_table import FakeNetwork
    from tests.unit.sdn.test_sdn_port_bounds import forged

    net = FakeNetwork(flow_idle_timeout=30)
    ids = [(i + 1) << 120 | (i + 1) for i in range(7)]
    for nid in ids:
        net.add_node(nid)
    for i, nid in enumerate(ids):
        net.connect(nid, ids[(i + 1) % 7])
    victim, hostile, x, q, w = ids[:5]
    net.connect(victim, x)
    net.connect(hostile, q)
    told_members(net, ids)
    net.now = 1.0
    net.inject(victim, 1, eth(BROADCAST, host_mac(net, victim), 0x0806))
    rng = random.Random(5)
    for i in range(3000):  # 30 s at the root's flood share
        net.now = 2.0 + i / 100
        net.from_neighbour(q, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), victim, ids[6], hops=2))
    under_root_at_w = len(net.nodes[w].switch.learning.root_bridges().get(victim, ()))
    dropped = net.nodes[q].switch.drops[Drop.CONTESTED_ROOT]
    bound = CONTESTED_NEW_BURST + CONTESTED_NEW_RATE * 30 + 1
    print(f"MACs under the root at w: {under_root_at_w} (bound {bound:.0f}); CONTESTED_ROOT at q: {dropped}")
    assert under_root_at_w <= bound  # the root's own host and what the budget let through
    assert dropped >= 3000 - bound


def test_an_honest_ring_with_churning_chords_and_new_hosts_loses_no_flood_to_the_rule() -> None:
    """Symphony-like ring of 16, two chords each, three replaced in each of 12 rounds (trees move), every node
    broadcasting from a host new in every round: every broadcast delivered exactly once, nothing dropped as
    CONTESTED_ROOT or IMPLAUSIBLE_FRB, and every new host then reached by its flows."""
    net, ids, links = symphony_network(n=16, seed=11, long_distance=2)
    told_members(net, ids)
    ring = {tuple(sorted((a, ids[(i + 1) % len(ids)]))) for i, a in enumerate(ids)}
    chords = sorted(set(links) - ring)
    rng = random.Random(11)
    net.now = 1.0
    hosts: dict[int, str] = {}
    for round_no in range(12):
        for a, b in rng.sample(chords, 3):
            net.disconnect(a, b)
            chords.remove((a, b))
        while len(chords) < len(links) - len(ring):
            a, b = sorted(rng.sample(ids, 2))
            if (a, b) not in ring and (a, b) not in chords:
                net.connect(a, b)
                chords.append((a, b))
        net.advance(0.1 if round_no % 2 else ROOT_LINK_GRACE + 1)
        for nid in ids:
            hosts[nid] = random_mac(rng)  # a new host behind each node, in every round
            frame = eth(BROADCAST, hosts[nid], 0x0806) + round_no.to_bytes(4, "big")
            net.inject(nid, 1, frame)
            missed = [f"{o:x}" for o in ids if o != nid and sum(1 for f in net.nodes[o].received[1] if f == frame) != 1]
            assert not missed, f"round {round_no}: {nid:x}'s broadcast not delivered exactly once at {missed}"
    contested = sum(node.switch.drops[Drop.CONTESTED_ROOT] for node in net.nodes.values())
    implausible = sum(node.switch.drops[Drop.IMPLAUSIBLE_FRB] for node in net.nodes.values())
    assert (contested, implausible) == (0, 0)
    for src, dst in [rng.sample(ids, 2) for _ in range(20)]:
        frame = eth(hosts[dst], host_mac(net, src)) + b"unicast"
        before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
        net.inject(src, 1, frame)
        got = [nid for nid in ids if net.nodes[nid].received[1][before[nid]:].count(frame)]
        assert got == [dst]


def test_the_ways_held_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from evio.sdn import frb_receive

    monkeypatch.setattr(frb_receive, "FLOOD_WAYS", 3)
    net, ids, _ = symphony_network(n=8, seed=3, long_distance=1)
    told_members(net, ids)
    net.now = 1.0
    for nid in ids:
        net.inject(nid, 1, eth(BROADCAST, host_mac(net, nid), 0x0806))
    assert all(len(node.switch._flood_ways) <= 3 for node in net.nodes.values())
    net.now += 301.0  # all stale: new roots' ways are held again
    net.inject(ids[0], 1, eth(BROADCAST, host_mac(net, ids[0]), 0x0806))
    assert any((ids[0], kind) in net.nodes[ids[4]].switch._flood_ways for kind in frb.FrbType)


def _moved_under_churn(keep_ways: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Trust mode (every node's interface MAC told as its own), a Symphony-like ring of 16 whose chords churn (three
    replaced in each of 12 rounds), every interface broadcasting in every round from the same MAC, then 20 unicast
    frames between random members each round, each of which must reach its member only: (moves of MACs at all
    nodes, copies under their MAC's root that did not move it because its way still brings the root's floods)."""
    from evio.sdn import frb_receive
    from evio.sdn.learning_table import Change, LearningTable

    if not keep_ways:
        monkeypatch.setattr(frb_receive, "_keeps_its_way", lambda *args: False)
    changes: list[Change] = []
    learn = LearningTable.learn

    def counting(self: LearningTable, *args: object, **kwargs: object) -> object:
        learned = learn(self, *args, **kwargs)  # type: ignore[arg-type]
        if learned.change is Change.MOVED or (kwargs.get("stay") and learned.change is Change.HELD):
            changes.append(learned.change)
        return learned

    monkeypatch.setattr(LearningTable, "learn", counting)
    net, ids, links = symphony_network(n=16, seed=11, long_distance=2)
    told_members(net, ids)
    macs = {nid: host_mac(net, nid) for nid in ids}
    net.tell_owners({mac: nid for nid, mac in macs.items()})
    ring = {tuple(sorted((a, ids[(i + 1) % len(ids)]))) for i, a in enumerate(ids)}
    chords = sorted(set(links) - ring)
    rng = random.Random(11)
    net.now = 1.0
    for round_no in range(12):
        for a, b in rng.sample(chords, 3):
            net.disconnect(a, b)
            chords.remove((a, b))
        while len(chords) < len(links) - len(ring):
            a, b = sorted(rng.sample(ids, 2))
            if (a, b) not in ring and (a, b) not in chords:
                net.connect(a, b)
                chords.append((a, b))
        net.advance(ROOT_LINK_GRACE + 1 if round_no % 2 else 61.0)  # now and then past a path's hold
        for nid in ids:
            net.inject(nid, 1, eth(BROADCAST, macs[nid], 0x0806) + round_no.to_bytes(4, "big"))
        for src, dst in [rng.sample(ids, 2) for _ in range(20)]:
            frame = eth(macs[dst], macs[src]) + b"unicast" + round_no.to_bytes(4, "big")
            before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
            net.inject(src, 1, frame)
            got = [nid for nid in ids if net.nodes[nid].received[1][before[nid]:].count(frame)]
            assert got == [dst], f"round {round_no}: {src:x} -> {dst:x} reached {[f'{g:x}' for g in got]}"
    return changes.count(Change.MOVED), changes.count(Change.HELD)


def test_in_trust_mode_certified_macs_follow_their_roots_trees_as_chords_churn(monkeypatch: pytest.MonkeyPatch) -> None:
    """review21i I4's rule (a certified MAC stays on the way its root's floods still come by) against honest churn:
    every unicast frame reaches its member and only it, and the MACs still move as the trees do."""
    moved, held = _moved_under_churn(True, monkeypatch)
    print(f"with the rule: {moved} moves, {held} copies held by their root's way")
    assert moved > 0 and held > 0


def test_a_certified_mac_follows_its_root_when_a_link_on_its_path_goes() -> None:
    """u = ids[0] places V = ids[2]'s certified MAC by ids[1]; the link V-ids[1] goes. V's floods now come to u only
    by ids[7] (its other direction's copies no longer reach u at all), so nothing says the way by ids[1] moved: it is
    held until it has brought nothing for a MAC's max age, and then the MAC follows at V's next broadcast (before the
    rule: at the first one past PATH_HOLD). The price of review21i I4's rule, pinned: the bound is the max age."""
    from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

    net, ids, macs, _ = trusted_ring(8)
    u, v = ids[0], ids[2]
    sw = net.nodes[u].switch
    net.inject(v, 1, eth(BROADCAST, macs[v], 0x0806) + b"before")  # both of V's ways held at u, by ids[1]
    last_by_ids1 = net.now
    net.advance(1.0)
    net.disconnect(v, ids[1])
    followed_at = None
    for i in range(12):  # V's interface broadcasts every 30 s
        net.advance(30.0)
        net.inject(v, 1, eth(BROADCAST, macs[v], 0x0806) + i.to_bytes(2, "big"))
        entry = sw.learning.lookup(macs[v], net.now)
        if entry is not None and entry.port == net.port_towards(u, ids[7]):
            followed_at = net.now - last_by_ids1
            break
    print(f"V's MAC followed {followed_at} s after the last copy by ids[1]")
    assert followed_at is not None and sw.learning.max_age <= followed_at < sw.learning.max_age + 31
    heard = len(net.nodes[v].received[1])
    for i in range(10):
        net.inject(u, 1, eth(macs[v], macs[u], payload=b"x" * 40 + bytes([i])))
    assert sum(1 for f in net.nodes[v].received[1][heard:] if f[6:12] == frb.parse_mac(macs[u])) == 10
