"""E9: Bounded Flood against STP on the same overlay, the same nodes and the same pairs (paper section 5.9).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/e9_stp.py \
        [--nodes 16] [--pairs 8] [--seconds 3] [--seed 1] [--plot e9_stp.png] [--name sse9]

One lab of n full nodes (s = 2, k = floor(log2 n), endpoint-independent NATs, on-demand links off
in both modes so both switch over the same kind of overlay). It first runs with every bridge in
`switching: stp` (Open vSwitch's RSTP and MAC learning, no SDN controller), then every daemon is
restarted with Bounded Flood: same node ids, so the same ring (long-distance links are drawn anew).
In each mode, once the overlay has formed:

- links blocked: overlay links up at both ends that RSTP keeps out of the tree (a port of theirs
  Alternate/Discarding); Bounded Flood blocks none;
- path length, every ordered pair: STP, hops over the tree (its forwarding links, from each
  bridge's RSTP port states); Bounded Flood, the hop count of the first FRB copy each node
  receives of every other node's ARP broadcast (as benchmarks/e7_path_length.py);
- broadcast delivery: a broadcast ping (`ping -b`, every node answering broadcasts) from every
  node: which nodes answer the first echo, and duplicates;
- TCP throughput (iperf3, one stream) and ping RTT for a fixed sample of pairs (seeded: the same
  pairs in both modes);
- convergence after a link failure: the tunnel of one successor link that the spanning tree
  forwards on (the same node pair in both modes) is cut in the underlay (nftables, one end); both
  ends see it dead after `dead_after`, take its port off, and the overlay may relink through the
  relay. Pings (every 0.2 s) from both ends of the cut link to every other node run for a fixed
  window; convergence is the end of the last gap of a second or more after the cut, and every
  pair is pinged once more at the end.

Prints one table, BF beside STP beside the paper's figures, and writes the plot (path length
histograms, throughput per pair, throughput CDF) to --plot.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from e7_path_length import formed, measure_lab, wait_formed

from evio.cli.lab_node_cmd import all_pairs_ping
from evio.lab.daemons import Topology
from evio.lab.errors import LabError
from evio.lab.iperf import tcp_run
from evio.lab.lab import Lab
from evio.lab.node_config import node_config_path
from evio.lab.spanning_tree import (
    SpanningTree,
    all_tree_hops,
    broadcast_ping,
    cut_tunnel,
    enable_broadcast_echo,
    mend_tunnel,
    rstp_ports,
    spanning_tree,
    tree_hops,
)
from evio.plots.comparison import draw_mode_comparison
from evio.testing.scenarios import PingTrace

PROBE_INTERVAL = 0.2
OUTAGE = 1.0  # a gap between replies this long or longer is an interruption
MODES = ("STP", "BF")


@dataclass
class ModeResult:
    mode: str
    formed_after: str = ""
    links: int = 0
    blocked: int = 0
    tree: str = ""
    hops: dict[tuple[str, str], int] = field(default_factory=dict)
    hops_expected: int = 0
    broadcast_answered: int = 0
    broadcast_expected: int = 0
    broadcast_duplicates: int = 0
    mbit: dict[tuple[int, int], float | None] = field(default_factory=dict)
    rtt_ms: dict[tuple[int, int], float | None] = field(default_factory=dict)
    cut: str = ""
    down_after: float | None = None
    converged_after: float | None = None
    interrupted_pairs: int = 0
    probed_pairs: int = 0
    pairs_after: tuple[int, int] = (0, 0)
    capped: bool = False  # some probed pair had not answered again when the window closed
    tree_moved: list[str] = field(default_factory=list)  # STP: did the forwarding links change meanwhile

    def mean_hops(self) -> float:
        return statistics.fmean(self.hops.values()) if self.hops else 0.0


# -- lab ---------------------------------------------------------------------------------------


def set_switching(lab: Lab, switching: str) -> None:
    """Every node's config with this bridge switching mode (read at the daemon's next start)."""
    for node in lab.nodes:
        path = node_config_path(lab.directory, lab.plan.node(node.index))
        document = json.loads(path.read_text())
        bridge = document["overlays"][lab.plan.overlay]["bridge"]
        bridge["switching"] = switching
        path.write_text(json.dumps(document, indent=2) + "\n")


def restart_daemons(lab: Lab, timeout: float) -> None:
    """Stop every daemon (all at once, so no mixed overlay lingers), then start them all again."""
    records = [r for r in (lab.daemon(n.index) for n in lab.nodes) if r is not None]
    for record in records:
        try:
            os.kill(record.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for record in records:
        lab.stop(record)
    for node in lab.nodes:
        lab.start_daemon(node.index)
    lab.wait_daemons([n.index for n in lab.nodes], timeout)


# -- measurements --------------------------------------------------------------------------------


def stp_tree(lab: Lab, topo: Topology) -> SpanningTree:
    ports = {node.name: rstp_ports(lab, node.index) for node in lab.nodes}
    return spanning_tree(topo, ports)


def wait_tree(lab: Lab, timeout: float) -> tuple[Topology, SpanningTree]:
    """The topology and its spanning tree once every link's ports are decided and they form a tree."""
    deadline = time.monotonic() + timeout
    while True:
        topo = lab.topology()
        tree = stp_tree(lab, topo)
        if (formed(topo) and tree.is_tree and not tree.undecided) or time.monotonic() > deadline:
            return topo, tree
        time.sleep(1.0)


