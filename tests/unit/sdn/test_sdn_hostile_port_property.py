"""Property (issue 21, property test 1): a hostile port drives random frames and FRBs through the real switch
logic and the fake flow table of a small ring; per-port caps hold, and no other member's MAC and no leaf
MAC moves on any node, while the members it claims are heard more often than the move hold."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evio.ids import MAX_NODE_ID
from evio.sdn import frb
from evio.sdn.garp import gratuitous_arp
from evio.sdn.learning_table import MOVE_HOLD
from evio.testing.fake_flow_table import FakeNetwork
from evio.testing.frames import eth

N = 6
IDS = [(i + 1) << 120 | (i + 1) for i in range(N)]
HOSTILE = IDS[5]
NEIGHBOURS = (IDS[4], IDS[0])  # the hostile member's tunnels
HONEST = IDS[:5]
MAX_MACS, MAX_FLOWS = 64, 12  # small caps, so random traffic reaches them
BROADCAST = "ff:ff:ff:ff:ff:ff"


def mac_of(nid: int) -> str:
    return "fe:" + (nid & 0xFF_FFFF_FFFF).to_bytes(5, "big").hex(":")  # FakeNetwork's internal-port MAC


HOSTS = [mac_of(n) for n in HONEST]
INVENTED = [f"02:66:00:00:00:{i:02x}" for i in range(40)]

macs = st.sampled_from(HOSTS + INVENTED)
roots = st.one_of(st.sampled_from(IDS), st.integers(1, MAX_NODE_ID))
frames = st.one_of(
    st.tuples(st.just("frame"), st.sampled_from(NEIGHBOURS), macs, st.sampled_from([*HOSTS, *INVENTED, BROADCAST])),
    st.tuples(st.just("flood"), st.sampled_from(NEIGHBOURS), macs, roots, roots, st.integers(1, 8),
              st.booleans()),
    st.tuples(st.just("announce"), st.sampled_from(NEIGHBOURS), st.lists(macs, max_size=6), roots),
    st.tuples(st.just("tick"), st.sampled_from([0.1, 0.5, 1.0, 2.0])),
)


def ring() -> FakeNetwork:
    net = FakeNetwork(flow_idle_timeout=30, max_macs=MAX_MACS, max_flows_per_port=MAX_FLOWS)
    for nid in IDS:
        net.add_node(nid)
    for i, nid in enumerate(IDS):
        net.connect(nid, IDS[(i + 1) % N])
    return net


def everyone_speaks(net: FakeNetwork) -> None:
    for i, nid in enumerate(HONEST):
        net.inject(nid, 1, gratuitous_arp(HOSTS[i], f"10.0.0.{i + 1}"))


def hostile_sends(net: FakeNetwork, step: tuple[Any, ...]) -> None:
    kind, to = step[0], step[1]
    if kind == "frame":
        _, _, src, dst = step
        net.from_neighbour(to, HOSTILE, eth(dst, src))
    elif kind == "flood":
        _, _, src, root, bound, hops, reverse = step
        inner = eth(BROADCAST, src, 0x0806)
        frame = (frb.broadcast(inner[:14], root, bound, hops, frb.FrbType.BROADCAST_REVERSE) if reverse
                 else frb.broadcast(inner, root, bound, hops))
        net.from_neighbour(to, HOSTILE, frb.pack(frame))
    else:
        _, _, leaves, root = step
        announce = frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:66"), root, set(leaves))
        net.from_neighbour(to, HOSTILE, frb.pack(announce))


def places(net: FakeNetwork) -> dict[tuple[int, str], tuple[int, int | None]]:
    """Where every honest node has every honest host: (port, root)."""
    out = {}
    for nid in HONEST:
        for mac in HOSTS:
            entry = net.nodes[nid].switch.learning.lookup(mac, net.now)
            assert entry is not None, f"node {IDS.index(nid)} forgot {mac}"
            out[(nid, mac)] = (entry.port, entry.root)
    return out


def check_caps(net: FakeNetwork) -> None:
    for nid in IDS:
        node = net.nodes[nid]
        share = node.switch.learning.max_per_port
        for port in node.switch.ports:
            in_table = sum(1 for m in node.table.flows if m.in_port == port)
            assert in_table <= MAX_FLOWS and node.switch.flows.count(port) == in_table
            assert len(node.switch.learning.macs_on_port(port)) <= share
        assert len(node.switch.learning) <= MAX_MACS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, min_size=1, max_size=40))
def test_a_hostile_port_cannot_exceed_its_caps_nor_move_other_members_or_leaf_macs(steps: list[tuple[Any, ...]]) -> None:
    net = ring()
    everyone_speaks(net)
    before = places(net)
    heard = net.now
    for step in steps:
        if step[0] == "tick":
            net.advance(step[1])
        else:
            hostile_sends(net, step)
        if net.now - heard >= MOVE_HOLD / 2:  # members are heard more often than the move hold
            everyone_speaks(net)
            heard = net.now
        assert places(net) == before
        for i, nid in enumerate(HONEST):  # leaf MACs stay on their leaf port at home
            entry = net.nodes[nid].switch.learning.lookup(HOSTS[i], net.now)
            assert entry is not None and entry.local and entry.port == 1
        check_caps(net)
