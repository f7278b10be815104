#!/usr/bin/env python3
"""Full-stack benchmark: evio daemons in a lab, a ring with paths of 0, 2 and 4 intermediate nodes.

    sudo .venv/bin/python benchmarks/node_bench.py [--nodes 10] [--duration 5] [--idle 20]

One lab of full nodes (prosody, coturn, per node a NAT router, Open vSwitch
and an `evio run` daemon) with s = 1, k = 0 and on-demand links off, so the
overlay is a plain ring and the path between two nodes is fixed: ring
neighbours are adjacent; nodes 3 and 5 positions apart have 2 and 4
intermediate nodes between them. In one run it prints:

- iperf3 TCP, one stream, through two adjacent nodes and through paths of
  2 and 4 intermediate nodes;
- ping RTT over each path (after a warm-up, so flows are installed) and the
  switching overhead per intermediate node: half the RTT increase per
  intermediate node, as the paper's E11 measures it (paper 0.37 ms);
- tunnel setup times across the overlay (from each daemon's status);
- RSS and idle CPU of each daemon (daemon and SDN controller are one process).

A benchmark, not a test: it asserts nothing; figures depend on the load of
the machine. Root only; the lab is removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.lab.daemons import Topology  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402
from evio.testing.labs import unique_lab_name  # noqa: E402

PAPER = {"overhead_ms": 0.37, "setup_s": 2.4, "bandwidth_mbit": 330.0}
TARGET = {"overhead_ms": 0.15, "bandwidth_mbit": 660.0, "idle_cpu_pct": 1.0, "rss_mb": 80.0}
IPERF_PORT = 5201


def wait_stable(lab: Lab, timeout: float, quiet: float = 5.0) -> Topology:
    """The ring closed and no daemon changed a link for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        topo = lab.topology()
        if len(topo.live) == len(lab.nodes) and not topo.ring_gaps():
            ages = []
            for node in lab.nodes:
                events = lab.daemon_status(node.index)["overlays"][lab.plan.overlay]["link_events"]
                ages.append(events["seconds_since_last"] if events["seconds_since_last"] is not None else quiet)
            if min(ages) >= quiet:
                return topo
        if time.monotonic() > deadline:
            raise SystemExit(f"the overlay did not settle in {timeout:.0f} s: gaps {topo.ring_gaps()}")
        time.sleep(0.5)


def pair_with_hops(lab: Lab, topo: Topology, hops: int) -> tuple[int, int] | None:
    for a in lab.nodes:
        for b in lab.nodes:
            if topo.hops(a.name, b.name) == hops:
                return a.index, b.index
    return None


def ping_rtt(lab: Lab, a: int, b: int, count: int = 50) -> float | None:
    target = str(lab.node(b).overlay_address.ip)
    lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False)  # ARP and flows first
    out = lab.exec(a, ["ping", "-c", str(count), "-i", "0.02", "-W", "2", "-q", target], check=False).stdout
    for line in out.splitlines():
        if "min/avg/max" in line:
            return float(line.split("=")[1].split("/")[1])
    return None


