"""Every data path carries bulk TCP both ways, every byte intact, and none far below the others beside it.

50 MB each way at once over one TCP connection (evio.lab.tcp_bulk: random
bytes, a SHA-256 of what each end sent against what the other received)
through each data path kept: native and Python, with TAP offloads and without
(both also with TSO on the TAP), over a bare veth; and, in a ring of
full nodes, between adjacent nodes and through an intermediate node, with the
transit fast path and through its bridge. A throughput floor would not hold on
a shared machine (figures move 3-6x with the load), but the data paths
measured one after the other in the same test move together: one under
BROKEN_FRACTION of their median has collapsed (as the standalone Python
endpoint's TCP did at 0.06 Mbit/s while its UDP made 450), and fails.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.lab.outliers import BROKEN_FRACTION, far_below
from evio.lab.tunnel_testbed import EndpointProcess, VethTestbed, bulk_tcp, run, unique_prefix
from evio.testing.labs import LabFactory
from evio.testing.waiting import wait_for_value, wait_until_blocking
from evio.tunnel.datapath import native

pytestmark = pytest.mark.integration

BULK_BYTES = 50_000_000
DEADLINE = 60.0  # seconds for one exchange: a healthy path here takes 1-5 s, a collapsed one never ends
PORT = 5310
ID_A, ID_B = "aa" * 16, "bb" * 16
NATIVE, PYTHON = ["--datapath", "native"], ["--datapath", "python"]
VETH_DATAPATHS = {
    "native-tso": NATIVE,  # tunnel.tso is on by default
    "native-offload": [*NATIVE, "--no-tso"],
    "native-no-offload": [*NATIVE, "--no-offload"],
    "python-tso": PYTHON,
    "python-offload": [*PYTHON, "--no-tso"],
    "python-no-offload": [*PYTHON, "--no-offload"],
}
RING_TIMEOUT = 60.0


def bulk(server_ns: str, client_ns: str, address: str) -> dict[str, Any]:
    """50 MB each way between the two namespaces, every byte checked (``bulk_tcp``)."""
    return bulk_tcp(server_ns, client_ns, address, BULK_BYTES, DEADLINE, PORT)


def assert_none_far_below(mbit: dict[str, float], loads: dict[str, float]) -> None:
    table = ", ".join(f"{name} {value:.0f} Mbit/s (load {loads[name]:.1f})" for name, value in mbit.items())
    collapsed = far_below(mbit)
    assert not collapsed, f"under {BROKEN_FRACTION:.0%} of the median of those beside them: {sorted(collapsed)}; {table}"
    print(f"\nbulk TCP both ways, {BULK_BYTES // 1_000_000} MB each: {table}")


@pytest.fixture
def veth() -> Iterator[VethTestbed]:
    with VethTestbed(unique_prefix("evb")) as tb:
        yield tb


def test_every_veth_data_path_carries_bulk_tcp_intact_and_none_collapses(veth: VethTestbed) -> None:
    mbit: dict[str, float] = {}
    loads: dict[str, float] = {}
    for name, datapath in VETH_DATAPATHS.items():
        with tempfile.TemporaryDirectory(prefix="evb-") as d:
            workdir = Path(d)
            common = ["--signal-dir", str(workdir), *datapath]
            b = EndpointProcess(veth.b.netns, ["--node", ID_B, "--peer", ID_A, "--address", "10.99.0.2/24", *common],
                                workdir / "b.log")  # fmt: skip
            a = None
            try:
                b.wait_event("ready")
                a = EndpointProcess(veth.a.netns, ["--node", ID_A, "--peer", ID_B, "--connect", "--address", "10.99.0.1/24",
                                                   *common], workdir / "a.log")  # fmt: skip
                a.wait_event("up", timeout=15)
                b.wait_event("up", timeout=15)
                result = bulk(veth.b.netns, veth.a.netns, "10.99.0.2")
                stats_a, stats_b = a.stats(), b.stats()
            finally:
                for end in (a, b):
                    if end is not None:
                        end.stop()
        # The data path asked for is the one that carried it, and no record was refused on the way.
        assert stats_a["datapath"] == stats_b["datapath"] == datapath[1], (name, stats_a, stats_b)
        for stats in (stats_a, stats_b):
            assert not {"forged", "replayed", "truncated", "bad-offload"} & set(stats["drops"]), (name, stats)
        mbit[name] = result["mbit"]
        loads[name] = _load()
    assert_none_far_below(mbit, loads)


def test_a_tunnel_beside_another_runs_on_the_underlay_not_inside_it(veth: VethTestbed) -> None:
    """Two tunnels between the same namespaces (as benchmarks/peers_bench.py runs evio and evio-python):
    the second must not nominate a pair on the first one's TAP addresses. Nested, its full-size records
    overflow the first one's MTU and are refused (EMSGSIZE): its TCP crawled at 0.06 Mbit/s."""
    with tempfile.TemporaryDirectory(prefix="evb-") as d:
        ends: list[EndpointProcess] = []
        try:
            for subnet, datapath in ((1, NATIVE), (2, PYTHON)):
                workdir = Path(d) / str(subnet)
                workdir.mkdir()
                common = ["--signal-dir", str(workdir), "--tap-prefix", f"evb{subnet}", "--exclude-network", "10.98.0.0/16",
                          *datapath]  # fmt: skip
                b = EndpointProcess(veth.b.netns, ["--node", ID_B, "--peer", ID_A, "--address", f"10.98.{subnet}.2/24",
                                                   *common], workdir / "b.log")  # fmt: skip
                ends.append(b)
                b.wait_event("ready")
                a = EndpointProcess(veth.a.netns, ["--node", ID_A, "--peer", ID_B, "--connect", "--address",
                                                   f"10.98.{subnet}.1/24", *common], workdir / "a.log")  # fmt: skip
                ends.append(a)
                up = a.wait_event("up", timeout=15)
                b.wait_event("up", timeout=15)
                assert up["remote_addr"][0] == veth.b.address, up
            # A full-size frame (1428-byte IP packet, DF) through the second tunnel: nested, it could not pass.
            out = run(["ping", "-c", "3", "-i", "0.05", "-W", "2", "-M", "do", "-s", "1400", "10.98.2.2"], veth.a.netns,
                      check=False).stdout  # fmt: skip
            assert " 3 received" in out, out
            assert not ends[3].stats()["drops"].get("send-failed"), ends[3].stats()
        finally:
            for end in ends:
                end.stop()


