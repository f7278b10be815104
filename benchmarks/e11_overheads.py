#!/usr/bin/env python3
"""E11: the overlay's overheads in one table, beside the paper's (sections 4.1 and 5.3).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/e11_overheads.py \
        [--setup-trials 10] [--nodes 10] [--relocations 3] [--moves 3] [--logs DIR]

The paper measured, on one host: the time to create a tunnel (2.4 s on average), the time to
restore IP connectivity after a node is "stopped, reconfigured with a new NID and started"
(6.15 s) and the switching overhead of each node a packet crosses (0.37 ms: half the increase
of the RTT per intermediate node). Here, in one run:

1. Tunnel setup, direct and relayed (`tunnel_bench.measure_setup`): a 2-node lab behind
   endpoint-independent NATs, then behind one symmetric NAT (TURN relay). Per trial, the
   initiator's connect() until both ends are up, and the offer until traffic can flow at the
   answering side (relay first, then direct).
2. Switching overhead: a ring of --nodes full nodes (s = 1, k = 0, no on-demand links, so paths
   follow the ring; daemon defaults otherwise: the transit fast path on, the native data path
   where it is built). Median ping RTT over paths of 0, 2 and 4 intermediate nodes; half the
   least-squares slope is the overhead per intermediate node, as the paper computes it.
3. Relocation, as the paper does it: in the same ring a node's daemon is stopped, the node gets
   a new node id (a new place on the ring) and is started again; measured is the time from the
   start until its new ring successor gets an answer from its (unchanged) overlay address, with
   a ping every 50 ms. Then (E2) an overlay address moved from one node's bridge port to
   another's: the longest gap of a ping every 10 ms across the move.

Targets (issue 13): direct setup <= 0.1 s median, traffic on a relay <= 0.5 s after the offer;
per intermediate node <= 0.15 ms (issue 12). --logs copies the ring's daemon logs there before its
lab is removed (each relocation is printed with its start's wall-clock time, to find it in them). Root only; every lab is removed at the end, also on
failure or Ctrl-C. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from node_bench import pair_with_hops, ping_rtt, underlay_rtt, wait_stable  # noqa: E402  benchmarks/ is on sys.path
from tunnel_bench import NAT_PAIRS, SetupRun, measure_setup  # noqa: E402

from evio.lab.lab import Lab  # noqa: E402
from evio.testing.labs import unique_lab_name  # noqa: E402
from evio.testing.ping_probe import PingProbe, move_address, restore_address  # noqa: E402

PAPER = {"setup_s": 2.4, "relocation_s": 6.15, "switching_ms": 0.37}
TARGET = {"direct_s": 0.1, "relay_traffic_s": 0.5, "switching_ms": 0.15}
INTERMEDIATES = (0, 2, 4)
RELOCATION_PING = 0.05
MOVE_PING = 0.01


@dataclass
class LabFigures:
    rtts: dict[int, float] = field(default_factory=dict)  # intermediates -> median RTT, ms
    underlay_ms: float | None = None  # adjacent pair's underlay RTT
    relocations: list[float] = field(default_factory=list)  # seconds, start -> first answer
    restarts: list[float] = field(default_factory=list)  # seconds, start -> daemon's bridge up
    moves: list[tuple[float, int]] = field(default_factory=list)  # longest gap s, lost probes

    def per_intermediate_ms(self) -> float | None:
        """Half the least-squares slope of the median RTT over the intermediate nodes."""
        if len(self.rtts) < 2:
            return None
        xs = sorted(self.rtts)
        ys = [self.rtts[x] for x in xs]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs) / 2


def successor_of(lab: Lab, index: int) -> int:
    """The node clockwise after node `index` on the ring of node ids."""
    ring = sorted(lab.nodes, key=lambda n: int(n.node_id, 16))
    at = next(i for i, n in enumerate(ring) if n.index == index)
    return ring[(at + 1) % len(ring)].index


def relocate(lab: Lab, index: int) -> tuple[float, float, int, float]:
    """Stop node `index`, give it a new node id, start it; seconds from the start until its new
    successor gets a ping answer from it, and until its bridge was connected to its controller;
    the successor, and the start's wall-clock time."""
    lab.stop_daemon(index)
    lab.renumber(index)
    successor = successor_of(lab, index)
    address = str(lab.node(index).overlay_address.ip)
    with PingProbe(lab, successor, address, RELOCATION_PING) as probe:
        started_at = time.time()
        started = time.monotonic()
        lab.start_daemon(index)
        lab.wait_daemons([index], timeout=60.0)
        bridge_up = time.monotonic() - started
        trace = probe.wait_reply_after(started_at, timeout=90.0)
    first = min(at for _, at in trace.replies if at > started_at)
    return first - started_at, bridge_up, successor, started_at