def broadcast_delivery(lab: Lab, log_dir: Path | None, mode: str) -> tuple[int, int, int]:
    """(answers to the first echo, answers expected, duplicate answers) of a broadcast ping from every
    node, one root at a time (so one root's echoes and ARP requests do not load another's)."""
    nodes = lab.nodes

    def one(root_index: int) -> tuple[int, int]:
        root = lab.node(root_index)
        seen, output = broadcast_ping(lab, root_index)
        if log_dir is not None:
            (log_dir / f"broadcast-{mode}-node{root_index}.txt").write_text(output)
        others = {str(n.overlay_address.ip) for n in nodes} - {str(root.overlay_address.ip)}
        return len(others & set(seen)), sum(count - 1 for count in seen.values())

    results = [one(n.index) for n in nodes]
    return sum(a for a, _ in results), len(nodes) * (len(nodes) - 1), sum(d for _, d in results)


def rtt_ms(lab: Lab, a: int, b: int) -> float | None:
    done = lab.exec(a, ["ping", "-n", "-q", "-c", "5", "-i", "0.2", "-W", "2", str(lab.node(b).overlay_address.ip)],
                    check=False, timeout=20)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("rtt"):
            return float(line.split("=")[1].split("/")[1])
    return None


def link_state(lab: Lab, index: int, peer_index: int) -> str | None:
    peer = lab.node(peer_index).node_id
    for link in lab.daemon_status(index)["overlays"][lab.plan.overlay]["links"]:
        if link.get("peer") == peer:
            return str(link.get("state"))
    return None


