"""Links made over the overlay: link requests and tunnel offers along the ring, not through prosody (0064).

Five daemons in trust mode on a real prosody, with a ring of successor links and one long-distance link each.
Once the ring is closed, node 1 is restarted: it rejoins an overlay whose members have links, and the links
the others make to it, and the ones it makes once it has its first, go along the ring. Every daemon counts
what it sent through the server by action and what went along the ring: the offers answered along the ring
were never received through the server, and the tunnels they set up carry traffic.
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


def ring_counts(lab: Lab) -> dict[int, dict[str, Any]]:
    return {n.index: overlay(lab, n.index)["signal"] for n in lab.nodes}


def test_links_are_made_over_the_overlay_without_their_offers_crossing_the_server(lab_factory: LabFactory) -> None:
    topology = {"successors": 1, "long_distance": 1, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=5, nat="eim", topology=topology, daemons=True, trust=True,
                      trust_options={"offers_over_overlay": True})  # the default (decision 0064), said here
    wait_for_value(lab.topology, ring_closed, RING_TIMEOUT, what="a ring of 5", interval=1.0)
    # What node 1 sent through the server before its restart, which its counts lose: the others may receive it after.
    sent_before = dict(ring_counts(lab).get(1, {}).get("messages", {}).get("out", {}))
    lab.stop_daemon(1)
    lab.start_daemon(1)
    wait_for_value(lab.topology, ring_closed, RING_TIMEOUT, what="the ring closed again after node 1's restart",
                   interval=1.0)  # fmt: skip

    def offers_along_the_ring(signals: dict[int, dict[str, Any]]) -> bool:
        return sum(s["ring"]["served"].get("tunnel.offer", 0) for s in signals.values()) >= 1

    signals = wait_for_value(lambda: ring_counts(lab), offers_along_the_ring, 60,
                             what="a tunnel offer answered along the ring", interval=2.0)  # fmt: skip
    for index, s in signals.items():
        print(f"node {index}: ring {s['ring']}, through the server {s['messages']}")
    # A request answered along the ring was sent there only: the requester went to the server only when the
    # ring did not answer (RingSignaling.request), and each node received through the server only what the
    # others sent through it (node 1's counts restarted with it: it may have received more than it shows, and
    # what it sent before its restart is added).
    assert sum(s["ring"]["sent"].get("ring", 0) for s in signals.values()) >= 1
    for action in ("overlay.link", "tunnel.offer"):
        sent = sum(s["messages"]["out"].get(action, 0) for s in signals.values()) + sent_before.get(action, 0)
        received = sum(s["messages"]["requests_in"].get(action, 0) for i, s in signals.items() if i != 1)
        assert received <= sent, action
    assert all(not s["ring"]["drops"].get(reason) for s in signals.values() for reason in ("bad_signature", "untrusted"))
    # Honest members stay within each other's stanza budget, a restart included (decision 0080).
    assert all(not s["drops"].get("sender_rate") for s in signals.values()), {i: s["drops"] for i, s in signals.items()}
    # The links so made carry traffic: node 1 (restarted, linked along the ring) answers every node.
    target = str(lab.node(1).overlay_address.ip)
    for index in (2, 3, 4, 5):
        done = lab.exec(index, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False, timeout=20)
        assert done.returncode == 0, f"node {index} -> node 1: {done.stdout}"
