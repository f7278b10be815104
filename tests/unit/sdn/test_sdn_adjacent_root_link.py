"""An adjacent root's floods come by its own link (review21f F6, `frb_receive._detours_its_root`): a root hands every
flood, both ways round, to each of its peers itself, so once the root's end of our link stands (its leaf announcement
came) and `ROOT_LINK_GRACE` passed, a copy under it by another peer is forged and dropped (IMPLAUSIBLE_FRB). Honest
overlays lose nothing by it: Symphony-like rings with chords coming and going deliver every broadcast exactly once,
and a link whose far end is not up yet lets the root's floods in by the long way. Real switches on the fake flow table.
"""

from __future__ import annotations

import random

from evio.sdn import frb
from evio.sdn.frb_receive import ROOT_LINK_GRACE
from evio.sdn.switch import Drop, PortKind, SwitchPort
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network, symphony_network
from evio.testing.frames import eth
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged, random_mac


def _implausible(net: FakeNetwork) -> int:
    return sum(node.switch.drops[Drop.IMPLAUSIBLE_FRB] for node in net.nodes.values())


def _arp(net: FakeNetwork, nid: int, tag: int) -> bytes:
    return eth(BROADCAST, host_mac(net, nid), 0x0806) + tag.to_bytes(4, "big")


def _copies(net: FakeNetwork, nid: int, frame: bytes) -> int:
    return sum(1 for f in net.nodes[nid].received[1] if f == frame)


def _broadcast_everywhere(net: FakeNetwork, ids: list[int], tag: int) -> None:
    """Every node's host broadcasts once; every other node's host gets it exactly once."""
    for i, nid in enumerate(ids):
        frame = _arp(net, nid, tag * 1000 + i)
        net.inject(nid, 1, frame)
        missed = [f"{other:x}" for other in ids if other != nid and _copies(net, other, frame) != 1]
        assert not missed, f"round {tag}: {nid:x}'s broadcast not delivered exactly once at {missed}"


def test_an_honest_ring_with_chords_and_churn_drops_no_flood_and_learns_every_host() -> None:
    net, ids, links = symphony_network(n=16, seed=11, long_distance=2)
    told_members(net, ids)
    ring = {tuple(sorted((a, ids[(i + 1) % len(ids)]))) for i, a in enumerate(ids)}
    chords = sorted(set(links) - ring)
    rng = random.Random(11)
    net.now = 1.0
    for round_no in range(12):
        # Some chords go, others come (Symphony replacing long links, on-demand links): both ends at once.
        for a, b in rng.sample(chords, 3):
            net.disconnect(a, b)
            chords.remove((a, b))
        while len(chords) < len(links) - len(ring):
            a, b = sorted(rng.sample(ids, 2))
            if (a, b) not in ring and (a, b) not in chords:
                net.connect(a, b)
                chords.append((a, b))
        # Half the rounds broadcast within the grace after the new links came, half well past it.
        net.advance(0.1 if round_no % 2 else ROOT_LINK_GRACE + 1)
        _broadcast_everywhere(net, ids, round_no)
    assert _implausible(net) == 0
    # Every host is learned where it is: a unicast frame to it takes its flows, no flood.
    for src, dst in [rng.sample(ids, 2) for _ in range(20)]:
        frame = eth(host_mac(net, dst), host_mac(net, src)) + b"unicast"
        before = {nid: _copies(net, nid, frame) for nid in ids}
        net.inject(src, 1, frame)
        got = [nid for nid in ids if _copies(net, nid, frame) > before[nid]]
        assert got == [dst]


def _chorded_ring() -> tuple[FakeNetwork, list[int]]:
    """The ring of 6 of F6: the root (0) linked to the node past its successor (2) too."""
    net, ids = ring_network(6)
    told_members(net, ids)
    net.connect(ids[0], ids[2])
    return net, ids