def iperf(lab: Lab, a: int, b: int, duration: float) -> float | None:
    server_ip = str(lab.node(b).overlay_address.ip)
    server = subprocess.Popen(
        ["ip", "netns", "exec", lab.netns(b), "iperf3", "-s", "-1", "-B", server_ip, "-p", str(IPERF_PORT)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while not lab.exec(b, ["ss", "-Htln", f"sport = :{IPERF_PORT}"], check=False).stdout.strip():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        done = lab.exec(a, ["iperf3", "-c", server_ip, "-p", str(IPERF_PORT), "-t", f"{duration:g}", "-J"],
                        check=False, timeout=duration + 30)
        try:
            result: dict[str, Any] = json.loads(done.stdout)
            return float(result["end"]["sum_received"]["bits_per_second"]) / 1e6
        except (ValueError, KeyError):
            return None
    finally:
        server.terminate()
        server.wait()


def idle_usage(lab: Lab, seconds: float) -> list[tuple[str, float, float]]:
    """(node, RSS MB, CPU %) of each daemon over `seconds` of idling."""
    before = {n.index: lab.daemon_usage(n.index) for n in lab.nodes}
    time.sleep(seconds)
    rows = []
    for node in lab.nodes:
        start, end = before[node.index], lab.daemon_usage(node.index)
        if start is None or end is None:
            continue
        rows.append((node.name, end.rss_bytes / 1e6, 100 * (end.cpu_seconds - start.cpu_seconds) / seconds))
    return rows


def setup_times(lab: Lab) -> list[float]:
    times = []
    for node in lab.nodes:
        for link in lab.daemon_status(node.index)["overlays"][lab.plan.overlay]["links"]:
            if link.get("setup_seconds") is not None:
                times.append(float(link["setup_seconds"]))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10, help="ring size, at least 10 for 4 intermediates (default 10)")
    ap.add_argument("--nat", default="eim", help="NAT kind of the nodes (default eim: direct tunnels)")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per iperf3 run (default 5)")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idling for the CPU figure (default 20)")
    args = ap.parse_args()
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    started = time.monotonic()
    with Lab.up(unique_lab_name(), nodes=args.nodes, nat=args.nat, topology=topology, daemons=True) as lab:
        print(f"lab {lab.name}: {args.nodes} nodes up in {time.monotonic() - started:.1f} s", flush=True)
        topo = wait_stable(lab, timeout=60 + 4 * args.nodes)
        print(f"ring stable after {time.monotonic() - started:.1f} s", flush=True)

        rows: list[tuple[str, str, float | None, float | None]] = []
        rtts: dict[int, float] = {}
        for intermediates in (0, 2, 4):
            pair = pair_with_hops(lab, topo, intermediates + 1)
            if pair is None:
                print(f"no path with {intermediates} intermediate nodes in this ring", flush=True)
                continue
            a, b = pair
            rtt = ping_rtt(lab, a, b)
            mbit = iperf(lab, a, b, args.duration)
            if rtt is not None:
                rtts[intermediates] = rtt
            rows.append((f"{intermediates} intermediate", f"node{a} -> node{b}", mbit, rtt))
            print(f"  {rows[-1][0]}: {rows[-1][1]} iperf {mbit or 0:.0f} Mbit/s, RTT {rtt or 0:.3f} ms", flush=True)

        setups = setup_times(lab)
        usage = idle_usage(lab, args.idle)

    print("\n| path | nodes | iperf3 TCP 1 stream, Mbit/s | ping RTT, ms |")
    print("|---|---|---|---|")
    for name, nodes, mbit, rtt in rows:
        print(f"| {name} | {nodes} | {mbit:.0f} |" if mbit is not None else f"| {name} | {nodes} | failed |", end="")
        print(f" {rtt:.3f} |" if rtt is not None else " - |")
    print()
    for n in (2, 4):
        if n in rtts and 0 in rtts:
            overhead = (rtts[n] - rtts[0]) / n / 2
            print(f"switching overhead per intermediate node ({n} intermediates): {overhead:.3f} ms "
                  f"(paper {PAPER['overhead_ms']} ms, target <= {TARGET['overhead_ms']} ms)")
    if rows and rows[0][2] is not None:
        print(f"adjacent nodes, one TCP stream: {rows[0][2]:.0f} Mbit/s "
              f"(paper {PAPER['bandwidth_mbit']:.0f}, target >= {TARGET['bandwidth_mbit']:.0f})")
    if setups:
        print(f"tunnel setup across the overlay ({len(setups)} tunnel ends): median {statistics.median(setups):.2f} s, "
              f"max {max(setups):.2f} s (paper {PAPER['setup_s']} s average)")
    if usage:
        print(f"\nidle daemons over {args.idle:g} s (daemon + SDN controller in one process):")
        for name, rss, cpu in usage:
            print(f"  {name:<7} RSS {rss:6.1f} MB   CPU {cpu:5.2f} %")
        print(f"  mean    RSS {statistics.mean(r for _, r, _ in usage):6.1f} MB   CPU "
              f"{statistics.mean(c for _, _, c in usage):5.2f} %   "
              f"(target <= {TARGET['rss_mb']:.0f} MB, <= {TARGET['idle_cpu_pct']:.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
