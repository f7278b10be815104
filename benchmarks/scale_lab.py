#!/usr/bin/env python3
"""Scale: a lab of many full nodes behind mixed NATs; ring closure, pings, memory and CPU per node.

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/scale_lab.py \
        [--nodes 32,64] [--xmpp prosody,ejabberd-cluster] [--pairs 200] [--idle 30] [--ring-timeout 300] [--logs DIR]

For each n: a lab of n full nodes (`evio lab`, daemons on, NATs cycling
endpoint-independent, symmetric and none, s = 2, k = floor(log2 n): the
daemon's defaults) is brought up; printed are the time to bring it up, the
time until successor links close the ring (measured from "up"), a ping over
the overlay between a sample of pairs (every ordered pair when there are
no more than --pairs of them), and each daemon's resident memory and CPU
while the overlay idles (daemon and SDN controller are one process), and
after the pings the controllers' and tunnels' counters and drops summed over
the daemons, with Open vSwitch's packet-in overflows. Beside
them the targets (issue 13: ring closed within 120 s at n = 64 and every
sampled pair answers; idle RSS under 80 MB) and the paper's figures where it
has them. Then, per process kind (daemon, ovs-vswitchd, ovsdb-server,
prosody, coturn) and thread name: CPU as a % of one core and wake-ups
(context switches) per second, per process, while the ring formed and over
the idle window, with the load average at "up" and at the ring's closure. --logs copies every daemon's log there before the lab is removed
(also when the ring does not close). Root only; each lab is removed at the
end, also on failure or Ctrl-C. A benchmark, not a test: it asserts nothing.

--xmpp runs each n once per signaling server (`evio lab up --xmpp`: prosody, one ejabberd, or a three-node
ejabberd cluster with the members spread over it), in the order given, and prints the ring closure of each
beside the first's (the baseline) with their ratio (issue 24's target: a 64-node lab over the cluster closes
its ring as fast as over one server), the load averages, the servers' CPU while the ring formed, and what the
daemons report of their signaling once it closed (the server each is on, logins after the first, messages sent
through the server, presences recovered by probes).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import profiling  # noqa: E402

from evio.cli.lab_node_cmd import wait_ring  # noqa: E402
from evio.lab import ejabberd  # noqa: E402
from evio.lab.lab import Lab, Progress  # noqa: E402
from evio.lab.netns import LinuxHost  # noqa: E402
from evio.node.control_client import ControlError  # noqa: E402

TARGET = {"ring_s": 120.0, "rss_mb": 80.0, "ping_share": 1.0}


@dataclass
class Result:
    nodes: int
    xmpp: str = "prosody"
    up_s: float = 0.0
    ring_s: float | None = None
    gaps: list[tuple[str, str]] = field(default_factory=list)
    pending: int = 0
    pairs: int = 0
    answered: int = 0
    failed: list[str] = field(default_factory=list)
    failed_patient: list[str] = field(default_factory=list)  # failed again with ping's default 10 s wait
    rtt_ms: float | None = None
    rss_mb: list[float] = field(default_factory=list)
    pss_mb: list[float] = field(default_factory=list)  # shared libraries divided among the daemons
    cpu_pct: list[float] = field(default_factory=list)
    # Over the idle window, per process kind: (processes, CPU % per process, wake-ups/s per process,
    # per thread name: CPU % and wake-ups/s per process).
    split: dict[str, tuple[int, float, float, dict[str, tuple[float, float]]]] = field(default_factory=dict)
    forming: dict[str, tuple[int, float, float, dict[str, tuple[float, float]]]] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # load average (1 min) at "up" and when the ring closed or the wait ended
    # Summed over the daemons after the pings: the controllers' counters and drops, the tunnels' drops;
    # and Open vSwitch's own packet-in losses (coverage counters), so a ping that died is counted or ruled out.
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    # Where "up" went: each step of Lab.up with the seconds (since the start) it was first and last
    # reported, and the load average then.
    phases: list[tuple[str, float, float, float]] = field(default_factory=list)
    # Once the ring closed, over the daemons: members per server signed in to, logins after the first,
    # messages sent through the server, and presences that came only on a probe (decision 0067).
    servers: dict[str, int] = field(default_factory=dict)
    signal: dict[str, int] = field(default_factory=dict)


class UpTimeline:
    """Progress of `Lab.up`, kept: when each step started and ended, and how daemons were launched and became ready."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.steps: dict[str, list[float]] = {}  # step -> [first, last, load at last]
        self.launched = 0
        self.ready = 0
        self.launch_times: list[float] = []
        self.ready_times: list[float] = []

    def __call__(self, p: Progress) -> None:
        load = os.getloadavg()[0]
        entry = self.steps.setdefault(p.step, [p.elapsed, p.elapsed, load])
        entry[1], entry[2] = p.elapsed, load
        if p.step == "daemons":
            self.launched = p.done
            self.launch_times.append(p.elapsed)
        elif p.step == "ready":
            self.ready = p.done
            self.ready_times.append(p.elapsed)
            if p.done % max(self.nodes // 16, 1) == 0 or p.done == p.total:
                print(f"  up: {p.elapsed:6.1f} s  launched {self.launched:>4}  ready {self.ready:>4}  load {load:5.1f}",
                      flush=True)  # fmt: skip

    def latencies(self) -> list[float]:
        """Launch to ready per daemon, k-th launch against k-th ready: exact on the mean (Little's law)."""
        return [r - l for l, r in zip(self.launch_times, self.ready_times)]


def drop_counts(lab: Lab) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {"switch": {}, "switch drops": {}, "tunnel drops": {}, "ovs": {}}

    def add(kind: str, key: str, value: object) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            totals[kind][key] = totals[kind].get(key, 0) + value

    for node in lab.nodes:
        try:
            status = lab.daemon_status(node.index, timeout=20)
        except ControlError:  # a daemon that does not answer is counted, not fatal to the benchmark
            add("switch", "status_failed", 1)
            continue
        for overlay in status.get("overlays", {}).values():
            for key, value in overlay.get("switch", {}).items():
                add("switch", key, value)
            for key, value in overlay.get("drops", {}).items():
                add("switch drops", key, value)
            for link in overlay.get("links", []):
                for key, value in link.get("drops", {}).items():
                    add("tunnel drops", key, value)
        ctl = lab.ovs(node.index).run_dir / "ovs-vswitchd.ctl"
        done = subprocess.run(["ovs-appctl", "-t", str(ctl), "coverage/show"], capture_output=True, text=True,
                              check=False, timeout=30)  # fmt: skip
        for line in done.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if "total:" in line and ("overflow" in name or name.startswith("datapath_drop_upcall")):
                add("ovs", name, int(line.rsplit(maxsplit=1)[1]))
    return totals


def processes_by_kind(lab: Lab) -> dict[str, list[int]]:
    """PIDs of the lab's processes by kind: each node's daemon, ovs-vswitchd, ovsdb-server; prosody; coturn."""
    kinds: dict[str, list[int]] = {"daemon": [], "ovs-vswitchd": [], "ovsdb-server": [], "prosody": [], "coturn": [],
                                   "ejabberd": ejabberd.beam_pids(LinuxHost(), lab.plan)}
    for node in lab.nodes:
        record = lab.daemon(node.index)
        if record is not None:
            kinds["daemon"].append(record.pid)
        ovs = lab.ovs(node.index)
        for daemon in ("ovs-vswitchd", "ovsdb-server"):
            pid = ovs.pid(daemon)
            if pid is not None:
                kinds[daemon].append(pid)
    for record in lab.processes:
        if record.role in ("prosody", "coturn"):
            kinds[record.role].append(record.pid)
    return kinds


Split = dict[str, tuple[int, float, float, dict[str, tuple[float, float]]]]  # see Result.split
Counters = dict[int, dict[str, profiling.TaskCounters]]


def counters(kinds: dict[str, list[int]]) -> Counters:
    return {pid: profiling.threads(pid) for pids in kinds.values() for pid in pids}


def split_cpu(kinds: dict[str, list[int]], before: Counters, after: Counters, seconds: float) -> Split:
    """CPU % and wake-ups/s per process of each kind (and per thread name) between two readings."""
    out = {}
    for kind, pids in kinds.items():
        by_thread: dict[str, profiling.TaskCounters] = {}
        alive = [pid for pid in pids if after.get(pid) and pid in before]
        for pid in alive:
            for name, now in after[pid].items():
                delta = now - before[pid].get(name, profiling.TaskCounters())
                by_thread[name] = by_thread.get(name, profiling.TaskCounters()) + delta
        if not alive:
            continue
        n = len(alive)
        total = sum(by_thread.values(), profiling.TaskCounters())
        threads = {name: (100 * c.cpu / seconds / n, c.wakeups / seconds / n) for name, c in by_thread.items()}
        out[kind] = (n, 100 * total.cpu / seconds / n, total.wakeups / seconds / n, threads)
    return out


def pss_mb(pid: int) -> float | None:
    """Proportional set size: what the process costs once libraries shared with the others are split."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def signal_summary(lab: Lab) -> tuple[dict[str, int], dict[str, int]]:
    """Members per server they are signed in to; reconnects, messages out and failed status reads, summed."""
    servers: dict[str, int] = {}
    totals = {"reconnects": 0, "messages_out": 0, "not_connected": 0, "status_failed": 0}
    for node in lab.nodes:
        try:
            overlay = lab.daemon_status(node.index, timeout=20)["overlays"][lab.plan.overlay]
        except (ControlError, KeyError):
            totals["status_failed"] += 1
            continue
        signal = overlay.get("signal") or {}
        servers[str(signal.get("server"))] = servers.get(str(signal.get("server")), 0) + 1
        totals["reconnects"] += int(signal.get("reconnects", 0))
        totals["not_connected"] += 0 if signal.get("connected") else 1
        totals["messages_out"] += sum((signal.get("messages") or {}).get("out", {}).values())
    return dict(sorted(servers.items())), totals


def sample_pairs(lab: Lab, count: int, rng: random.Random) -> list[tuple[int, int]]:
    indices = [n.index for n in lab.nodes]
    pairs = [(a, b) for a in indices for b in indices if a != b]
    return pairs if len(pairs) <= count else rng.sample(pairs, count)


def ping_pairs(lab: Lab, pairs: list[tuple[int, int]], tries: int = 3, wait: float = 2.0) -> tuple[list[str], list[float]]:
    """Pairs that did not answer any of `tries` pings (`wait` s each); RTTs of those that did."""
    nodes = {n.index: n for n in lab.nodes}

    def one(pair: tuple[int, int]) -> tuple[str, float | None, bool]:
        a, b = nodes[pair[0]], nodes[pair[1]]
        done = lab.exec(a.index, ["ping", "-c", str(tries), "-i", "0.3", "-W", f"{wait:g}", "-q", str(b.overlay_address.ip)],
                        check=False, timeout=30)  # fmt: skip
        rtt = None
        for line in done.stdout.splitlines():
            if "min/avg/max" in line:
                rtt = float(line.split("=")[1].split("/")[1])
        return f"{a.name}->{b.name}", rtt, done.returncode == 0

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, pairs))
    return [name for name, _, good in results if not good], [rtt for _, rtt, good in results if good and rtt]


def run(n: int, args: argparse.Namespace, xmpp: str = "prosody") -> Result:
    result = Result(n, xmpp)
    started = time.monotonic()
    timeline = UpTimeline(n)
    lab = Lab.up(f"{args.name}{n}"[:5], nodes=n, nat=args.nat, topology={"successors": 2}, daemons=True,
                 xmpp=xmpp, progress=timeline)  # fmt: skip
    try:
        result.up_s = time.monotonic() - started
        result.phases = [(step, first, last, load) for step, (first, last, load) in timeline.steps.items()]
        waits = timeline.latencies()
        if waits:
            print(f"n={n}: daemon launch to ready: mean {statistics.mean(waits):.1f} s, median "
                  f"{statistics.median(waits):.1f}, max {max(waits):.1f} (first 16: {statistics.mean(waits[:16]):.1f},"
                  f" last 16: {statistics.mean(waits[-16:]):.1f})", flush=True)  # fmt: skip
        print(f"n={n} {xmpp}: up in {result.up_s:.1f} s; waiting for the ring ...", flush=True)
        ring_started = time.monotonic()
        kinds = processes_by_kind(lab)
        at_up, load_up = counters(kinds), os.getloadavg()[0]
        topo, closed = wait_ring(lab, args.ring_timeout)
        result.forming = split_cpu(kinds, at_up, counters(kinds), time.monotonic() - ring_started)
        result.load = (load_up, os.getloadavg()[0])
        result.ring_s = time.monotonic() - ring_started if closed else None
        result.gaps = topo.ring_gaps()
        result.pending = sum(1 for link in topo.links if link.state != "up")
        print(f"n={n} {xmpp}: ring {'closed' if closed else 'NOT closed'} after {time.monotonic() - ring_started:.1f} s"
              f" ({len(result.gaps)} gaps, {result.pending} links not up; load {result.load[1]:.1f})",
              flush=True)  # fmt: skip
        result.servers, result.signal = signal_summary(lab)
        before = {node.index: lab.daemon_usage(node.index) for node in lab.nodes}
        kinds = processes_by_kind(lab)
        idle_start = counters(kinds)
        time.sleep(args.idle)
        result.split = split_cpu(kinds, idle_start, counters(kinds), args.idle)
        for node in lab.nodes:
            start, end = before[node.index], lab.daemon_usage(node.index)
            if start is not None and end is not None:
                result.rss_mb.append(end.rss_bytes / 1e6)
                result.cpu_pct.append(100 * (end.cpu_seconds - start.cpu_seconds) / args.idle)
            record = lab.daemon(node.index)
            pss = pss_mb(record.pid) if record is not None else None
            if pss is not None:
                result.pss_mb.append(pss)
        pairs = sample_pairs(lab, args.pairs, random.Random(args.seed))
        result.failed, rtts = ping_pairs(lab, pairs)
        result.pairs, result.answered = len(pairs), len(pairs) - len(result.failed)
        result.rtt_ms = statistics.mean(rtts) if rtts else None
        if result.failed:
            # Again with ping's own default wait (10 s): a loaded host answers late rather than never.
            names = {f"{lab.node(a).name}->{lab.node(b).name}": (a, b) for a, b in pairs}
            result.failed_patient, _ = ping_pairs(lab, [names[f] for f in result.failed], wait=10.0)
        result.counts = drop_counts(lab)
    finally:
        if args.logs is not None:
            target = Path(args.logs) / f"n{n}-{xmpp}"
            target.mkdir(parents=True, exist_ok=True)
            for node in lab.nodes:
                log = lab.directory / "nodes" / node.name / "evio.log"
                if log.exists():
                    shutil.copy(log, target / f"{node.name}.log")
        lab.close()
    return result


def label(r: Result) -> str:
    return f"n={r.nodes} {r.xmpp}"


def print_table(results: list[Result]) -> None:
    print()
    print(f"{'n':>4} {'xmpp':>16} {'up s':>6} {'ring s':>7} {'target':>7} {'pairs':>6} {'answered':>9} {'RTT ms':>7}"
          f" {'RSS MB mean/max':>16} {'target':>7} {'PSS MB mean':>12} {'idle CPU % mean/max':>20}")  # fmt: skip
    for r in results:
        ring = f"{r.ring_s:.1f}" if r.ring_s is not None else "open"
        rtt = f"{r.rtt_ms:.1f}" if r.rtt_ms is not None else "-"
        rss = f"{statistics.mean(r.rss_mb):.1f}/{max(r.rss_mb):.1f}" if r.rss_mb else "-"
        cpu = f"{statistics.mean(r.cpu_pct):.2f}/{max(r.cpu_pct):.2f}" if r.cpu_pct else "-"
        pss = f"{statistics.mean(r.pss_mb):.1f}" if r.pss_mb else "-"
        print(f"{r.nodes:>4} {r.xmpp:>16} {r.up_s:>6.1f} {ring:>7} {TARGET['ring_s']:>7.0f} {r.pairs:>6} {r.answered:>9} {rtt:>7}"
              f" {rss:>16} {TARGET['rss_mb']:>7.0f} {pss:>12} {cpu:>20}")  # fmt: skip
    for r in results:
        if r.gaps:
            print(f"{label(r)}: ring gaps: " + " ".join(f"{a}-{b}" for a, b in r.gaps))
        if r.failed:
            print(f"{label(r)}: no answer within 2 s per ping ({len(r.failed)}): " + " ".join(r.failed[:40]))
            print(f"{label(r)}: of those, {len(r.failed) - len(r.failed_patient)} answered when asked again with "
                  f"10 s per ping; still no answer ({len(r.failed_patient)}): " + " ".join(r.failed_patient[:40]))
    for r in results:
        for kind, counts in r.counts.items():
            print(f"{label(r)}: {kind}: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    for r in results:
        if r.phases:
            print(f"{label(r)}: where up's {r.up_s:.1f} s went (step: first..last report, s since the start; load then)")
            previous = 0.0
            for step, first, last, load in r.phases:
                print(f"  {step:<13} {first:7.1f} .. {last:7.1f}  ({last - previous:6.1f} s after the previous step)"
                      f"  load {load:5.1f}")  # fmt: skip
                previous = last
    for r in results:
        print(f"{label(r)}: load average {r.load[0]:.1f} at up, {r.load[1]:.1f} when the ring wait ended")
        for title, split in (("while the ring formed", r.forming), ("idle, after the ring", r.split)):
            if not split:
                continue
            print(f"{label(r)}: CPU and wake-ups per process {title}, by kind (and thread name)")
            print(f"  {'kind':<14} {'procs':>5} {'CPU %':>7} {'wake-ups/s':>11}   threads (CPU % / wake-ups/s)")
            for kind, (count, share, wakeups, threads) in split.items():
                top = sorted(threads.items(), key=lambda item: -item[1][0])[:5]
                names = ", ".join(f"{name} {c:.2f}/{w:.0f}" for name, (c, w) in top)
                print(f"  {kind:<14} {count:>5} {share:>7.2f} {wakeups:>11.1f}   {names}")
    print("targets (issue 13): n = 64 ring closed within 120 s, every sampled pair answers; idle RSS <= 80 MB")


def server_cpu(split: Split) -> float:
    """The signaling server's CPU, % of one core, over all its processes (prosody, or every ejabberd VM)."""
    return sum(count * share for kind, (count, share, _, _) in split.items() if kind in ("prosody", "ejabberd"))


def print_comparison(results: list[Result]) -> None:
    """Per n, each signaling server's ring closure beside the first's (the baseline), with the load then."""
    sizes = sorted({r.nodes for r in results})
    if len({r.xmpp for r in results}) < 2:
        return
    print()
    print("ring closure from \"up\" by signaling server (issue 24: over the cluster as fast as over one server)")
    print(f"{'n':>4} {'xmpp':>16} {'ring s':>7} {'ratio':>6} {'load up':>8} {'load closed':>12} {'server CPU %':>13}"
          f" {'re-logins':>9} {'msgs via server':>15}   members per server")  # fmt: skip
    for n in sizes:
        runs = [r for r in results if r.nodes == n]
        base = runs[0].ring_s
        for r in runs:
            ring = f"{r.ring_s:.1f}" if r.ring_s is not None else "open"
            ratio = f"{r.ring_s / base:.2f}" if r.ring_s is not None and base else "-"
            spread = " ".join(f"{server} {count}" for server, count in r.servers.items())
            print(f"{n:>4} {r.xmpp:>16} {ring:>7} {ratio:>6} {r.load[0]:>8.1f} {r.load[1]:>12.1f}"
                  f" {server_cpu(r.forming):>13.1f} {r.signal.get('reconnects', 0):>9} {r.signal.get('messages_out', 0):>15}"
                  f"   {spread}")  # fmt: skip


def settle(seconds: float) -> None:
    """Between runs: the load average the last lab left decays (a 64-node lab leaves 40 or more, and the next
    lab's "load at up" would carry it); at most `seconds`, less once it is under the cores' count."""
    deadline = time.monotonic() + seconds
    while os.getloadavg()[0] > (os.cpu_count() or 1) and time.monotonic() < deadline:
        time.sleep(1.0)
    print(f"settled: load average {os.getloadavg()[0]:.1f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", default="32,64", help="comma-separated lab sizes (default 32,64)")
    parser.add_argument("--nat", default="mixed", help="NAT kind (default mixed)")
    parser.add_argument("--pairs", type=int, default=200, help="ordered pairs pinged (default 200; all if fewer)")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle over which CPU is measured")
    parser.add_argument("--ring-timeout", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--name", default="sc", help="lab name prefix (the size is appended)")
    parser.add_argument("--xmpp", default="prosody",
                        help="comma-separated signaling servers, each n run on each, the first the baseline "
                        "(prosody, ejabberd, ejabberd-cluster; default prosody)")  # fmt: skip
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds at most between runs for the load average to fall to the cores' count (default 60)")
    parser.add_argument("--logs", default=None, help="copy the daemons' logs into this directory")
    args = parser.parse_args()

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a SIGTERM (timeout, Ctrl-C's cousin) still removes the lab

    signal.signal(signal.SIGTERM, interrupt)
    results = []
    kinds = [ejabberd.xmpp_kind(x) for x in args.xmpp.split(",")]
    for n in (int(x) for x in args.nodes.split(",")):
        for xmpp in kinds:
            if results:
                settle(args.settle)
            results.append(run(n, args, xmpp))
            print_table(results)
            print_comparison(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
