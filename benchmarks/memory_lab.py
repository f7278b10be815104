#!/usr/bin/env python3
"""Memory of an idle daemon: what every daemon costs (fixed) and what each tunnel adds, against 50 MB.

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/memory_lab.py \
        [--nodes 16] [--nat mixed] [--against ../main] [--idle 20] [--ring-timeout 180] [--no-drain] [--breakdown]
        [--traffic 5]

For this checkout (and, with --against TREE, that checkout first: the
baseline, main say), a lab of --nodes full nodes (`evio lab`, daemons on,
mixed NATs, s = 2 as in scale_lab.py) is brought up with the daemons
running that tree's evio (PYTHONPATH; the lab itself is this tree's). Once
the ring closes and the overlay has idled --idle seconds, each daemon's
resident memory (RSS; PSS, shared libraries split among the daemons;
anonymous, the daemon's own) is read beside its tunnels (links up), and a
least-squares line through the daemons gives the fixed cost (at 0 tunnels)
and the cost per tunnel; "at 12" is that line at 12 tunnels, about what a
node of a 64-node overlay holds. Then (unless --no-drain) every daemon but
the first is stopped, and once the first has no tunnel up, its RSS is read
again: with the buffers of ended tunnels freed it falls back near the fixed
cost. Beside them the target (issue 25: an idle daemon at most 50 MB) and, with
--against, this tree's figures over the baseline's, and the 1-minute load
average when each tree's reading was taken. --breakdown prints, for each
daemon, its resident memory by mapping: each shared library or extension,
the malloc heap, thread stacks and the other anonymous memory (Python's
arenas, large allocations, other threads' malloc arenas). --traffic SECONDS then has
the daemons serve traffic: an iperf3 TCP run of that long from each node to the next
one along the ring, one after the other, then --idle seconds more (a tunnel hands back
its buffers after 10 s without a frame), and reads every daemon again: a second row per
tree, "after traffic".

How RSS is measured (the figure issue 25's target is about): /proc/PID/smaps_rollup's
`Rss`, the same figure as `VmRSS` in /proc/PID/status that `evio lab` and
node_bench.py report; the kernel gives it in KiB, printed here in MB of
10^6 bytes. It counts every page the daemon maps that is in memory, the
shared libraries' text included (PSS divides those among the processes
mapping them; `Anonymous` is the daemon's own). Root only; each lab is
removed at the end, also on failure or Ctrl-C. A benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.cli.lab_node_cmd import wait_ring  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402

TARGET_MB = 50.0  # issue 25
KIB = 1024 / 1e6  # a KiB of /proc in MB of 10^6 bytes
TUNNELS_AT_64 = 12  # tunnels a node held in the 64-node lab runs (s = 2, k = 6, some on demand)


@dataclass
class Daemon:
    tunnels: int
    rss_mb: float
    pss_mb: float
    anon_mb: float


@dataclass
class TreeResult:
    tree: str
    daemons: list[Daemon] = field(default_factory=list)
    ring_s: float | None = None
    ended_tunnels: int = 0  # tunnels that went down before the reading (all daemons)
    drained_rss_mb: float | None = None  # the first daemon's, once every other daemon stopped and its tunnels ended
    drained_from: tuple[int, float] | None = None  # its tunnels and RSS before
    load: str = ""  # the 1-minute load average when the daemons were read
    served: list[Daemon] = field(default_factory=list)  # read again after --traffic
    served_load: str = ""
    served_mbit: list[float] = field(default_factory=list)  # each iperf3 run's, received

    def fit(self) -> tuple[float, float] | None:
        """(fixed MB, MB per tunnel): RSS against live tunnels, least squares."""
        xs = [d.tunnels for d in self.daemons]
        if len(set(xs)) < 2:
            return None
        line = statistics.linear_regression(xs, [d.rss_mb for d in self.daemons])
        return line.intercept, line.slope


def rollup(pid: int) -> dict[str, int]:
    """/proc/PID/smaps_rollup in kB by field (empty if the process is gone)."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) for line in lines if line.endswith("kB")}


def by_mapping(pid: int) -> dict[str, float]:
    """Resident MB of `pid` by mapping: each file by its name, the malloc heap, thread stacks (the
    main one and glibc's 8 MiB ones), and all other anonymous memory (empty if the process is gone)."""
    rows: dict[str, float] = {}
    key = ""
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
            start, end = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5] if len(fields) > 5 else ""
            if path.startswith("/"):
                key = "file " + Path(path).name
            elif path in ("[heap]", "[stack]"):
                key = "malloc heap [heap]" if path == "[heap]" else "main thread stack"
            elif end - start == 8 << 20:  # glibc's default stack for a thread (RLIMIT_STACK)
                key = "thread stacks"
            else:
                key = "anonymous: Python arenas, mmapped allocations, other malloc arenas"
        elif fields[0] == "Rss:":
            rows[key] = rows.get(key, 0.0) + int(fields[1]) * KIB
    return rows


