"""Duplicate address detection of a certified IPv6 address guarded (decision 0076, review21n N3): what the fix keeps
working and the ways around it the review did not name.

The attack itself is in `test_review21n_dad_probe_for_certified_address.py` (a member two hops from the owner V,
whose probe the switch between drops). Here: the probe from V's neighbour, which only V's own switch sees (its own
address is not among the certified ones it answers for: it is told apart, `SetOwnAddresses`); a unicast probe,
which rode 0072's flow to V's MAC; a probe under another root with V's MAC written in; the advertisement another
member answers V's probe with (which fails DAD as well), from two hops (0075's M1 drops it) and from V's neighbour;
and what still goes through: V's own probe, and a probe for an address nobody certified.
"""

from __future__ import annotations

import ipaddress

import pytest

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.frames import dad_probe
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_review21k_router_link_local_taken import neighbor_advert
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

NEIGHBOUR, TWO_HOPS = 1, 0  # of V = ids[2] on the ring: ids[1] has a tunnel to it, ids[0] does not


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(6)
    _certify_v6(net, ids, macs)  # V = ids[2] is fd00::3, certified at every other switch
    net.nodes[ids[2]].switch.own_certified = frozenset({ipaddress.IPv6Address(V6.format(3))})  # as the daemon tells
    net.advance(0.5)  # a tick: the guard flows go in
    return net, ids, macs


def _reaches_v(net: FakeNetwork, ids: list[int], sender: int, frame: bytes) -> tuple[bool, int]:
    """(whether `frame`, sent by `sender`'s interface, reached V's; CERTIFIED_ADDRESS_SPOOFED drops overall)."""
    v = ids[2]
    heard = len(net.nodes[v].received[1])
    net.inject(sender, 1, frame)
    return frame in net.nodes[v].received[1][heard:], sum(
        net.nodes[n].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] for n in ids)


@pytest.mark.parametrize("where", [NEIGHBOUR, TWO_HOPS])
def test_a_members_probe_for_vs_address_does_not_reach_v_from_any_distance(where: int) -> None:
    net, ids, macs = _setup()
    a = ids[where]
    delivered, drops = _reaches_v(net, ids, a, dad_probe(macs[a], V6.format(3)))
    assert not delivered
    assert drops == 2  # at each switch it reached: A's two neighbours


@pytest.mark.parametrize("where", [NEIGHBOUR, TWO_HOPS])
def test_a_unicast_probe_to_vs_mac_is_brought_to_the_guard_by_its_target(where: int) -> None:
    # Ethernet to V's MAC, IPv6 to the solicited-node group: V's kernel takes it as a probe. Without the flow by
    # target it rode 0072's `eth_dst=<V's MAC>` flow with no packet-in.
    net, ids, macs = _setup()
    a, v = ids[where], ids[2]
    probe = dad_probe(macs[a], V6.format(3))
    unicast = frb.parse_mac(macs[v]) + probe[6:]
    ins = sum(net.nodes[n].packet_ins for n in ids if n != a)
    delivered, drops = _reaches_v(net, ids, a, unicast)
    assert not delivered
    assert drops == 1
    assert sum(net.nodes[n].packet_ins for n in ids if n != a) - ins == 1  # at the first switch after A's


def test_a_probe_with_vs_mac_written_in_under_anothers_root_is_dropped() -> None:
    net, ids, macs = _setup()
    a, u = ids[TWO_HOPS], ids[5]
    forged = dad_probe(macs[ids[2]], V6.format(3))  # V's MAC as its source, flooded rooted at A
    heard = len(net.nodes[u].received[1])
    delivered, drops = _reaches_v(net, ids, a, forged)
    assert not delivered
    assert forged not in net.nodes[u].received[1][heard:]
    assert drops == 2


@pytest.mark.parametrize("where", [NEIGHBOUR, TWO_HOPS])
@pytest.mark.parametrize("sender_mac", ["own", "vs"])
def test_anothers_advertisement_answering_vs_probe_does_not_reach_v(where: int, sender_mac: str) -> None:
    # Linux answers a probe for an address it holds with an NA to all nodes; on V's tentative address any NA fails
    # DAD as a probe does (RFC 4862 5.4.4). Two hops away 0075's M1 drops it; from V's neighbour only V's switch sees
    # it, which drops any advertisement of its own address from a tunnel port. With V's MAC written in, V's switch
    # refuses a flood "from" its own interface's MAC as well.
    net, ids, macs = _setup()
    a, v = ids[where], ids[2]
    net.inject(v, 1, dad_probe(macs[v], V6.format(3)))  # V's probe, which A answers
    mac = macs[a] if sender_mac == "own" else macs[v]
    answer = neighbor_advert(mac, "33:33:00:00:00:01", V6.format(3), mac, solicited=False)
    delivered, _ = _reaches_v(net, ids, a, answer)
    assert not delivered
    unicast = neighbor_advert(mac, macs[v], V6.format(3), mac, solicited=False)
    delivered, _ = _reaches_v(net, ids, a, unicast)
    assert not delivered


def test_the_owners_probe_reaches_every_other_member_with_its_switch_told_its_address() -> None:
    net, ids, macs = _setup()
    v = ids[2]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    probe = dad_probe(macs[v], V6.format(3))
    net.inject(v, 1, probe)
    assert all(probe in net.nodes[n].received[1][heard[n]:] for n in ids if n != v)
    assert sum(net.nodes[n].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] for n in ids) == 0


def test_a_probe_for_an_address_nobody_certified_still_reaches_every_member() -> None:
    net, ids, macs = _setup()
    a = ids[TWO_HOPS]
    heard = {n: len(net.nodes[n].received[1]) for n in ids}
    probe = dad_probe(macs[a], "fd00::99")
    net.inject(a, 1, probe)
    assert all(probe in net.nodes[n].received[1][heard[n]:] for n in ids if n != a)


def test_the_owners_own_unicast_advertisement_still_reaches_u_at_a_packet_in_at_its_own_switch() -> None:
    # The flow by target for V's own address takes V's outgoing advertisements to V's controller too (the cost).
    net, ids, macs = _setup()
    u, v = ids[0], ids[2]
    na = neighbor_advert(macs[v], macs[u], V6.format(3), macs[v], solicited=True)
    heard = len(net.nodes[u].received[1])
    ins = net.nodes[v].packet_ins
    net.inject(v, 1, na)
    assert na in net.nodes[u].received[1][heard:]
    assert net.nodes[v].packet_ins - ins == 1
