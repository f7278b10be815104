"""Links made over the overlay: link requests and tunnel offers along the ring, not through prosody (0067).

Five daemons in trust mode on a real prosody, with a ring of successor links and one long-distance link each.
Once the ring is closed, node 1 is restarted: it rejoins an overlay whose members have links, and the links
the others make to it, and the ones it makes once it has its first, go along the ring. Every daemon counts
what it sent through the server by action and what went along the ring: the offers answered along the ring
were never received through the server (each node's count of tunnel offers received through it stays below
the offers it accepted), and the tunnels they set up carry traffic.
"""

from __future__ import annotations

from typing import Any

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value

pytestmark = pytest.mark.integration

RING_TIMEOUT = 120.0


def overlay(lab: Lab, index: int) -> dict[str, Any]:
    document: dict[str, Any] = lab.daemon_status(index, timeout=15.0)["overlays"][lab.plan.overlay]
    return document


def ring_closed(topo: Topology) -> bool:
    return len(topo.live) == 5 and not topo.ring_gaps()


def ring_counts(lab: Lab) -> list[dict[str, Any]]:
    return [overlay(lab, n.index)["signal"] for n in lab.nodes]


def test_links_are_made_over_the_overlay_without_their_offers_crossing_the_server(lab_factory: LabFactory) -> None:
    topology = {"successors": 1, "long_distance": 1, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=5, nat="eim", topology=topology, daemons=True, trust=True)
    wait_for_value(lab.topology, ring_closed, RING_TIMEOUT, what="a ring of 5", interval=1.0)
    lab.stop_daemon(1)
    lab.start_daemon(1)
    wait_for_value(lab.topology, ring_closed, RING_TIMEOUT, what="the ring closed again after node 1's restart",
                   interval=1.0)  # fmt: skip

    def offers_along_the_ring(signals: list[dict[str, Any]]) -> bool:
        return sum(s["ring"]["served"] for s in signals) >= 1

    signals = wait_for_value(lambda: ring_counts(lab), offers_along_the_ring, 60, what="a request answered along the ring",
                             interval=2.0)  # fmt: skip
    for index, s in enumerate(signals):
        print(f"node {index}: ring {s['ring']}, through the server {s['messages']}")
    sent_ring = sum(s["ring"]["sent"].get("ring", 0) for s in signals)
    served_ring = sum(s["ring"]["served"] for s in signals)
    assert sent_ring >= 1 and served_ring >= sent_ring  # each answered along the ring was served there
    # What went along the ring did not go through the server: the requests sent through it are only those
    # that did not go along the ring, and each node received through it only what others sent through it.
    offers_via_server = sum(s["messages"]["out"].get("tunnel.offer", 0) for s in signals)
    offers_received_via_server = sum(s["messages"]["requests_in"].get("tunnel.offer", 0) for s in signals)
    assert offers_received_via_server <= offers_via_server
    tunnels_up = sum(overlay(lab, n.index)["tunnels"]["up"] for n in lab.nodes) // 2
    assert offers_via_server < tunnels_up  # some links' offers never reached the server
    assert all(s["ring"]["drops"].get("bad_signature", 0) == 0 for s in signals)
    # The links so made carry traffic: node 1 (restarted, linked along the ring) answers every node.
    target = str(lab.node(1).overlay_address.ip)
    for index in (0, 2, 3, 4):
        done = lab.exec(index, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False, timeout=20)
        assert done.returncode == 0, f"node {index} -> node 1: {done.stdout}"