def tunnels_of(status: dict[str, Any]) -> tuple[int, int, int]:
    """(tunnels up, links in any state, tunnels that went down so far) over the daemon's overlays."""
    up = links = ended = 0
    for overlay in (status.get("overlays") or {}).values():
        up += sum(1 for link in overlay.get("links", []) if link.get("state") == "up")
        links += len(overlay.get("links", []))
        ended += int((overlay.get("tunnels") or {}).get("down", 0))
    return up, links, ended


def run_tree(tree: str, args: argparse.Namespace) -> TreeResult:
    result = TreeResult(tree)
    # Only the daemons are Python processes of the lab. `python -m evio` puts its working directory
    # first on sys.path, so they are started from the tree's directory too, not from ours.
    previous, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = tree
    os.chdir(tree)
    try:
        lab = Lab.up(args.name, nodes=args.nodes, nat=args.nat, topology={"successors": 2}, daemons=True)
    finally:
        os.chdir(cwd)
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
    try:
        started = time.monotonic()
        _, closed = wait_ring(lab, args.ring_timeout)
        result.ring_s = time.monotonic() - started if closed else None
        print(f"{tree}: ring {'closed' if closed else 'NOT closed'} after {time.monotonic() - started:.1f} s; "
              f"idling {args.idle:g} s", flush=True)  # fmt: skip
        time.sleep(args.idle)
        for node in lab.nodes:
            record = lab.daemon(node.index)
            if record is None:
                continue
            environ = Path(f"/proc/{record.pid}/environ").read_bytes().split(b"\0")
            if f"PYTHONPATH={tree}".encode() not in environ or os.readlink(f"/proc/{record.pid}/cwd") != tree:
                raise SystemExit(f"{node.name}'s daemon does not run {tree}'s evio")
            live, _, ended = tunnels_of(lab.daemon_status(node.index))
            kb = rollup(record.pid)
            if kb:
                result.daemons.append(Daemon(live, kb["Rss"] * KIB, kb["Pss"] * KIB, kb["Anonymous"] * KIB))
                result.ended_tunnels += ended
                if args.breakdown:
                    print_breakdown(f"{node.name} ({live} tunnels)", record.pid)
        result.load = Path("/proc/loadavg").read_text().split()[0]
        if args.traffic:
            serve_traffic(lab, tree, args, result)
        if args.drain:
            first = lab.nodes[0].index
            before = result.daemons[0] if result.daemons else None
            for node in lab.nodes[1:]:
                lab.stop_daemon(node.index)
            deadline = time.monotonic() + args.drain_timeout
            while tunnels_of(lab.daemon_status(first))[0] and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(2.0)  # what the tunnels' teardown leaves to the next loop turns
            record = lab.daemon(first)
            kb = rollup(record.pid) if record is not None else {}
            if kb and before is not None and not tunnels_of(lab.daemon_status(first))[0]:
                result.drained_rss_mb = kb["Rss"] * KIB
                result.drained_from = (before.tunnels, before.rss_mb)
    finally:
        lab.close()
    return result


def read_daemons(lab: Lab) -> list[Daemon]:
    daemons = []
    for node in lab.nodes:
        record = lab.daemon(node.index)
        kb = rollup(record.pid) if record is not None else {}
        if kb:
            live, _, _ = tunnels_of(lab.daemon_status(node.index))
            daemons.append(Daemon(live, kb["Rss"] * KIB, kb["Pss"] * KIB, kb["Anonymous"] * KIB))
    return daemons


def serve_traffic(lab: Lab, tree: str, args: argparse.Namespace, result: TreeResult) -> None:
    """An iperf3 TCP run from each node to the next, then --idle seconds, then every daemon read again."""
    from evio.lab.iperf import tcp_run

    count = len(lab.nodes)
    for i, node in enumerate(lab.nodes):
        run = tcp_run(lab, node.index, lab.nodes[(i + 1) % count].index, args.traffic, role="memory-lab-iperf")
        result.served_mbit.append(run.mbit if run is not None else 0.0)
    print(f"{tree}: served traffic, Mbit/s " + ", ".join(f"{m:.0f}" for m in result.served_mbit)
          + f"; idling {args.idle:g} s", flush=True)
    time.sleep(args.idle)
    result.served = read_daemons(lab)
    result.served_load = Path("/proc/loadavg").read_text().split()[0]
    if args.breakdown:
        for node in lab.nodes:
            record = lab.daemon(node.index)
            if record is not None:
                print_breakdown(f"{node.name} after traffic", record.pid)


