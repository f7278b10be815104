"""E6, the small version: an on-demand link for a sustained flow, and its release (paper section 5.6).

A ring of 8 full nodes (s = 1, k = 0: every pair but ring neighbours is several hops apart) with
on-demand links on and a short idle timeout, so the release comes within seconds. A TCP flow
between two nodes half the ring apart must get a direct link (target 2 s; asserted within three
times that, the figure is recorded), its frames must take that link, the link must stay while the
flow runs, and go once the flow has stopped for the idle timeout; the pair still reaches each other
over the ring afterwards.
"""

from __future__ import annotations

import time

import pytest
from scenario_lab import FigureBook, index_of, next_hop, overlay_ip, ring_timeout, wait_for

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.scenarios import Figure

pytestmark = pytest.mark.lab

NODES = 8
IDLE_TIMEOUT = 3.0  # seconds below the threshold before an on-demand link is released (default 60)
FLOW_MBIT = 40  # a steady flow well above the 1 MB/s threshold that leaves the 2 cores some room
ACQUIRE_TARGET = 2.0
# Asserted: three times the target. Counters polled every 0.5 s, the link is up about 1 s after the
# flow starts on a quiet machine (1.2 s at most over 36 flows of the benchmark at full rate); the rest
# is margin for a loaded 2-core CI machine, where setups have taken several times as long.
ACQUIRE_BOUND = 3 * ACQUIRE_TARGET
RELEASE_BOUND = IDLE_TIMEOUT + 30.0
IPERF_PORT = 5202


def pair_view(lab: Lab, a: str, b: str) -> Topology:
    return lab.topology([index_of(a), index_of(b)])


def on_demand_up(topo: Topology, a: str, b: str) -> bool:
    """Up at both ends, and held as an on-demand link by at least one of them."""
    held = any(link.type == "on_demand" for link in topo.links if {link.node, link.peer} == {a, b})
    return held and topo.adjacent(a, b)


def any_link(topo: Topology, a: str, b: str) -> bool:
    return any({link.node, link.peer} == {a, b} for link in topo.links)


def test_e6_a_sustained_flow_gets_a_direct_link_which_goes_when_the_flow_stops(
    lab_factory: LabFactory, figures: FigureBook
) -> None:
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": True, "idle_timeout": IDLE_TIMEOUT}}
    lab = lab_factory(nodes=NODES, nat="eim", daemons=True, topology=topology)
    topo = wait_for(lab.topology, lambda t: len(t.live) == NODES and not t.ring_gaps(), ring_timeout(NODES),
                    "the ring of successor links")
    a, b = topo.order[0], topo.order[NODES // 2]
    hops = topo.hops(a, b)
    assert hops is not None and hops >= 2, f"{a} and {b} should be several hops apart: {hops}"
    client, server = index_of(a), index_of(b)
    warm = lab.exec(client, ["ping", "-c", "3", "-i", "0.2", "-W", "2", overlay_ip(lab, b)], check=False)
    assert warm.returncode == 0, f"{a} cannot ping {b} over the ring:\n{warm.stdout}"
    assert next_hop(lab, topo, a, b) != b

    address = overlay_ip(lab, b)
    iperf_server = lab.spawn(server, ["iperf3", "-s", "-B", address, "-p", str(IPERF_PORT)], role="e6-iperf-server")
    iperf_client = None
    try:
        wait_for(lambda: lab.exec(server, ["ss", "-Htln", f"sport = :{IPERF_PORT}"], check=False).stdout.strip(),
                 bool, 10.0, "the iperf3 server listening", poll=0.05)
        started = time.monotonic()
        iperf_client = lab.spawn(client, ["iperf3", "-c", address, "-p", str(IPERF_PORT), "-t", "120",
                                          "-b", f"{FLOW_MBIT}M"], role="e6-iperf-client")
        wait_for(lambda: pair_view(lab, a, b), lambda t: on_demand_up(t, a, b), ACQUIRE_BOUND,
                 f"an on-demand link {a} - {b} for the flow", poll=0.1)
        acquired = time.monotonic() - started
        figures.record(Figure("E6", "sustained flow: start -> on-demand link up", acquired, "s",
                              paper="link follows sustained traffic", target=f"<= {ACQUIRE_TARGET:g} s",
                              note=f"n={NODES}, {hops} hops apart, {FLOW_MBIT} Mbit/s flow"))

        # The frames take the new link: each end's unicast flow to the other leads straight to it.
        full = lab.topology()
        wait_for(lambda: (next_hop(lab, full, a, b), next_hop(lab, full, b, a)), lambda h: h == (b, a), 10.0,
                 "both ends' flows on the direct link")
        # Busy, it stays: watched for well past the idle timeout with the flow still running.
        watch_until = time.monotonic() + IDLE_TIMEOUT + 2.0
        while time.monotonic() < watch_until:
            assert on_demand_up(pair_view(lab, a, b), a, b), "the on-demand link went while the flow still ran"
            time.sleep(0.5)
        assert lab.is_running(iperf_client), "the flow broke while its path moved to the on-demand link"
    finally:
        for record in (iperf_client, iperf_server):
            if record is not None:
                lab.stop(record)
    stopped = time.monotonic()

    wait_for(lambda: pair_view(lab, a, b), lambda t: not any_link(t, a, b), RELEASE_BOUND,
             f"the idle on-demand link {a} - {b} released", poll=0.2)
    released = time.monotonic() - stopped
    figures.record(Figure("E6", "flow stopped -> idle on-demand link released", released, "s",
                          paper="released when idle",
                          note=f"idle_timeout {IDLE_TIMEOUT:g} s, polled every 0.5 s, rates over 1 s"))
    # The last busy poll comes about when the flow stops or later (each rate covers the last second and
    # the switch's counters lag): released well before the idle timeout would be a bug. 1.5 s of slack.
    assert released >= IDLE_TIMEOUT - 1.5, f"released {released:.1f} s after the flow, before the idle timeout"
    after = lab.exec(client, ["ping", "-c", "3", "-i", "0.2", "-W", "2", overlay_ip(lab, b)], check=False)
    assert after.returncode == 0, f"{a} cannot reach {b} over the ring after the release:\n{after.stdout}"