@pytest.mark.parametrize("datapath", [
    pytest.param("native", marks=pytest.mark.skipif(not native.available(), reason="evio_native is not built here")),
    "python",
])  # fmt: skip
def test_bulk_tcp_through_an_intermediate_node_with_and_without_the_transit_fast_path(
    lab_factory: LabFactory, datapath: str
) -> None:
    """A ring of 4 full nodes (tunnel.datapath `datapath`, offloads on): adjacent nodes, and opposite nodes
    through an intermediate node, with the transit fast path (on by default) and through its bridge."""
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    lab = lab_factory(nodes=4, nat="eim", topology=topology, tunnel={"datapath": datapath}, daemons=True)
    topo = wait_for_value(lab.topology, _ring_closed, RING_TIMEOUT, what="a ring of 4 successor links")
    names = {n.name: n.index for n in lab.nodes}
    a = lab.nodes[0].index
    (far,) = [names[n] for n in topo.live if topo.hops(lab.nodes[0].name, n) == 2]
    (near, *_) = [names[n] for n in topo.live if topo.hops(lab.nodes[0].name, n) == 1]
    middle = [i for i in names.values() if i not in (a, far)]
    links = [link for i in names.values() for link in lab.daemon_status(i)["overlays"][lab.plan.overlay]["links"]]
    assert {link["datapath"] for link in links if link.get("datapath")} == {datapath}

    def between(server: int) -> float:
        # The first packets go through the controllers; wait for the flows (a ping answered) before timing.
        address = str(lab.node(server).overlay_address.ip)
        wait_until_blocking(lambda: lab.exec(a, ["ping", "-c", "1", "-W", "1", address], check=False).returncode == 0,
                            20, what=f"node {server} answering over the overlay")  # fmt: skip
        result: float = bulk(lab.netns(server), lab.netns(a), address)["mbit"]
        return result

    mbit: dict[str, float] = {}
    loads: dict[str, float] = {}
    mbit["adjacent"], loads["adjacent"] = between(near), _load()
    before = _forwarded(lab, middle)
    mbit["transit"], loads["transit"] = between(far), _load()
    # Nearly every frame of the 100 MB crossed the intermediate node on its fast path (some 70 000 each way
    # at the overlay MTU; the first few went through the bridge while the flows were being installed).
    assert _forwarded(lab, middle) - before > BULK_BYTES // 1500, {i: _transit(lab, i) for i in middle}

    lab.reload_configs(lambda c: c["overlays"][lab.plan.overlay].setdefault("tunnel", {}).update(transit=False), 20)
    before = _forwarded(lab, middle)
    mbit["through the bridge"], loads["through the bridge"] = between(far), _load()
    assert _forwarded(lab, middle) == before
    assert_none_far_below(mbit, loads)


def _ring_closed(topo: Topology) -> bool:
    return len(topo.live) == 4 and not topo.ring_gaps() and all(
        link.tap and link.port is not None for link in topo.links if link.state == "up")  # fmt: skip


def _transit(lab: Lab, index: int) -> dict[str, Any]:
    state: dict[str, Any] = lab.daemon_status(index)["overlays"][lab.plan.overlay]["transit"]
    return state


def _forwarded(lab: Lab, nodes: list[int]) -> int:
    return sum(int(_transit(lab, i)["forwarded"]) for i in nodes)


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])

