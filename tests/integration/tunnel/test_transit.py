"""The transit fast path in real nodes: frames through an intermediate node skip its TAPs and bridge.

A ring of 4 daemons (s = 1, k = 0, no on-demand links), so two opposite nodes
are 2 hops apart and every frame between them crosses an intermediate node.
Pings between them must take the intermediate's fast path (its counters
move), and its entries must go when their flows go: deleted on the bridge,
the fast path switched off by a reload, the destination's tunnel gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value
from evio.tunnel.datapath import native

pytestmark = pytest.mark.integration

T = TypeVar("T")
RING_TIMEOUT = 60.0  # generous: the machine is shared and loaded
EVIO_COOKIE = "0xe7100001/-1"  # evio.sdn.openflow_messages.EVIO_COOKIE
PINGS = 20
# The defaults: tunnel.datapath auto, so the native data path where evio_native is built (its receive
# pass hands transit frames back to the hook), and tunnel.transit on.
DATAPATH = "native" if native.available() else "python"


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str) -> T:
    return wait_for_value(get, good, timeout, what=what)


def ring_closed(topo: Topology) -> bool:
    return len(topo.live) == 4 and not topo.ring_gaps() and all(
        link.tap and link.port is not None for link in topo.links if link.state == "up")


def ping(lab: Lab, a: int, b: int, count: int = PINGS) -> int:
    """Echo replies of `count` pings from a to b."""
    target = str(lab.node(b).overlay_address.ip)
    out = lab.exec(a, ["ping", "-c", str(count), "-i", "0.05", "-W", "2", target], check=False, timeout=60).stdout
    return sum("bytes from" in line for line in out.splitlines())


def transit(lab: Lab, index: int) -> dict[str, Any]:
    state: dict[str, Any] = lab.daemon_status(index)["overlays"][lab.plan.overlay]["transit"]
    return state


def forwarded(lab: Lab, nodes: list[int]) -> int:
    return sum(int(transit(lab, i)["forwarded"]) for i in nodes)


def entries(lab: Lab, nodes: list[int]) -> int:
    return sum(int(transit(lab, i)["entries"]) for i in nodes)


def delete_flows(lab: Lab, nodes: list[int]) -> None:
    for index in nodes:
        bridge = lab.daemon_status(index)["overlays"][lab.plan.overlay]["bridge"]
        lab.ovs(index).ofctl("del-flows", bridge, f"cookie={EVIO_COOKIE}")


def set_transit(lab: Lab, on: bool) -> None:
    """tunnel.transit in every node's config, applied by a reload (SIGHUP)."""
    lab.reload_configs(lambda config: config["overlays"][lab.plan.overlay].setdefault("tunnel", {}).update(transit=on), 20)
    for node in lab.nodes:
        assert transit(lab, node.index)["enabled"] is on


def test_frames_through_an_intermediate_node_take_its_fast_path_until_their_flows_go(lab_factory: LabFactory) -> None:
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=4, nat="eim", topology=topology, daemons=True)
    topo = wait_for(lab.topology, ring_closed, RING_TIMEOUT, "a ring of 4 successor links")
    names = {n.name: n.index for n in lab.nodes}
    a = lab.nodes[0].index
    (b,) = [names[n] for n in topo.live if topo.hops(lab.nodes[0].name, n) == 2]
    middle = [i for i in names.values() if i not in (a, b)]  # the two ways round; learning picks one

    # Transit frames take the fast path: after the first echo (through the controllers), every request
    # and reply crosses an intermediate node without its TAPs.
    assert ping(lab, a, b) >= PINGS - 2
    assert forwarded(lab, middle) >= PINGS, {i: transit(lab, i) for i in middle}
    assert entries(lab, middle) >= 2  # one flow each way
    assert forwarded(lab, [a, b]) == 0  # the ends deliver to their bridges
    links = [link for i in middle for link in lab.daemon_status(i)["overlays"][lab.plan.overlay]["links"]]
    assert {link["datapath"] for link in links if link.get("datapath")} == {DATAPATH}
    assert sum(int(link["rx"]["transit_frames"]) for link in links) == forwarded(lab, middle)

    # Flows deleted on the bridges take their entries (the switch's FlowRemoved).
    delete_flows(lab, middle)
    wait_for(lambda: entries(lab, middle), lambda n: n == 0, 10, "the entries of the deleted flows gone")

    # Switched off by a reload: the bridge forwards every frame and the fast path stays still.
    set_transit(lab, False)
    before = forwarded(lab, middle)
    assert ping(lab, a, b) >= PINGS - 2
    assert forwarded(lab, middle) == before and entries(lab, middle) == 0

    # On again: flows installed from then on get entries.
    set_transit(lab, True)
    delete_flows(lab, [a, b, *middle])
    assert ping(lab, a, b) >= PINGS - 2
    assert forwarded(lab, middle) > before and entries(lab, middle) >= 2

    # The destination goes: its tunnels, ports and flows go, and every entry with them.
    lab.stop_daemon(b)
    wait_for(lambda: entries(lab, middle), lambda n: n == 0, 20, "the entries towards and from the stopped node gone")


def set_flow_idle_timeout(lab: Lab, seconds: int) -> None:
    """bridge.flow_idle_timeout in every node's config, by a reload (the overlay restarts: a bridge setting)."""
    lab.reload_configs(
        lambda config: config["overlays"][lab.plan.overlay].setdefault("bridge", {}).update(flow_idle_timeout=seconds), 30
    )


def test_a_busy_entry_keeps_its_flow_alive_past_the_idle_timeout(lab_factory: LabFactory) -> None:
    """Fast-path frames bypass the flow, so the controller re-installs it while the entry is used and moves
    the entry's deadline (three quarters of the idle timeout after the install) with it. With a 10 s idle
    timeout, 25 s of pings stay on the fast path: frames that meet an entry past its deadline (`expired`) stay
    rare. Without the refresh every entry runs out after 7.5 s and the rest of the frames meet it expired."""
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=4, nat="eim", topology=topology, daemons=True)
    wait_for(lab.topology, ring_closed, RING_TIMEOUT, "a ring of 4 successor links")
    set_flow_idle_timeout(lab, 10)
    topo = wait_for(lab.topology, ring_closed, RING_TIMEOUT, "the ring again after the overlays restarted")
    names = {n.name: n.index for n in lab.nodes}
    a = lab.nodes[0].index
    (b,) = [names[n] for n in topo.live if topo.hops(lab.nodes[0].name, n) == 2]
    middle = [i for i in names.values() if i not in (a, b)]

    count = 250  # 0.1 s apart: 25 s, 2.5 idle timeouts; each echo crosses the middle twice
    target = str(lab.node(b).overlay_address.ip)
    out = lab.exec(a, ["ping", "-c", str(count), "-i", "0.1", "-W", "2", target], check=False, timeout=120).stdout
    answered = sum("bytes from" in line for line in out.splitlines())
    assert answered >= count - 10
    states = {i: transit(lab, i) for i in middle}
    sent_on = sum(int(s["forwarded"]) for s in states.values())
    expired = sum(int(s["expired"]) for s in states.values())
    assert sent_on >= answered, states  # of 2 per echo
    assert expired * 10 <= sent_on, states  # without the refresh: about half of them or more