def move_once(lab: Lab, pinger: int, home: int, away: int) -> tuple[float, int]:
    """Move `home`'s overlay address to `away` under a ping from `pinger`; (longest gap, lost)."""
    node = lab.node(home)
    address, prefixlen = str(node.overlay_address.ip), node.overlay_address.network.prefixlen
    try:
        with PingProbe(lab, pinger, address, MOVE_PING) as probe:
            probe.wait_replies(20, timeout=30)
            moved_at = time.time()
            move_address(lab, address, prefixlen, home, away)
            probe.wait_reply_after(time.time(), timeout=30)
            time.sleep(0.5)  # the gap is only known once replies run on after it
        trace = probe.trace()
    finally:
        restore_address(lab, address, prefixlen, home=home, away=away)
    outage = trace.outage_at(moved_at)
    start = outage.last_before if outage.last_before is not None else moved_at
    return trace.max_gap(start, trace.replies[-1][1]), trace.lost_after(moved_at)


def lab_part(args: argparse.Namespace) -> LabFigures:
    figures = LabFigures()
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    started = time.monotonic()
    with Lab.up(unique_lab_name(), nodes=args.nodes, nat="eim", topology=topology, daemons=True) as lab:
        try:
            ring_part(lab, args, figures, started)
        finally:
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                for node in lab.nodes:
                    log = lab.daemon_log(node.index)
                    if log.exists():
                        shutil.copy(log, args.logs / f"{node.name}.log")
    return figures


def ring_part(lab: Lab, args: argparse.Namespace, figures: LabFigures, started: float) -> None:
    """Switching overhead, relocations and address moves in the ring `lab`, into `figures`."""
    topo = wait_stable(lab, timeout=60 + 4 * args.nodes)
    print(f"ring of {args.nodes} stable {time.monotonic() - started:.1f} s after the start", flush=True)
    for intermediates in INTERMEDIATES:
        pair = pair_with_hops(lab, topo, intermediates + 1)
        if pair is None:
            print(f"  no path with {intermediates} intermediate nodes (needs --nodes {2 * intermediates + 2})")
            continue
        rtt = ping_rtt(lab, *pair, count=100)
        if rtt is not None:
            figures.rtts[intermediates] = rtt[1]
            print(f"  {intermediates} intermediate, node{pair[0]} -> node{pair[1]}: median RTT {rtt[1]:.3f} ms",
                  flush=True)
        if intermediates == 0:
            figures.underlay_ms = underlay_rtt(lab, *pair)

    rng = random.Random(args.seed)
    for index in rng.sample([n.index for n in lab.nodes], min(args.relocations, args.nodes)):
        seconds, bridge_up, successor, at = relocate(lab, index)
        figures.relocations.append(seconds)
        figures.restarts.append(bridge_up)
        print(f"  node{index} restarted with a new node id at {time.strftime('%H:%M:%S', time.gmtime(at))} UTC: "
              f"answers its new successor node{successor} after {seconds:.2f} s "
              f"(bridge connected after {bridge_up:.2f} s)", flush=True)
        wait_stable(lab, timeout=60 + 4 * args.nodes)

    for _ in range(args.moves):
        pinger, home, away = rng.sample([n.index for n in lab.nodes], 3)
        gap, lost = move_once(lab, pinger, home, away)
        figures.moves.append((gap, lost))
        print(f"  node{home}'s address moved to node{away} under a ping from node{pinger}: longest gap "
              f"{gap:.3f} s, {lost} probes lost", flush=True)


