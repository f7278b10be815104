"""E7 in the lab: overlay path lengths from FRB hop counts, beside the simulator and the paper (Fig. 7).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/e7_path_length.py \
        [--nodes 16,32,64] [--seed 1] [--nat eim] [--plot e7.png] [--svg-dir DIR] [--name sse7] [--form-timeout S]

For each n: a lab of n full nodes (`evio lab`, daemons on, s = 2, k = floor(log2 n),
the daemon's defaults) is brought up and left to form its ring; then every node in
turn sends one ARP request (a broadcast) and every other node's daemon reports
the FRB hop count it arrived with (the status' `broadcasts.recent`, recorded by
the switch for every FRB it receives). Path length is that hop count: 1 for a
neighbour. The simulator builds an overlay of the same n with the same seed and
floods from every node with the same bound code. Printed per n: pairs measured,
exactly-once deliveries, mean path length (each node's average over the roots,
averaged over nodes: Fig. 7's definition), the longest path, and the mean of
each node's longest path (Table 1's quantity), beside the paper's ~1/2 log2 n.
The shortest path over the lab's links (BFS) is printed too: Bounded Flood
follows clockwise arcs, so its paths may be longer than the shortest.
Writes the histogram of path lengths (lab beside simulator) to --plot, and the
live overlay (Fig. 3) of each lab to --svg-dir (SVG and PNG).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evio.cli.lab_node_cmd import ring_picture
from evio.lab.daemons import Topology
from evio.lab.lab import Lab
from evio.lab.node_config import bridge_name
from evio.plots.histograms import draw_path_histograms
from evio.plots.ring import draw_ring
from evio.sim.flood import FloodGraph, flood
from evio.sim.overlay import OverlayParams, build_overlay
from evio.sim.stats import paper_fig7_estimate

ARP = 0x0806
BATCH = 8  # roots per read of the logs: far below the 128 broadcasts each daemon keeps


@dataclass
class Measured:
    source: str
    pairs: dict[tuple[str, str], int]  # (root, receiver) -> hops of its first copy
    expected: int  # (root, receiver) pairs that should have been measured
    duplicates: int = 0
    note: str = ""

    def per_node_mean(self) -> float:
        by_node: dict[str, list[int]] = {}
        for (_, receiver), hops in self.pairs.items():
            by_node.setdefault(receiver, []).append(hops)
        means = [sum(v) / len(v) for v in by_node.values()]
        return sum(means) / len(means) if means else 0.0

    def longest(self) -> int:
        return max(self.pairs.values(), default=0)

    def mean_node_max(self) -> float:
        most: dict[str, int] = {}
        for (_, receiver), hops in self.pairs.items():
            most[receiver] = max(most.get(receiver, 0), hops)
        return sum(most.values()) / len(most) if most else 0.0


# -- the lab -----------------------------------------------------------------------------------


def formed(topo: Topology) -> bool:
    """Every daemon answers, successor links close the ring, every link is up at both ends."""
    return not topo.unreachable and not topo.ring_gaps() and all(
        link.state == "up" and topo.adjacent(link.node, link.peer) for link in topo.links
    )


def wait_formed(lab: Lab, timeout: float, quiet: float = 5.0) -> tuple[Topology, float | None]:
    """The topology once formed and unchanged for `quiet` seconds (or at the timeout), and when it formed."""
    started = time.monotonic()
    stable_since: float | None = None
    last: frozenset[tuple[str, str, str, str]] | None = None
    first_formed: float | None = None
    while True:
        topo = lab.topology()
        now = time.monotonic()
        snapshot = frozenset((l.node, l.peer, l.type, l.state) for l in topo.links)
        if formed(topo):
            first_formed = first_formed if first_formed is not None else now - started
            if snapshot != last:
                stable_since, last = now, snapshot
            elif stable_since is not None and now - stable_since >= quiet:
                return topo, first_formed
        else:
            stable_since, last = None, None
        if now - started > timeout:
            return topo, first_formed
        time.sleep(1.0)


def broadcast_logs(lab: Lab) -> dict[str, dict[str, Any]]:
    overlay = lab.plan.overlay
    return {n.name: lab.daemon_status(n.index)["overlays"][overlay]["broadcasts"] for n in lab.nodes}


def measure_lab(lab: Lab) -> Measured:
    """One ARP broadcast from every node; each receiver's hop count for it, from its daemon's log."""
    nodes = lab.nodes
    names_by_id = {n.node_id: n.name for n in nodes}
    bridge = bridge_name(lab.plan)
    pairs: dict[tuple[str, str], int] = {}
    duplicates = 0
    for start in range(0, len(nodes), BATCH):
        batch = nodes[start:start + BATCH]
        before = {name: log["received"] for name, log in broadcast_logs(lab).items()}
        for root in batch:
            target = nodes[root.index % len(nodes)]  # the next lab node: a reply comes at once
            lab.exec(root.index, ["arping", "-c", "1", "-w", "2", "-i", bridge, str(target.overlay_address.ip)],
                     check=False)  # fmt: skip
        roots = {root.node_id for root in batch}
        wanted = len(batch) * (len(nodes) - 1)
        deadline = time.monotonic() + 15.0
        while True:
            logs = broadcast_logs(lab)
            seen: dict[tuple[str, str], list[int]] = {}
            for name, log in logs.items():
                if min((e["seq"] for e in log["recent"]), default=before[name] + 1) > before[name] + 1:
                    raise RuntimeError(f"{name}'s broadcast log overflowed: make BATCH smaller")
                for entry in log["recent"]:
                    if entry["seq"] > before[name] and entry["root"] in roots and entry["ethertype"] == ARP:
                        seen.setdefault((names_by_id[entry["root"]], name), []).append(int(entry["hop_count"]))
            if len(seen) >= wanted or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # a duplicate on its way would be logged by now
        logs = broadcast_logs(lab)
        seen = {}
        for name, log in logs.items():
            for entry in log["recent"]:
                if entry["seq"] > before[name] and entry["root"] in roots and entry["ethertype"] == ARP:
                    seen.setdefault((names_by_id[entry["root"]], name), []).append(int(entry["hop_count"]))
        for pair, hops in seen.items():
            if pair[0] == pair[1]:
                duplicates += len(hops)  # back at its root
                continue
            pairs[pair] = hops[0]
            duplicates += len(hops) - 1
    n = len(nodes)
    return Measured("lab: FRB hop counts", pairs, n * (n - 1), duplicates)


def shortest_paths(topo: Topology) -> Measured:
    pairs: dict[tuple[str, str], int] = {}
    live = topo.live
    for a in live:
        for b in live:
            if a != b:
                hops = topo.hops(a, b)
                if hops is not None:
                    pairs[(a, b)] = hops
    return Measured("lab: shortest path (BFS)", pairs, len(live) * (len(live) - 1))


# -- the simulator -----------------------------------------------------------------------------


def measure_sim(n: int, seed: int) -> Measured:
    built = build_overlay(n, OverlayParams(successors=2), random.Random(seed))
    graph = FloodGraph(built.overlay.adjacency())
    pairs: dict[tuple[str, str], int] = {}
    duplicates = 0
    for root in sorted(graph.live):
        result = flood(graph, root)
        duplicates += result.duplicates
        for node, hops in result.hops.items():
            if node != root:
                pairs[(f"{root:032x}", f"{node:032x}")] = hops
    note = "" if built.settled else " (still settling)"
    return Measured(f"simulator, seed {seed}{note}", pairs, n * (n - 1), duplicates)


# -- report ------------------------------------------------------------------------------------


def print_table(rows: Mapping[int, Sequence[Measured]], formed_after: Mapping[int, str]) -> None:
    header = (f"{'n':>4}  {'source':<30} {'pairs':>11} {'dup':>4} {'mean':>6} {'max':>4} "
              f"{'mean node max':>13}   {'paper: Fig. 7 ~1/2 log2 n':>25}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for n, measured in rows.items():
        for m in measured:
            print(f"{n:>4}  {m.source:<30} {f'{len(m.pairs)}/{m.expected}':>11} {m.duplicates:>4} "
                  f"{m.per_node_mean():>6.2f} {m.longest():>4} {m.mean_node_max():>13.2f}   "
                  f"{paper_fig7_estimate(n):>25.2f}")  # fmt: skip
        if formed_after.get(n):
            print(f"      ({formed_after[n]})")
    print("paper, n = 128: mean 3.41 hops (section 5.6); Table 1: each node's longest path 5-12 hops, "
          "74.2 % at most 9")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="16,32", help="lab sizes, comma-separated (default 16,32)")
    parser.add_argument("--seed", type=int, default=1, help="simulator seed (default 1)")
    parser.add_argument("--nat", default="eim", help="NAT kind of the lab nodes (default eim; path length "
                        "does not depend on it)")
    parser.add_argument("--name", default="sse7", help="lab name (default sse7)")
    parser.add_argument("--plot", type=Path, default=Path("e7_path_length.png"), help="histogram file (.png/.svg)")
    parser.add_argument("--svg-dir", type=Path, default=None, help="draw each lab's overlay here (Fig. 3)")
    parser.add_argument("--sim-only", action="store_true", help="no lab: the simulator's rows only")
    parser.add_argument("--form-timeout", type=float, default=None, help="seconds to wait for the overlay to "
                        "form before measuring it as it is (default 60 + 4 n)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.nodes.split(",") if x.strip()]

    rows: dict[int, list[Measured]] = {}
    formed_after: dict[int, str] = {}
    for n in sizes:
        measured: list[Measured] = []
        if not args.sim_only:
            started = time.monotonic()
            Lab.down(args.name)  # a leftover from an interrupted run
            try:
                lab = Lab.up(args.name, nodes=n, nat=args.nat, daemons=True, topology={"successors": 2})
                up = time.monotonic() - started
                limit = args.form_timeout if args.form_timeout is not None else 60.0 + 4.0 * n
                topo, at = wait_formed(lab, timeout=limit)
                pending = sum(1 for link in topo.links if link.state != "up")
                formed_after[n] = (f"lab up in {up:.0f} s; ring closed, all links up and quiet "
                                   f"{at:.0f} s later" if at is not None and formed(topo)
                                   else f"lab up in {up:.0f} s; NOT formed after {limit:.0f} s: "
                                   f"{len(topo.ring_gaps())} ring gaps, {pending} link ends not up; "
                                   "measured as it was")  # fmt: skip
                if args.svg_dir is not None:
                    args.svg_dir.mkdir(parents=True, exist_ok=True)
                    picture = ring_picture(topo, f"evio lab, {n} nodes: the live overlay")
                    for suffix in (".svg", ".png"):
                        draw_ring(picture, args.svg_dir / f"e7_lab{n}{suffix}")
                measured.append(measure_lab(lab))
                measured.append(shortest_paths(topo))
            finally:
                Lab.down(args.name)
        measured.append(measure_sim(n, args.seed))
        rows[n] = measured
        print(f"n={n} done", file=sys.stderr, flush=True)

    print("E7: overlay path length (hops), s = 2, k = floor(log2 n), ln form")
    print()
    print_table(rows, formed_after)
    panels = {
        f"n = {n}": {m.source: list(m.pairs.values()) for m in measured if "BFS" not in m.source}
        for n, measured in rows.items()
    }
    notes = {f"n = {n}": f"paper, Fig. 7: ~{paper_fig7_estimate(n):.1f} hops" for n in rows}
    draw_path_histograms(panels, args.plot, "E7: path length of Bounded Flood broadcasts", notes)
    print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
