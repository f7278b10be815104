#!/usr/bin/env python3
"""Benchmark (not a test): how long the unicast paths learned from broadcasts are, one flood orientation vs two.

    .venv/bin/python benchmarks/learned_paths.py [--seed N]

For each overlay (a ring of successors only, and Symphony overlays built by
the simulator with the daemon's defaults, s = 2 and k = log n), every node's
host sends one ARP request through the switch logic in a fake network
(`evio.testing.fake_flow_table`, the real `BoundedFloodSwitch` behind
OpenFlow encoding); then, for every ordered pair, the path a unicast frame
takes when each node follows the port it learned is walked. Printed per
overlay: the mean and longest path over every pair for the shortest paths
of the overlay (BFS), for learning from the one clockwise flood only (the
baseline: `reverse_copies` off, as before the reverse copy), and for
learning from both orientations (evio now), and the ratio of the means.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evio.sim.overlay import OverlayParams, build_overlay
from evio.testing.fake_flow_table import FakeNetwork

ARP_TAIL = bytes.fromhex("08060001080006040001") + bytes(20)  # ethertype, ARP request, zeros


def ring_links(ids: list[int]) -> set[tuple[int, int]]:
    ordered = sorted(ids)
    return {tuple(sorted((a, ordered[(i + 1) % len(ordered)]))) for i, a in enumerate(ordered)}  # type: ignore[misc]


def symphony_links(n: int, seed: int) -> tuple[list[int], set[tuple[int, int]]]:
    overlay = build_overlay(n, OverlayParams(), random.Random(seed)).overlay
    adjacency = overlay.adjacency()
    links = {tuple(sorted((a, b))) for a, peers in adjacency.items() for b in peers}
    return sorted(adjacency), links  # type: ignore[return-value]


def shortest(ids: list[int], links: set[tuple[int, int]], src: int) -> dict[int, int]:
    neighbours: dict[int, set[int]] = {n: set() for n in ids}
    for a, b in links:
        neighbours[a].add(b)
        neighbours[b].add(a)
    dist, frontier = {src: 0}, [src]
    while frontier:
        nxt = []
        for node in frontier:
            for peer in sorted(neighbours[node]):
                if peer not in dist:
                    dist[peer] = dist[node] + 1
                    nxt.append(peer)
        frontier = nxt
    return dist


def learned_lengths(ids: list[int], links: set[tuple[int, int]], reverse_copies: bool) -> list[int]:
    net = FakeNetwork(reverse_copies=reverse_copies)
    for nid in ids:
        net.add_node(nid)
    for a, b in sorted(links):
        net.connect(a, b)
    macs = {nid: net.nodes[nid].switch.ports[1].hw_addr or "" for nid in ids}
    for nid in ids:
        net.inject(nid, 1, b"\xff" * 6 + bytes.fromhex(macs[nid].replace(":", "")) + ARP_TAIL)
    lengths = []
    for b in ids:
        for a in ids:
            if a == b:
                continue
            node, hops = a, 0
            while True:
                entry = net.nodes[node].switch.learning.lookup(macs[b], net.now)
                if entry is None or hops > len(ids):
                    raise SystemExit(f"no loop-free learned path {a:x} -> {b:x}")
                if entry.local:
                    break
                node, _ = net.tunnels[(node, entry.port)]
                hops += 1
            lengths.append(hops)
    return lengths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    overlays = []
    for n in (18, 32):
        ids = sorted(rng.randrange(1 << 128) for _ in range(n))
        overlays.append((f"ring of {n}, successors only", ids, ring_links(ids)))
    for n in (32, 64):
        ids, links = symphony_links(n, args.seed)
        overlays.append((f"Symphony n = {n}, s = 2, k = log n", ids, links))
    print("| overlay | shortest mean / max | one orientation (before) mean / max | both (now) mean / max "
          "| now / before |")
    print("|---|---|---|---|---|")
    for name, ids, links in overlays:
        best = [d for b in ids for a, d in shortest(ids, links, b).items() if a != b]
        before = learned_lengths(ids, links, reverse_copies=False)
        now = learned_lengths(ids, links, reverse_copies=True)
        print(f"| {name} | {statistics.mean(best):.2f} / {max(best)} | {statistics.mean(before):.2f} / {max(before)} "
              f"| {statistics.mean(now):.2f} / {max(now)} | {statistics.mean(now) / statistics.mean(before):.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
