"""The signed documents' flood (0x88B5) is delivered only under its source MAC's owner's root (decision 0043, amended
for review21l L4): the daemon reading it off the bridge's interface knows a sender by its MAC alone.

Over the fake network (real switch logic, a ring of 6 whose interfaces' MACs are announced, signed): a broadcast a
member floods under its own root from another member's MAC reaches no interface and goes no further; the same
from its own MAC, or the owner's own, reaches every interface; other traffic from another's MAC keeps 0055's rule
(not learned, delivered).
"""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.sdn.flooding_bounds import root_bounds
from evio.sdn.switch_terms import SIGNED_DOCUMENTS_ETHERTYPE, Drop
from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.frames import eth
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def flood_from(net: FakeNetwork, ids: list[int], member: int, inner: bytes) -> None:
    """`member`'s daemon floods `inner` into its tunnels under its own root, with the bounds its switch writes."""
    at = ids.index(member)
    peers = [ids[(at + 1) % len(ids)], ids[at - 1]]
    for peer, bound in root_bounds(member, peers).items():
        net.from_neighbour(peer, member, frb.pack(frb.broadcast(inner, member, bound, 1)))


def reached(net: FakeNetwork, ids: list[int], inner: bytes, before: dict[int, int]) -> list[int]:
    return [nid for nid in ids if inner in net.nodes[nid].received[1][before[nid]:]]


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "VLAN 5"])
def test_a_document_broadcast_from_another_members_mac_reaches_no_interface(tagged: bool) -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, v = ids[2], ids[4]
    inner = eth(frb.BROADCAST_MAC, macs[v], SIGNED_DOCUMENTS_ETHERTYPE, b"EVRL" + bytes(42))
    if tagged:  # (a VLAN-0 tag, or two, the guards refuse before: neighbor_guard.as_received)
        inner = inner[:12] + b"\x81\x00\x00\x05" + inner[12:]
    before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
    flood_from(net, ids, a, inner)
    refused = sum(net.nodes[nid].switch.drops[Drop.DOCUMENT_NOT_ITS_OWNERS] for nid in ids)
    print(f"A's document broadcast from V's MAC reached {len(reached(net, ids, inner, before))} interfaces; "
          f"refused by {refused} switches")
    assert reached(net, ids, inner, before) == []
    assert refused == 2  # A's two neighbours: passed on by neither


def test_a_document_broadcast_from_the_members_own_mac_reaches_every_other_interface() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a = ids[2]
    inner = eth(frb.BROADCAST_MAC, macs[a], SIGNED_DOCUMENTS_ETHERTYPE, b"EVRL" + bytes(42))
    before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
    flood_from(net, ids, a, inner)
    assert reached(net, ids, inner, before) == [nid for nid in ids if nid != a]
    # and an honest node's own, from its interface through its own switch
    v = ids[4]
    own = eth(frb.BROADCAST_MAC, macs[v], SIGNED_DOCUMENTS_ETHERTYPE, b"EVML" + bytes(42))
    before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
    net.inject(v, 1, own)
    assert reached(net, ids, own, before) == [nid for nid in ids if nid != v]
    assert sum(net.nodes[nid].switch.drops[Drop.DOCUMENT_NOT_ITS_OWNERS] for nid in ids) == 0


def test_other_traffic_from_another_members_mac_is_refused_learning_but_delivered_as_before() -> None:
    net, ids, macs, _ = trusted_ring(6)
    a, v = ids[2], ids[4]
    inner = eth(frb.BROADCAST_MAC, macs[v], 0x88B7, bytes(46))
    before = {nid: len(net.nodes[nid].received[1]) for nid in ids}
    flood_from(net, ids, a, inner)
    assert reached(net, ids, inner, before) == [nid for nid in ids if nid not in (a, v)]  # V's: its own MAC
    assert sum(net.nodes[nid].switch.drops[Drop.NOT_ANNOUNCER] for nid in ids) >= 1
