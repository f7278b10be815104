"""On-demand links: flow byte counters -> rates -> traffic per root node -> want / idle decisions.

The policy is driven with a fake clock (`FakeNetwork.now`) and a fake stats
feed (`FakeFlowTable.byte_counts`, counted as frames cross the fake flows).
"""

from __future__ import annotations

import pytest

from evio.config.model import OnDemandConfig
from evio.sdn.boundary import AttachOverlay, OnDemandIdle, OnDemandWanted
from evio.sdn.flow_actions import FlowMatch
from evio.sdn.on_demand import FlowRates, OnDemandPolicy, ReleaseOnDemand, WantOnDemand, traffic_by_peer
from evio.sdn.overlay_switch import OverlaySwitch
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import arp_reply, arp_request, eth

A, B, C, D = 0xA0, 0xB0, 0xC0, 0xD0
M1 = FlowMatch(1, "02:00:00:00:00:01", "02:00:00:00:00:02")
M2 = FlowMatch(1, "02:00:00:00:00:01", "02:00:00:00:00:03")


def policy(**kw: object) -> OnDemandPolicy:
    settings = dict(enabled=True, max_links=2, threshold_bytes_per_s=1000.0, idle_timeout=30.0) | kw
    return OnDemandPolicy(OnDemandConfig(**settings))  # type: ignore[arg-type]


# ---------------------------------------------------------------- rates


def test_rates_are_byte_deltas_over_the_poll_interval_and_survive_flow_churn() -> None:
    rates = FlowRates()
    assert rates.update({M1: 5000}, now=10.0) == {}  # first poll: no interval yet
    assert rates.update({M1: 15000, M2: 2000}, now=12.0) == {M1: 5000.0, M2: 1000.0}  # M2 new: counts from 0
    assert rates.update({M1: 300}, now=13.0) == {M1: 300.0}  # deleted and added again: counter restarted
    rates.reset()
    assert rates.update({M1: 9999}, now=14.0) == {}


def test_rates_polled_every_half_second_are_judged_over_the_last_second() -> None:
    rates = FlowRates(window=1.0)
    assert rates.update({M1: 0}, now=0.0) == {}
    assert rates.update({M1: 0}, now=0.5) == {M1: 0.0}
    # A short burst: 600 bytes within one half-second reads as 600 B/s, not the 1200 a half-second
    # window would give, on both polls whose last second holds it.
    assert rates.update({M1: 600}, now=1.0) == {M1: 600.0}
    assert rates.update({M1: 600}, now=1.5) == {M1: 600.0}
    assert rates.update({M1: 600}, now=2.0) == {M1: 0.0}
    # A new flow counts from zero over the whole span: a busy one is seen on the first poll that has it.
    assert rates.update({M1: 600, M2: 5_000_000}, now=2.5) == {M1: 0.0, M2: 5_000_000.0}
    # A late poll stretches the span; nothing shortens it below the window.
    assert rates.update({M1: 2100, M2: 5_000_000}, now=4.0) == {M1: 1000.0, M2: 0.0}
    with pytest.raises(ValueError):
        FlowRates(window=-1.0)


# ---------------------------------------------------------------- policy alone (fake clock, fake feed)


def test_busy_non_adjacent_peer_is_wanted_once_and_released_after_idle_timeout() -> None:
    p = policy()
    assert p.update(0.0, {C: 5000.0}, adjacent={B}) == [WantOnDemand(C, 5000.0)]
    assert p.update(5.0, {C: 5000.0}, adjacent={B}) == []  # asked already
    assert p.update(10.0, {C: 8000.0}, adjacent={B, C}) == []  # link up, still busy
    assert p.update(20.0, {C: 10.0}, adjacent={B, C}) == []  # quiet since 10
    assert p.update(39.9, {}, adjacent={B, C}) == []
    assert p.update(40.0, {}, adjacent={B, C}) == [ReleaseOnDemand(C)]
    assert p.wanted == frozenset()


def test_adjacent_and_slow_peers_are_never_wanted() -> None:
    p = policy()
    assert p.update(0.0, {B: 1e9, C: 999.0}, adjacent={B}) == []


def test_at_most_max_links_are_wanted_the_busiest_first() -> None:
    p = policy(max_links=2)
    decisions = p.update(0.0, {B: 2000.0, C: 9000.0, D: 5000.0}, adjacent=set())
    assert decisions == [WantOnDemand(C, 9000.0), WantOnDemand(D, 5000.0)]
    # When one goes idle, room opens for the next busy peer.
    assert p.update(30.0, {D: 5000.0, B: 2000.0}, adjacent={C, D}) == [ReleaseOnDemand(C), WantOnDemand(B, 2000.0)]


def test_disabled_policy_never_asks() -> None:
    assert policy(enabled=False).update(0.0, {C: 1e9}, adjacent=set()) == []