def convergence(lab: Lab, a: int, b: int, window: float, result: ModeResult) -> None:
    """Cut the tunnel a-b; pings from a and b to every other node for `window` seconds."""
    probes = []
    logs = lab.directory / "logs"
    for source in (a, b):
        for target in lab.nodes:
            if target.index == source:
                continue
            log_path = logs / f"e9-{result.mode}-{source}-{target.index}.log"
            argv = ["ping", "-D", "-n", "-i", f"{PROBE_INTERVAL:g}", "-W", "1", str(target.overlay_address.ip)]
            probes.append((log_path, lab.spawn(source, argv, role="e9-ping", log_path=log_path)))
    cut_at = time.time()
    try:
        time.sleep(3.0)  # every probe answering before the cut
        try:
            address = cut_tunnel(lab, a, b)
        except LabError as exc:
            result.cut = f"not cut: {exc}"
            return
        cut_at = time.time()
        result.cut = f"node{a}-node{b} (node{a} drops {address})"
        down_at = None
        while time.time() - cut_at < window:
            if down_at is None and link_state(lab, a, b) != "up":
                down_at = time.time()
            time.sleep(0.25)
        result.down_after = None if down_at is None else down_at - cut_at
    finally:
        for _, record in probes:
            try:
                os.kill(record.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for _, record in probes:
            lab.stop(record)
        mend_tunnel(lab, a)
    end = cut_at + window
    last_recovery = 0.0
    interrupted = 0
    for log_path, _ in probes:
        trace = PingTrace.parse(log_path.read_text(errors="replace") if log_path.exists() else "", PROBE_INTERVAL)
        stamps = [cut_at, *(at for _, at in trace.replies if cut_at < at < end)]
        gaps = [(x, y) for x, y in zip(stamps, stamps[1:]) if y - x >= OUTAGE]
        if stamps[-1] < end - OUTAGE:  # never answered again within the window
            gaps.append((stamps[-1], end))
            result.capped = True
        if gaps:
            interrupted += 1
            last_recovery = max(last_recovery, gaps[-1][1] - cut_at)
    result.converged_after = last_recovery
    result.interrupted_pairs = interrupted
    result.probed_pairs = len(probes)


def choose_cut(topo: Topology, tree: SpanningTree, lab: Lab) -> tuple[int, int]:
    """A successor link the spanning tree forwards on, whose removal splits the tree most evenly."""
    best: tuple[int, tuple[int, int]] | None = None
    for link in topo.links:
        if link.type != "successor" or frozenset((link.node, link.peer)) not in tree.forwarding:
            continue
        if link.path != "direct":
            continue
        rest = SpanningTree(tree.nodes, tree.forwarding - {frozenset((link.node, link.peer))}, tree.blocked,
                            tree.undecided)  # fmt: skip
        side = sum(1 for node in tree.nodes if tree_hops(rest, link.node, node) is not None)
        balance = min(side, len(tree.nodes) - side)
        pair = (int(link.node.removeprefix("node")), int(link.peer.removeprefix("node")))
        if best is None or balance > best[0]:
            best = (balance, pair)
    if best is None:
        raise LabError("no direct successor link on the spanning tree to cut")
    return best[1]


def measure(
    lab: Lab,
    log_dir: Path | None,
    mode: str,
    pairs: Sequence[tuple[int, int]],
    seconds: float,
    window: float,
    cut: tuple[int, int] | None,
    formed_timeout: float,
) -> tuple[ModeResult, tuple[int, int]]:
    result = ModeResult(mode)
    started = time.monotonic()
    topo, at = wait_formed(lab, timeout=formed_timeout)
    if not formed(topo):
        raise LabError(f"{mode}: the overlay did not form in {formed_timeout:.0f} s: gaps {topo.ring_gaps()}")
    result.links = len({frozenset((l.node, l.peer)) for l in topo.links if topo.adjacent(l.node, l.peer)})
    n = len(lab.nodes)
    if mode == "STP":
        topo, tree = wait_tree(lab, timeout=60.0)
        result.formed_after = f"formed {at:.0f} s, tree {time.monotonic() - started:.0f} s after the daemons were ready"
        result.blocked = len(tree.blocked)
        result.tree = (f"{len(tree.forwarding)} forwarding links, {len(tree.blocked)} blocked, "
                       f"{len(tree.undecided)} undecided; a tree: {tree.is_tree}")  # fmt: skip
        result.hops = all_tree_hops(tree)
        cut = cut or choose_cut(topo, tree, lab)
    else:
        result.formed_after = f"formed {at:.0f} s after the daemons were ready"
        measured = measure_lab(lab)
        result.hops = dict(measured.pairs)
        result.tree = f"FRB: {len(measured.pairs)}/{measured.expected} pairs, {measured.duplicates} duplicate copies"
    result.hops_expected = n * (n - 1)
    print(f"{mode}: {result.formed_after}; {result.tree}", file=sys.stderr, flush=True)
    before = stp_tree(lab, topo).forwarding if mode == "STP" else frozenset()
    result.broadcast_answered, result.broadcast_expected, result.broadcast_duplicates = broadcast_delivery(
        lab, log_dir, mode
    )
    if mode == "STP":
        after = stp_tree(lab, lab.topology()).forwarding
        result.tree_moved.append(f"during the broadcast pings: {'MOVED' if after != before else 'unchanged'}")
        before = after
    for a, b in pairs:
        result.rtt_ms[(a, b)] = rtt_ms(lab, a, b)
        run = tcp_run(lab, a, b, seconds, role="e9-iperf")
        result.mbit[(a, b)] = run.mbit if run is not None else None
        print(f"{mode}: node{a} -> node{b} {result.mbit[(a, b)]} Mbit/s", file=sys.stderr, flush=True)
    if mode == "STP":
        after = stp_tree(lab, lab.topology()).forwarding
        result.tree_moved.append(f"during the pair runs: {'MOVED' if after != before else 'unchanged'}")
    assert cut is not None
    if topo.adjacent(f"node{cut[0]}", f"node{cut[1]}"):
        convergence(lab, cut[0], cut[1], window, result)
        if result.cut.startswith("not cut"):
            return result, cut
        summary = all_pairs_ping(lab, count=2)
        result.pairs_after = (summary.pairs - len(summary.failed), summary.pairs)
    else:
        result.cut = f"node{cut[0]}-node{cut[1]} not linked in this overlay: not cut"
    return result, cut


# -- report ------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def converged(result: ModeResult) -> str:
    text = fmt(result.converged_after)
    return f">= {text} (window)" if result.capped else text


def print_table(results: dict[str, ModeResult], pairs: Sequence[tuple[int, int]], n: int) -> None:
    stp, bf = results["STP"], results["BF"]

    def mean(values: dict[tuple[int, int], float | None]) -> float | None:
        got = [v for v in values.values() if v is not None]
        return statistics.fmean(got) if got else None

    def median(values: dict[tuple[int, int], float | None]) -> float | None:
        got = [v for v in values.values() if v is not None]
        return statistics.median(got) if got else None

    rows = [
        ("overlay links (up at both ends)", str(bf.links), str(stp.links), ""),
        ("links blocked (RSTP Alternate/Discarding)", str(bf.blocked), str(stp.blocked),
         "STP disables links until a tree remains"),
        ("mean path length (hops, all pairs)", f"{bf.mean_hops():.2f}", f"{stp.mean_hops():.2f}",
         "BF 3.41 at n = 128 (5.6); STP: longer paths"),
        ("longest path (hops)", str(max(bf.hops.values(), default=0)), str(max(stp.hops.values(), default=0)), ""),
        ("pairs measured", f"{len(bf.hops)}/{bf.hops_expected}", f"{len(stp.hops)}/{stp.hops_expected}", ""),
        ("broadcast ping answered (first echo)", f"{bf.broadcast_answered}/{bf.broadcast_expected}",
         f"{stp.broadcast_answered}/{stp.broadcast_expected}", "E1: every node once"),
        ("broadcast duplicate answers", str(bf.broadcast_duplicates), str(stp.broadcast_duplicates), "0"),
        (f"TCP throughput, mean of {len(pairs)} pairs (Mbit/s)", fmt(mean(bf.mbit)), fmt(mean(stp.mbit)),
         "BF: 37 % of pairs > 60 Mbit/s, STP 18 % (Fig. 9)"),
        ("TCP throughput, median (Mbit/s)", fmt(median(bf.mbit)), fmt(median(stp.mbit)), ""),
        ("ping RTT, mean of the pairs (ms)", fmt(mean(bf.rtt_ms), ".2f"), fmt(mean(stp.rtt_ms), ".2f"),
         "BF: 97 % more paths < 36 ms (Fig. 8)"),
        ("cut link seen down after (s)", fmt(bf.down_after), fmt(stp.down_after), ""),
        ("all probed pairs answer again after (s)", converged(bf), converged(stp),
         "STP: traffic stops ~48 s when the tree changes (Fig. 6)"),
        ("probed pairs interrupted", f"{bf.interrupted_pairs}/{bf.probed_pairs}",
         f"{stp.interrupted_pairs}/{stp.probed_pairs}", "BF: no iperf failure under churn (E8)"),
        ("every pair pings after the window", f"{bf.pairs_after[0]}/{bf.pairs_after[1]}",
         f"{stp.pairs_after[0]}/{stp.pairs_after[1]}", ""),
    ]  # fmt: skip
    print(f"E9: STP against Bounded Flood, one lab of n = {n} (s = 2, k = floor(log2 n), on-demand off)")
    print()
    header = f"{'':<44} {'BF':>12} {'STP':>12} {'BF/STP':>7}   paper (n = 225, section 5.9 unless noted)"
    print(header)
    print("-" * len(header))
    for label, b, s, paper in rows:
        ratio = ""
        try:
            ratio = f"{float(b) / float(s):.2f}" if float(s) else ""
        except ValueError:
            pass
        print(f"{label:<44} {b:>12} {s:>12} {ratio:>7}   {paper}")
    print()
    print(
        f"{'pair':<16} {'BF hops':>8} {'STP hops':>9} {'BF Mbit/s':>10} {'STP Mbit/s':>11} {'BF ms':>7} {'STP ms':>7}"
    )
    for a, b in pairs:
        key = (f"node{a}", f"node{b}")
        print(f"{f'node{a}->node{b}':<16} {bf.hops.get(key, '-')!s:>8} {stp.hops.get(key, '-')!s:>9} "
              f"{fmt(bf.mbit.get((a, b))):>10} {fmt(stp.mbit.get((a, b))):>11} "
              f"{fmt(bf.rtt_ms.get((a, b)), '.2f'):>7} {fmt(stp.rtt_ms.get((a, b)), '.2f'):>7}")  # fmt: skip
    better = sum(1 for p in pairs if (bf.mbit.get(p) or 0) > (stp.mbit.get(p) or 0))
    print(f"\nBF faster than STP for {better} of {len(pairs)} pairs")
    for r in (bf, stp):
        print(f"{r.mode}: {r.formed_after}; {r.tree}; cut {r.cut}")
    if stp.tree_moved:
        print(f"STP tree (forwarding links) {'; '.join(stp.tree_moved)}")
    print(
        "\npaper, E9: n = 225 on 3 hosts, 300 pairs; BF 37 % of pairs above 60 Mbit/s against 18 % for STP "
        "(2.2x); 97 % more paths under 36 ms with BF"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16, help="lab size (default 16)")
    parser.add_argument("--pairs", type=int, default=8, help="node pairs for throughput and RTT (default 8)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per iperf3 run (default 3)")
    parser.add_argument("--window", type=float, default=25.0, help="seconds of pings after the cut (default 25)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the pair sample (default 1)")
    parser.add_argument("--name", default="sse9", help="lab name (default sse9)")
    parser.add_argument("--plot", type=Path, default=Path("e9_stp.png"), help="plot file (.png/.svg)")
    parser.add_argument("--log-dir", type=Path, default=None, help="keep the broadcast pings' output here")
    args = parser.parse_args()
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    n = args.nodes
    everyone = [(a, b) for a in range(1, n + 1) for b in range(1, n + 1) if a != b]
    pairs = random.Random(args.seed).sample(everyone, min(args.pairs, len(everyone)))
    topology = {"successors": 2, "on_demand": {"enabled": False}}
    formed_timeout = 60.0 + 4.0 * n

    results: dict[str, ModeResult] = {}
    Lab.down(args.name)  # a leftover from an interrupted run
    started = time.monotonic()
    try:
        lab = Lab.up(args.name, nodes=n, nat="eim", daemons=True, topology=topology, switching="stp")
        print(f"lab up in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        enable_broadcast_echo(lab)
        results["STP"], cut = measure(lab, args.log_dir, "STP", pairs, args.seconds, args.window, None, formed_timeout)
        set_switching(lab, "bounded-flood")
        restart_daemons(lab, timeout=30.0 + 2.0 * n)
        results["BF"], _ = measure(lab, args.log_dir, "BF", pairs, args.seconds, args.window, cut, formed_timeout)
    finally:
        Lab.down(args.name)
    print(f"run took {time.monotonic() - started:.0f} s", file=sys.stderr)

    print_table(results, pairs, n)
    labels = [f"{a}->{b}" for a, b in pairs]
    draw_mode_comparison(
        {mode: list(results[key].hops.values()) for mode, key in (("Bounded Flood", "BF"), ("STP", "STP"))},
        {mode: [results[key].mbit.get(p) for p in pairs] for mode, key in (("Bounded Flood", "BF"), ("STP", "STP"))},
        labels,
        args.plot,
        f"E9: Bounded Flood against STP, one lab of {n} nodes",
    )
    print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
