"""`evio lab` commands for a lab of full nodes (started by `evio lab up` without --no-daemons).

    evio lab topology [--name NAME] [--wait SECONDS] [--json] [--svg FILE]
                                                                  each node's links by type; is the ring closed?
                                                                  (--svg: draw it as the paper's Fig. 3, .svg or .png)
    evio lab ping A B [--count N]                                 ping B's overlay address from A
    evio lab pingall [--count N]                                  every ordered pair, a summary
    evio lab arping A B [--count N]                               ARP for B's overlay address on A's bridge
    evio lab iperf A B [--time S] [--parallel P] [--reverse]      iperf3 from A to B over the overlay
    evio lab daemon stop|start|restart NODE                       one node's daemon (SIGTERM on stop)

A and B are node numbers or nodeN. Everything is asked of the daemons through
their local control API, or run inside the node namespaces.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evio.cli.lab_cmd import add_name_option, attach, reports_lab_errors
from evio.lab.daemons import Topology, format_topology
from evio.lab.errors import LabError
from evio.lab.lab import Lab, NodeInfo
from evio.lab.node_config import bridge_name
from evio.plots.ring import PlotError, RingLink, RingPicture, draw_ring, merge_links

IPERF_PORT = 5201
RING_POLL_INTERVAL = 0.5  # seconds between looks at the ring, at least ...
RING_POLL_DUTY = 3.0  # ... and this many times as long as the last look took


def register(lab_sub: Any) -> None:
    p = _command(lab_sub, "topology", "each node's overlay links by type, and whether the ring is closed", topology_command)
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to SECONDS for successor links to close the ring")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--svg", type=Path, default=None, metavar="FILE",
                   help="also draw the overlay as the paper's Fig. 3 into FILE (.svg or .png)")

    p = _command(lab_sub, "ping", "ping node B's overlay address from node A", ping_command, pair=True)
    p.add_argument("--count", "-c", type=int, default=3)

    p = _command(lab_sub, "pingall", "ping every node's overlay address from every other node", pingall_command)
    p.add_argument("--count", "-c", type=int, default=1)
    p.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS", help="per ping (default 2)")

    p = _command(lab_sub, "arping", "ARP for node B's overlay address on node A's bridge", arping_command, pair=True)
    p.add_argument("--count", "-c", type=int, default=3)

    p = _command(lab_sub, "iperf", "iperf3 from node A to node B over the overlay", iperf_command, pair=True)
    p.add_argument("--time", "-t", type=float, default=5.0, help="seconds (default 5)")
    p.add_argument("--parallel", "-P", type=int, default=1, help="streams (default 1)")
    p.add_argument("--reverse", "-R", action="store_true", help="B sends to A")

    p = _command(lab_sub, "daemon", "stop, start or restart one node's evio daemon", daemon_command)
    p.add_argument("action", choices=["stop", "start", "restart"])
    p.add_argument("node", help="node number or nodeN")


def _command(lab_sub: Any, name: str, help: str, handler: Callable[[argparse.Namespace], int],
             pair: bool = False) -> argparse.ArgumentParser:
    """`evio lab NAME [--name LAB]`, and with `pair` its nodes A and B."""
    parser: argparse.ArgumentParser = lab_sub.add_parser(name, help=help)
    add_name_option(parser)
    if pair:
        parser.add_argument("a", metavar="A", help="node number or nodeN")
        parser.add_argument("b", metavar="B", help="node number or nodeN")
    parser.set_defaults(handler=reports_lab_errors(handler))
    return parser


def node_index(lab: Lab, text: str) -> int:
    digits = text.removeprefix("node").removeprefix("n")
    if not digits.isdigit():
        raise LabError(f"not a node: {text!r} (use a number or nodeN)")
    return lab.node(int(digits)).index


# -- topology ----------------------------------------------------------------------------------


def topology_command(args: argparse.Namespace) -> int:
    lab = attach(args)
    topo, closed = wait_ring(lab, args.wait)
    if args.json:
        document = {
            "order": list(topo.order),
            "links": [asdict(link) for link in topo.links],
            "unreachable": dict(topo.unreachable),
            "live": list(topo.live),
            "ring_gaps": [list(gap) for gap in topo.ring_gaps()],
        }
        print(json.dumps(document, indent=2))
    else:
        print_topology(lab, topo)
    if args.svg is not None:
        try:
            draw_ring(ring_picture(topo, f"evio lab {lab.name}: the live overlay"), args.svg)
        except PlotError as exc:
            raise LabError(str(exc)) from None
        if not args.json:
            print(f"picture: {args.svg}")
    return 0 if closed else 1


def ring_picture(topo: Topology, title: str) -> RingPicture:
    """The lab's overlay as the daemons report it: relayed when a tunnel's path is TURN."""
    links = [
        RingLink(l.node, l.peer, l.type, relayed=l.path == "relay", up=l.state == "up" and topo.adjacent(l.node, l.peer))
        for l in topo.links
    ]
    return RingPicture(topo.order, merge_links(links), title)


def wait_ring(lab: Lab, timeout: float) -> tuple[Topology, bool]:
    """The topology once successor links close the ring of answering nodes, or when `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        topo = lab.topology()
        took = time.monotonic() - asked
        closed = len(topo.live) > 0 and not topo.ring_gaps()
        if closed or time.monotonic() >= deadline:
            return topo, closed
        # Each look asks every daemon for its status: in a large, busy lab that is work they need
        # for the ring itself. Look at most a quarter of the time.
        time.sleep(max(RING_POLL_INTERVAL, RING_POLL_DUTY * took))


def print_topology(lab: Lab, topo: Topology) -> None:
    addresses = {n.name: str(n.overlay_address.ip) for n in lab.nodes}
    print("\n".join(format_topology(topo, addresses)))


# -- traffic -----------------------------------------------------------------------------------


def ping_command(args: argparse.Namespace) -> int:
    lab = attach(args)
    a, b = lab.node(node_index(lab, args.a)), lab.node(node_index(lab, args.b))
    argv = ["ping", "-c", str(args.count), "-i", "0.2", "-W", "2", str(b.overlay_address.ip)]
    print(f"{a.name} -> {b.name} ({b.overlay_address.ip}) over the overlay", flush=True)
    return subprocess.run(["ip", "netns", "exec", a.netns, *argv], check=False).returncode


def pingall_command(args: argparse.Namespace) -> int:
    summary = all_pairs_ping(attach(args), args.count, args.timeout)
    print(summary.text())
    return 0 if not summary.failed else 1


@dataclass(frozen=True)
class PingSummary:
    pairs: int
    failed: tuple[str, ...]
    mean_rtt_ms: float | None
    seconds: float
    rtts_ms: tuple[float, ...] = ()  # each answered pair's mean RTT, in the pairs' order

    def text(self) -> str:
        line = (f"all-pairs ping over the overlay: {self.pairs - len(self.failed)}/{self.pairs} pairs answered "
                f"in {self.seconds:.1f} s")
        if self.mean_rtt_ms is not None:
            line += f", mean RTT {self.mean_rtt_ms:.2f} ms"
        if self.failed:
            line += "\nno answer: " + " ".join(self.failed)
        return line


def all_pairs_ping(lab: Lab, count: int = 1, timeout: float = 2.0) -> PingSummary:
    """Ping every node's overlay address from every other node (8 at a time)."""
    nodes = lab.nodes
    pairs = [(a, b) for a in nodes for b in nodes if a.index != b.index]
    started = time.monotonic()

    def one(pair: tuple[NodeInfo, NodeInfo]) -> tuple[NodeInfo, NodeInfo, bool, float | None]:
        a, b = pair
        done = lab.exec(a.index, ["ping", "-c", str(count), "-i", "0.2", "-W", f"{timeout:g}",
                                  "-q", str(b.overlay_address.ip)], check=False, timeout=30 + 2 * count)
        return a, b, done.returncode == 0, _avg_rtt(done.stdout)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, pairs))
    rtts = [rtt for _, _, good, rtt in results if good and rtt is not None]
    return PingSummary(
        pairs=len(results),
        failed=tuple(f"{a.name}->{b.name}" for a, b, good, _ in results if not good),
        mean_rtt_ms=sum(rtts) / len(rtts) if rtts else None,
        seconds=time.monotonic() - started,
        rtts_ms=tuple(rtts),
    )


def _avg_rtt(ping_output: str) -> float | None:
    # "rtt min/avg/max/mdev = 0.123/0.456/0.789/0.012 ms"
    for line in ping_output.splitlines():
        if "min/avg/max" in line:
            try:
                return float(line.split("=")[1].split("/")[1])
            except (IndexError, ValueError):
                return None
    return None


def arping_command(args: argparse.Namespace) -> int:
    lab = attach(args)
    a, b = lab.node(node_index(lab, args.a)), lab.node(node_index(lab, args.b))
    argv = ["arping", "-c", str(args.count), "-w", str(2 * args.count + 2), "-i", bridge_name(lab.plan),
            str(b.overlay_address.ip)]
    print(f"{a.name} -> {b.name} ({b.overlay_address.ip}): ARP on {bridge_name(lab.plan)}", flush=True)
    return subprocess.run(["ip", "netns", "exec", a.netns, *argv], check=False).returncode


def iperf_command(args: argparse.Namespace) -> int:
    lab = attach(args)
    a, b = lab.node(node_index(lab, args.a)), lab.node(node_index(lab, args.b))
    server_ip = str(b.overlay_address.ip)
    server = subprocess.Popen(
        ["ip", "netns", "exec", b.netns, "iperf3", "-s", "-1", "-B", server_ip, "-p", str(IPERF_PORT)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_listening(lab, b.index, IPERF_PORT, server)
        argv = ["iperf3", "-c", server_ip, "-p", str(IPERF_PORT), "-t", f"{args.time:g}", "-P", str(args.parallel)]
        if args.reverse:
            argv.append("-R")
        print(f"{a.name} -> {b.name} ({server_ip}) over the overlay", flush=True)
        return subprocess.run(["ip", "netns", "exec", a.netns, *argv], check=False).returncode
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_listening(lab: Lab, index: int, port: int, server: subprocess.Popen[str], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise LabError(f"iperf3 server exited: {(server.stderr.read() if server.stderr else '').strip()}")
        listening = lab.exec(index, ["ss", "-Htln", f"sport = :{port}"], check=False).stdout.strip()
        if listening:
            return
        time.sleep(0.05)
    raise LabError(f"iperf3 server not listening on node{index} after {timeout:.0f} s")


# -- daemons -----------------------------------------------------------------------------------


def daemon_command(args: argparse.Namespace) -> int:
    lab = attach(args)
    index = node_index(lab, args.node)
    if args.action in ("stop", "restart"):
        started = time.monotonic()
        lab.stop_daemon(index)
        print(f"node{index}: daemon stopped in {time.monotonic() - started:.2f} s")
    if args.action in ("start", "restart"):
        started = time.monotonic()
        if not lab.ovs(index).pid("ovs-vswitchd"):
            lab.start_ovs(index)
        lab.start_daemon(index)
        lab.wait_daemons([index], timeout=30.0)
        print(f"node{index}: daemon ready in {time.monotonic() - started:.2f} s")
    return 0