def print_breakdown(name: str, pid: int) -> None:
    rows = by_mapping(pid)
    threads = len(list(Path(f"/proc/{pid}/task").iterdir())) if rows else 0
    print(f"{name}: {sum(rows.values()):.1f} MB resident, {threads} threads", flush=True)
    for key, mb in sorted(rows.items(), key=lambda row: -row[1]):
        if mb >= 0.1:
            print(f"  {mb:6.2f}  {key}")


def print_table(results: list[TreeResult]) -> None:
    print()
    print(f"idle daemons, {len(results[0].daemons)} per tree; MB = 10^6 bytes; fixed and per tunnel: least squares"
          f" of RSS against live tunnels; 'at {TUNNELS_AT_64}': that line at {TUNNELS_AT_64} tunnels (a 64-node node)\n")
    print("| tree | tunnels mean (min-max) | RSS MB mean / max | PSS MB mean | anonymous MB mean | fixed MB | "
          f"per tunnel MB | at {TUNNELS_AT_64} MB | target MB | lone daemon after its tunnels ended | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        d = r.daemons
        fit = r.fit()
        fixed, slope = (f"{fit[0]:.1f}", f"{fit[1]:.2f}") if fit else ("-", "-")
        at = f"{fit[0] + TUNNELS_AT_64 * fit[1]:.1f}" if fit else "-"
        tunnels = [x.tunnels for x in d]
        drained = (f"{r.drained_from[1]:.1f} MB at {r.drained_from[0]} tunnels -> {r.drained_rss_mb:.1f} MB at 0"
                   if r.drained_rss_mb is not None and r.drained_from else "-")  # fmt: skip
        print(f"| {r.tree} | {statistics.mean(tunnels):.1f} ({min(tunnels)}-{max(tunnels)}) "
              f"| {statistics.mean(x.rss_mb for x in d):.1f} / {max(x.rss_mb for x in d):.1f} "
              f"| {statistics.mean(x.pss_mb for x in d):.1f} | {statistics.mean(x.anon_mb for x in d):.1f} "
              f"| {fixed} | {slope} | {at} | {TARGET_MB:.0f} | {drained} | {r.load} |")
    for r in results:
        if r.served:
            d = r.served
            print(f"| {r.tree}, after traffic | {statistics.mean(x.tunnels for x in d):.1f} "
                  f"({min(x.tunnels for x in d)}-{max(x.tunnels for x in d)}) "
                  f"| {statistics.mean(x.rss_mb for x in d):.1f} / {max(x.rss_mb for x in d):.1f} "
                  f"| {statistics.mean(x.pss_mb for x in d):.1f} | {statistics.mean(x.anon_mb for x in d):.1f} "
                  f"| | | | {TARGET_MB:.0f} | | {r.served_load} |")
    if len(results) == 2 and results[0].daemons and results[1].daemons:
        base, this = results
        ratio = statistics.mean(x.rss_mb for x in this.daemons) / statistics.mean(x.rss_mb for x in base.daemons)
        fb, ft = base.fit(), this.fit()
        slope = f"{ft[1] / fb[1]:.3f}" if fb and ft and fb[1] else "-"
        fixed = f"{ft[0] / fb[0]:.3f}" if fb and ft else "-"
        print(f"| this / baseline | | {ratio:.3f} | | | {fixed} | {slope} | | | | |")
    for r in results:
        ring = f"closed after {r.ring_s:.1f} s" if r.ring_s is not None else "NOT closed"
        print(f"{r.tree}: ring {ring}; tunnels ended before the reading: {r.ended_tunnels}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=16, help="lab size (default 16)")
    parser.add_argument("--against", metavar="TREE", help="also run TREE's daemons first (the baseline), in its own lab")
    parser.add_argument("--nat", default="mixed", help="NAT kind (default mixed)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds idled after the ring closed (default 20)")
    parser.add_argument("--ring-timeout", type=float, default=180.0)
    parser.add_argument("--no-drain", dest="drain", action="store_false",
                        help="skip stopping all daemons but one to read it with no tunnel left")  # fmt: skip
    parser.add_argument("--drain-timeout", type=float, default=90.0, help="how long the lone daemon's tunnels may take to end")
    parser.add_argument("--name", default="mem", help="lab name")
    parser.add_argument("--breakdown", action="store_true", help="print each daemon's resident memory by mapping")
    parser.add_argument("--traffic", type=float, default=0.0, metavar="SECONDS",
                        help="then an iperf3 TCP run of SECONDS from each node to the next, --idle, and every daemon read again")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("memory_lab: needs root (network namespaces, OVS, daemons)", file=sys.stderr)
        return 2

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a SIGTERM still removes the lab

    signal.signal(signal.SIGTERM, interrupt)
    trees = ([str(Path(args.against).resolve())] if args.against else []) + [str(REPO)]
    results = [run_tree(tree, args) for tree in trees]
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
