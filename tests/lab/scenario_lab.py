"""What the scenario tests do to a lab of full nodes: wait for conditions, run a ping in the background,
move an address, run a short TCP transfer. Every process is started through the lab, so `Lab.down`
stops it even if a test dies half-way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.lab.node_config import bridge_name
from evio.node.control_client import ControlError

# Re-exported: the scenario tests import them from here.
from evio.testing.ping_probe import PingProbe as PingProbe
from evio.testing.ping_probe import move_address as move_address
from evio.testing.ping_probe import restore_address as restore_address
from evio.testing.scenarios import Figure, ring_shortfall
from evio.testing.waiting import wait_for_value

T = TypeVar("T")

IPERF_PORT = 5201


class FigureBook:
    """Where the scenarios record their figures (the `figures` fixture): kept for the run's summary,
    printed with the test's output, and appended as JSON lines to EVIO_SCENARIO_RESULTS if set."""

    def __init__(self, figures: list[Figure]) -> None:
        self._figures = figures

    def record(self, figure: Figure) -> None:
        self._figures.append(figure)
        print(figure.line())
        results = os.environ.get("EVIO_SCENARIO_RESULTS")
        if results:
            with Path(results).open("a") as out:
                out.write(figure.json() + "\n")


def scenario_nodes() -> int:
    """n for every scenario: 16, or EVIO_SCENARIO_NODES (at least 8: E5 needs four groups of two)."""
    text = os.environ.get("EVIO_SCENARIO_NODES", "16")
    try:
        nodes = int(text)
    except ValueError:
        raise ValueError(f"EVIO_SCENARIO_NODES must be a whole number, not {text!r}") from None
    if nodes < 8:
        raise ValueError(f"EVIO_SCENARIO_NODES must be at least 8 (got {nodes})")
    return nodes


def ring_timeout(nodes: int) -> float:
    """How long an overlay of `nodes` may take to form (generous: 2 shared cores run it all)."""
    return 60.0 + 4.0 * nodes


def wait_for(get: Callable[[], T], good: Callable[[T], bool], timeout: float, what: str, poll: float = 0.5) -> T:
    """`get()` once `good` holds for it; AssertionError naming `what` and the last value after `timeout`."""
    return wait_for_value(get, good, timeout, what=what, interval=poll)


def wait_ring(lab: Lab, nodes: int, successors: int, what: str, poll: float = 0.5) -> Topology:
    """The topology once every node answers and has its successor links; on a timeout the AssertionError
    says what was missing (`ring_shortfall`)."""
    seen: list[Topology] = []

    def shortfall() -> str:
        seen[:] = [lab.topology()]
        return ring_shortfall(seen[0], nodes, successors)

    wait_for(shortfall, lambda missing: not missing, ring_timeout(nodes), what, poll)
    return seen[0]


def seconds_since_link_change(lab: Lab) -> float:
    """Seconds since the last link came up or went down at any answering node (inf if none ever did)."""
    overlay = lab.plan.overlay
    since = []
    for node in lab.nodes:
        if lab.daemon(node.index) is None:
            continue
        last = lab.daemon_status(node.index)["overlays"][overlay]["link_events"]["seconds_since_last"]
        since.append(float("inf") if last is None else float(last))
    return min(since, default=float("inf"))


def wait_quiet(lab: Lab, quiet: float, timeout: float) -> None:
    """Until no link has come up or gone down at any node for `quiet` seconds."""
    wait_for(lambda: seconds_since_link_change(lab), lambda s: s >= quiet, timeout,
             f"{quiet:.0f} s without a link change")


def index_of(name: str) -> int:
    """"node7" -> 7."""
    return int(name.removeprefix("node"))


def overlay_ip(lab: Lab, name: str) -> str:
    return str(lab.node(index_of(name)).overlay_address.ip)