def test_a_forged_copy_under_an_adjacent_root_by_another_way_is_dropped_in_either_orientation() -> None:
    net, ids = _chorded_ring()
    root, hostile, q, u = ids[0], ids[1], ids[2], ids[3]
    rng = random.Random(1)
    net.now = ROOT_LINK_GRACE + 1
    before = len(net.nodes[u].received[1])
    # Clockwise from a member behind q, and counter-clockwise from one past it: both plausible by position alone.
    net.from_neighbour(q, hostile, forged(eth(BROADCAST, random_mac(rng), 0x0806), root, ids[5], hops=2))
    net.from_neighbour(q, u, forged(eth(BROADCAST, random_mac(rng), 0x0806)[:14], root, hostile, hops=4,
                                    kind=frb.FrbType.BROADCAST_REVERSE))
    assert net.nodes[q].switch.drops[Drop.IMPLAUSIBLE_FRB] == 2
    assert len(net.nodes[u].received[1]) == before  # nothing passed on
    assert len(net.nodes[q].switch.learning.root_bridges().get(root, ())) == 1  # the root's own host only


def test_within_the_grace_after_the_link_came_a_copy_by_the_long_way_still_passes() -> None:
    net, ids = _chorded_ring()  # the chord's announcements came at time 0
    root, hostile, q = ids[0], ids[1], ids[2]
    frame = eth(BROADCAST, random_mac(random.Random(2)), 0x0806)
    net.now = ROOT_LINK_GRACE / 2  # the root may have sent this the long way round before it had the chord
    net.from_neighbour(q, hostile, forged(frame, root, ids[5], hops=2))
    assert net.nodes[q].switch.drops[Drop.IMPLAUSIBLE_FRB] == 0
    assert _copies(net, q, frame) == 1


def _one_end(net: FakeNetwork, a: int, b: int) -> int:
    """a's end of a link to b whose other end is not on b's bridge: what a sends on it is lost."""
    node = net.nodes[a]
    port = node.allocate_port()
    net._execute(node, node.switch.port_added(SwitchPort(port, f"t{b:x}"[:15], PortKind.PEER, b), net.now))
    return port


def test_while_the_roots_end_of_a_new_link_is_not_up_its_floods_come_the_long_way_and_pass() -> None:
    net, ids = ring_network(6)
    told_members(net, ids)
    root, q = ids[0], ids[2]
    _one_end(net, q, root)  # q's end is up, the root's not yet (the two ends come 0.02-0.2 s apart, or more)
    net.now = 10.0
    frame = _arp(net, root, 1)
    net.inject(root, 1, frame)
    assert all(_copies(net, nid, frame) == 1 for nid in ids[1:])
    assert _implausible(net) == 0


def test_while_q_still_holds_a_link_the_root_dropped_the_roots_floods_by_the_long_way_are_lost_at_q() -> None:
    """The rule's cost, pinned: the root's end of a link went first (its liveness saw the tunnel dead first, at most
    about one echo interval, 1.5 s, before ours; the link carried nothing meanwhile), and until q's end goes too, the
    root's floods that come round the ring are dropped at q and the nodes q passes them to. Then they flow again."""
    net, ids = _chorded_ring()
    root, q = ids[0], ids[2]
    root_node = net.nodes[root]
    net._execute(root_node, root_node.switch.port_removed(net.port_towards(root, q), net.now))
    net.now = ROOT_LINK_GRACE + 1
    frame = _arp(net, root, 1)
    net.inject(root, 1, frame)
    assert [_copies(net, nid, frame) for nid in ids[1:]] == [1, 0, 0, 0, 1]  # q and the two it passes on to
    assert net.nodes[q].switch.drops[Drop.IMPLAUSIBLE_FRB] == 2  # the broadcast and its reverse copy
    q_node = net.nodes[q]
    net._execute(q_node, q_node.switch.port_removed(net.port_towards(q, root), net.now))
    frame = _arp(net, root, 2)
    net.inject(root, 1, frame)
    assert all(_copies(net, nid, frame) == 1 for nid in ids[1:])