def fmt_runs(values: list[float], spec: str = ".3f") -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):{spec}}, max {max(values):{spec}} ({len(values)} runs)"


def print_table(setups: list[SetupRun], lab: LabFigures) -> None:
    print("\n| overhead | evio (this run) | paper (E11) | target |")
    print("|---|---|---|---|")
    for run in setups:
        kind = "direct" if run.nats == NAT_PAIRS[0] else "relayed (symmetric NAT)"
        target = f"<= {TARGET['direct_s']} s median" if kind == "direct" else ""
        print(f"| tunnel setup, {kind}: connect() -> both ends up, s | {fmt_runs(run.times)} | {PAPER['setup_s']} | {target} |")
        target = "" if kind == "direct" else f"<= {TARGET['relay_traffic_s']} s"
        print(f"| tunnel setup, {kind}: offer -> traffic at the answering side, s | {fmt_runs(run.answering)} "
              f"| | {target} |")
    per_hop = lab.per_intermediate_ms()
    slope = "-" if per_hop is None else (
        f"{per_hop:.3f} (median RTTs {', '.join(f'{k}: {v:.3f}' for k, v in sorted(lab.rtts.items()))} ms)")
    print(f"| switching per intermediate node, one way, ms | {slope} | {PAPER['switching_ms']} "
          f"| <= {TARGET['switching_ms']} |")
    if 0 in lab.rtts and lab.underlay_ms is not None:
        print(f"| adjacent hop over its underlay, one way, ms | {(lab.rtts[0] - lab.underlay_ms) / 2:.3f} "
              f"(RTT {lab.rtts[0]:.3f} against the underlay's {lab.underlay_ms:.3f}) | | |")
    print(f"| relocation: restarted with a new node id -> its successor gets answers, s | {fmt_runs(lab.relocations, '.2f')} "
          f"| {PAPER['relocation_s']} | |")
    print(f"| of which the daemon's start until its bridge is connected, s | {fmt_runs(lab.restarts, '.2f')} | | |")
    print(f"| address moved to another node: longest ping gap, s | {fmt_runs([g for g, _ in lab.moves])} "
          f"| (6.15 s for a relocation) | <= 1 s (E2) |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup-trials", type=int, default=10, help="tunnels set up per NAT pair (default 10)")
    ap.add_argument("--nodes", type=int, default=10, help="ring size for switching and relocation, >= 10 (default 10)")
    ap.add_argument("--relocations", type=int, default=3, help="nodes restarted with a new node id (default 3)")
    ap.add_argument("--moves", type=int, default=3, help="addresses moved between nodes (default 3)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--logs", type=Path, default=None, metavar="DIR", help="copy the ring's daemon logs here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("e11_overheads: needs root (network namespaces, Open vSwitch, daemons)", file=sys.stderr)
        return 2
    if args.nodes < 10:
        print("e11_overheads: --nodes must be at least 10 (a path with 4 intermediate nodes)", file=sys.stderr)
        return 2
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores shared with everything else)", flush=True)
    setups = []
    for nats in NAT_PAIRS:
        (run,) = measure_setup(args.setup_trials, nats).values()
        setups.append(run)
        print(f"setup {nats[0]} / {nats[1]}: {', '.join(f'{t:.3f}' for t in run.times)} s; paths "
              f"{', '.join(sorted(run.kinds))}", flush=True)
    lab = lab_part(args)
    print_table(setups, lab)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