def daemon_log_tails(lab: Lab, lines: int = 40) -> str:
    """The last `lines` of every node's daemon log, for a failure report."""
    parts = []
    for node in lab.nodes:
        try:
            text = lab.daemon_log(node.index).read_text(errors="replace").splitlines()
        except OSError:
            continue
        parts.append(f"===== lab {lab.name} {node.name} ({node.nat}) daemon log, last {lines} lines")
        parts.extend(text[-lines:])
    return "\n".join(parts)


def keep_lab_logs(lab: Lab, into: Path) -> Path:
    """Copy every node's whole daemon log, and its status document if the daemon answers, under `into`/lab name."""
    where = into / lab.name
    where.mkdir(parents=True, exist_ok=True)
    for node in lab.nodes:
        try:
            shutil.copyfile(lab.daemon_log(node.index), where / f"{node.name}.log")
        except OSError:
            pass  # the node never got as far as a log
        if lab.daemon(node.index) is not None:
            try:
                status = lab.daemon_status(node.index)
            except ControlError as exc:  # a failure report must not fail on a daemon that stopped answering
                status = {"error": str(exc)}
            (where / f"{node.name}.status.json").write_text(json.dumps(status, indent=1, default=str))
    return where


def bridge_mac(lab: Lab, index: int) -> str:
    out = lab.exec(index, ["cat", f"/sys/class/net/{bridge_name(lab.plan)}/address"]).stdout
    return out.strip().lower()


def neighbour_mac(lab: Lab, index: int, address: str) -> str | None:
    """The MAC node `index`'s ARP cache holds for `address` on its bridge port."""
    out = lab.exec(index, ["ip", "-j", "neigh", "show", address, "dev", bridge_name(lab.plan)]).stdout
    entries = json.loads(out or "[]")
    mac = entries[0].get("lladdr") if entries else None
    return str(mac).lower() if mac else None


_LOCAL_FLOW = re.compile(r"in_port=LOCAL,dl_src=(?P<src>[0-9a-f:]+),dl_dst=(?P<dst>[0-9a-f:]+) actions=output:(?P<port>\d+)")
_PORT = re.compile(r"^\s*(?P<number>\d+)\((?P<name>[^)]+)\):", re.MULTILINE)  # ovs-ofctl show: " 5(evt1a2b): addr:..."


def next_hop(lab: Lab, topo: Topology, node: str, target: str) -> str | None:
    """The neighbour `node`'s bridge sends `target`'s frames to (from its installed unicast flow), if any.

    The flow's port is named by the bridge itself and its TAP by `node`'s daemon: a port number from a
    status document read earlier may belong to a link gone since (OVS reuses the numbers)."""
    dst = bridge_mac(lab, index_of(target))
    ovs = lab.ovs(index_of(node))
    flows = ovs.ofctl("dump-flows", bridge_name(lab.plan))
    for match in _LOCAL_FLOW.finditer(flows):
        if match["dst"] == dst:
            names = {int(m["number"]): m["name"] for m in _PORT.finditer(ovs.ofctl("show", bridge_name(lab.plan)))}
            taps = {link.tap: link.peer for link in topo.links_of(node) if link.tap}
            return taps.get(names.get(int(match["port"]), ""))
    return None


def tcp_mbit(lab: Lab, client: int, server: int, seconds: float = 2.0) -> float:
    """One iperf3 TCP stream from node `client` to node `server` over the overlay: Mbit/s received."""
    address = str(lab.node(server).overlay_address.ip)
    record = lab.spawn(server, ["iperf3", "-s", "-1", "-B", address, "-p", str(IPERF_PORT)], role="scenario-iperf")
    try:
        wait_for(lambda: lab.exec(server, ["ss", "-Htln", f"sport = :{IPERF_PORT}"], check=False).stdout.strip(),
                 bool, 10.0, "the iperf3 server listening", poll=0.05)
        done = lab.exec(client, ["iperf3", "-c", address, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-J"],
                        timeout=seconds + 30)
        report = json.loads(done.stdout)
        return float(report["end"]["sum_received"]["bits_per_second"]) / 1e6
    finally:
        lab.stop(record)