def test_reconfigured_policy_keeps_its_wishes_unless_disabled() -> None:
    p = policy()
    assert p.update(0.0, {C: 5000.0}, adjacent=set()) == [WantOnDemand(C, 5000.0)]
    p.reconfigure(OnDemandConfig(max_links=2, threshold_bytes_per_s=1000.0, idle_timeout=5.0))
    assert p.update(5.0, {}, adjacent={C}) == [ReleaseOnDemand(C)]  # the new, shorter idle timeout
    assert p.update(6.0, {C: 5000.0}, adjacent=set()) == [WantOnDemand(C, 5000.0)]
    p.reconfigure(OnDemandConfig(enabled=False))
    assert p.wanted == frozenset()  # the overlay controller drops the links itself; no release will come
    with pytest.raises(ValueError):
        p.reconfigure(OnDemandConfig(idle_timeout=0.0))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        policy(threshold_bytes_per_s=0.0)


# ---------------------------------------------------------------- over the fake network


def overlay_switch_for(net: FakeNetwork, nid: int, on_demand: OnDemandConfig) -> OverlaySwitch:
    """An OverlaySwitch around the fake network's switch for `nid` (as the app keeps one per bridge)."""
    node = net.nodes[nid]
    ov = OverlaySwitch(AttachOverlay("red", 1, nid, on_demand=on_demand))
    ov.switch = node.switch
    return ov


def test_traffic_is_summed_by_the_root_of_the_remote_mac_in_both_directions_but_not_in_transit() -> None:
    net, ids = ring_network(6)
    a, c = ids[0], ids[3]
    ma, mc = host_mac(net, a), host_mac(net, c)
    net.inject(a, 1, arp_request(ma))  # everyone learns ma with root a
    net.inject(c, 1, arp_reply(mc, ma))  # a learns mc from a unicast frame: no root
    for _ in range(10):
        net.inject(a, 1, eth(mc, ma, payload=b"\x00" * 986))  # 1000-byte frames
        net.inject(c, 1, eth(ma, mc, payload=b"\x00" * 486))  # 500-byte frames
    c_node = net.nodes[c]
    rates = {m: b / 2.0 for m, b in c_node.table.byte_counts().items()}  # as if over 2 s
    # c knows a's root: what it received and what it sent both count towards a. Frames that went
    # through the controller (a's first one to c) are not in a flow's counter.
    assert traffic_by_peer(c_node.switch, rates, net.now) == {a: (9 * 1000 + 10 * 500) / 2.0}
    # a does not know c's root (learned from unicast): nothing to act on there; c will.
    a_node = net.nodes[a]
    assert traffic_by_peer(a_node.switch, {m: b / 2.0 for m, b in a_node.table.byte_counts().items()}, net.now) == {}
    # Intermediate nodes carry the frames but never count them.
    for mid in ids[1:3] + ids[4:]:
        node = net.nodes[mid]
        assert traffic_by_peer(node.switch, {m: 1e9 for m in node.table.flows}, net.now) == {}


def test_sustained_traffic_to_a_distant_node_asks_for_a_link_and_idle_releases_it() -> None:
    net, ids = ring_network(6)
    a, c = ids[0], ids[3]
    ma, mc = host_mac(net, a), host_mac(net, c)
    settings = OnDemandConfig(enabled=True, max_links=1, threshold_bytes_per_s=50_000, idle_timeout=20)
    ov = overlay_switch_for(net, c, settings)
    net.inject(a, 1, arp_request(ma))
    net.inject(c, 1, arp_reply(mc, ma))

    def second_of_traffic(frames: int) -> list:
        for _ in range(frames):
            net.inject(a, 1, eth(mc, ma, payload=b"\x00" * 1486))  # 1500-byte frames, a -> c
        net.advance(1.0)
        return ov.flow_stats(net.nodes[c].table.byte_counts(), net.now)

    assert second_of_traffic(10) == []  # first poll: no rate yet
    assert second_of_traffic(10) == []  # 15 kB/s: below the threshold
    (wanted,) = second_of_traffic(100)  # 150 kB/s
    assert isinstance(wanted, OnDemandWanted) and (wanted.overlay, wanted.peer) == ("red", a)
    assert wanted.bytes_per_s == pytest.approx(150_000)

    # The overlay controller makes the link: the leaf announcements move both ends onto it.
    pa, pc = net.connect(a, c)
    net.inject(a, 1, eth(mc, ma))
    a_flows = [f for f in net.nodes[a].table.flows.values() if f.match.eth_dst == mc]
    assert [f.out_port for f in a_flows] == [pa]
    for _ in range(5):
        assert second_of_traffic(100) == []  # busy on the direct link: kept
    events = []
    for _ in range(25):
        events += second_of_traffic(0)
    assert events == [OnDemandIdle("red", a)]
    assert ov.on_demand.wanted == frozenset()
