#!/usr/bin/env python3
"""Full-stack benchmark: evio daemons in a lab, a ring with paths of 0, 2, 4 and 8 intermediate nodes.

    sudo .venv/bin/python benchmarks/node_bench.py [--nodes 10] [--duration 5] [--idle 20] [--profile]

One lab of full nodes (prosody, coturn, per node a NAT router, Open vSwitch
and an `evio run` daemon) with s = 1, k = 0 and on-demand links off, so the
overlay is a plain ring and the path between two nodes is fixed: ring
neighbours are adjacent; nodes 3 and 5 positions apart have 2 and 4
intermediate nodes between them (a ring of 18 or more nodes also has a path
of 8 intermediate nodes: `--nodes 18`). In one run it prints:

- iperf3 TCP, one stream, through two adjacent nodes and through paths of
  2 and 4 intermediate nodes, with its retransmissions (a hop that drops
  shows here first);
- ping RTT over each path (after a warm-up, so flows are installed), the
  underlay RTT between the same two nodes (their NAT routers' public
  addresses), and the one-way latency per hop: an adjacent hop (tunnel, two
  bridges) is half the overlay RTT minus half the underlay RTT; each
  intermediate node adds half the slope of median RTT over intermediate
  nodes (least squares over every path measured), which is the switching
  overhead per intermediate node as the paper's E11 measures it (paper 0.37 ms);
- the first packet of a new flow (--first-packet): the evio flows of every
  bridge deleted, and the datapath flows of every ovs-vswitchd, then 5 pings 0.2 s apart; the first one is forwarded by
  each node's controller (packet-ins), the others by installed flows; the
  flows of every bridge are deleted (a ring of even size has two shortest
  ways to the far node) and the packet-ins of each switch are counted for
  the first echo and its reply, and apart for the later ones;
- tunnel setup times across the overlay (from each daemon's status);
- RSS and idle CPU of each daemon (daemon and SDN controller are one process);
- with `--transit both` (the default) every round is measured twice, with
  the transit fast path (tunnel.transit) switched off and then on by a
  config reload of every daemon (and the evio flows of every bridge deleted,
  so that each mode starts from fresh flows), and the summary gives both and
  their ratio; the frames the fast path forwarded on the path's nodes are
  printed per run;
- where the CPU goes while iperf3 runs: seconds of CPU per GB delivered,
  summed over all daemons and over all ovs-vswitchd processes of the lab
  (so the tunnel's and the switch's shares can be told apart on a loaded
  machine, where Mbit/s alone mostly measures the neighbours), and the load
  average during each run.

Each path is measured `--rounds` times, paths interleaved, so the rounds see
the same load. A benchmark, not a test: it asserts nothing; figures depend on the load of
the machine. With --profile each run is followed by an account of where
the time went on the nodes of the path (benchmarks/profiling.py): per
process and thread, user and system CPU and context switches per frame,
drops at every interface and UDP socket, packet-ins, and machine-wide CPU by
kind. Root only; the lab is removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import profiling  # noqa: E402

from evio.lab import daemons as full_nodes  # noqa: E402
from evio.lab.daemons import Topology  # noqa: E402
from evio.lab.iperf import tcp_run  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402
from evio.testing.labs import unique_lab_name  # noqa: E402

PAPER = {"overhead_ms": 0.37, "setup_s": 2.4, "bandwidth_mbit": 330.0}
TARGET = {"overhead_ms": 0.15, "bandwidth_mbit": 660.0, "idle_cpu_pct": 1.0, "rss_mb": 80.0}
# evio.sdn.openflow_messages.EVIO_COOKIE under EVIO_COOKIE_MASK: every flow the controller installs, the counted
# ones (COUNTED_COOKIE, a bit above the mask) too; an exact match (mask -1) would leave those in place.
EVIO_COOKIE = "0xe7100001/0xffffffff"
PATHS = (0, 2, 4, 8)


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


def path_of(lab: Lab, topo: Topology, a: int, b: int) -> list[int]:
    """The node indices on a shortest path of up links from `a` to `b`, both ends included."""
    names = {n.name: n.index for n in lab.nodes}
    start, goal = lab.node(a).name, lab.node(b).name
    previous: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier and goal not in previous:
        frontier_next = []
        for name in frontier:
            for peer in sorted(topo.neighbours(name)):
                if peer not in previous:
                    previous[peer] = name
                    frontier_next.append(peer)
        frontier = frontier_next
    path: list[int] = []
    at: str | None = goal if goal in previous else None
    while at is not None:
        path.append(names[at])
        at = previous[at]
    return path[::-1]


def _times(out: str) -> list[float]:
    return [float(line.split("time=")[1].split()[0]) for line in out.splitlines() if "time=" in line]


def ping_rtt(lab: Lab, a: int, b: int, count: int = 50) -> tuple[float, float] | None:
    """(mean, median) RTT in ms; the median shows the switching cost without a loaded machine's stalls."""
    target = str(lab.node(b).overlay_address.ip)
    lab.exec(a, ["ping", "-c", "3", "-i", "0.2", "-W", "2", target], check=False)  # ARP and flows first
    times = _times(lab.exec(a, ["ping", "-c", str(count), "-i", "0.02", "-W", "2", target], check=False).stdout)
    if not times:
        return None
    return statistics.mean(times), statistics.median(times)


def underlay_rtt(lab: Lab, a: int, b: int, count: int = 50) -> float | None:
    """Median RTT in ms of the underlay between nodes `a` and `b`: each node's RTT to the public
    segment's host (through its NAT router) added up. The routers drop new inbound packets, so
    the path a -> b itself cannot be pinged; this sum crosses the same links and routers."""
    target = str(lab.public.address)
    total = 0.0
    for node in (a, b):
        times = _times(lab.exec(node, ["ping", "-c", str(count), "-i", "0.02", "-W", "2", target], check=False).stdout)
        if not times:
            return None
        total += statistics.median(times)
    return total


def first_packet(lab: Lab, path: list[int], count: int = 5) -> tuple[float, float, list[int], list[int]] | None:
    """(first RTT, median of the later RTTs, packet-ins of each switch that had any for the first echo and its
    reply, and for the later ones) after deleting the evio flows of every bridge of the lab: the first echo and
    its reply go through the controllers of the switches they cross (the path's, or another way as long
    round a ring of even size), the later ones (0.2 s apart) should not."""
    a, b = path[0], path[-1]
    target = str(lab.node(b).overlay_address.ip)
    lab.exec(a, ["ping", "-c", "2", "-i", "0.2", "-W", "2", target], check=False)  # the neighbour entry is fresh
    nodes = [n.index for n in lab.nodes]
    for index in nodes:
        lab.ovs(index).ofctl("del-flows", bridge_of(lab, index), f"cookie={EVIO_COOKIE}")
        # And the datapath's flows: the warm-up's reply left one, which the revalidator turned into "to the
        # controller" when its OpenFlow flow went, and the host's reply (microseconds after the frame) took it
        # before the revalidator caught up with the way back: a second packet-in a new flow does not have
        # (one idle for the datapath's 10 s has no datapath flow; docs/performance.md).
        ovs_appctl(lab, index, "dpctl/del-flows")
    before = settled_packet_ins(lab, nodes)
    times = _times(lab.exec(a, ["ping", "-c", "1", "-W", "2", target], check=False).stdout)
    first = settled_packet_ins(lab, nodes)
    times += _times(lab.exec(a, ["ping", "-c", str(count - 1), "-i", "0.2", "-W", "2", target], check=False).stdout)
    later = settled_packet_ins(lab, nodes)
    if len(times) < 2:
        return None
    asked = [f - b for f, b in zip(first, before, strict=True)]
    asked_later = [x - f for x, f in zip(later, first, strict=True)]
    return (times[0], statistics.median(times[1:]), [n for n in asked if n], [n for n in asked_later if n])


def ovs_appctl(lab: Lab, index: int, *args: str) -> str:
    """ovs-appctl against node `index`'s ovs-vswitchd (evio.bridge.ovs_instance starts it with --unixctl here)."""
    ovs = lab.ovs(index)
    done = subprocess.run(["ovs-appctl", "-t", str(ovs.run_dir / "ovs-vswitchd.ctl"), *args], env=ovs.env,
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout + done.stderr


def settled_packet_ins(lab: Lab, nodes: list[int], timeout: float = 10.0) -> list[int]:
    """Each node's packet-ins so far, once two reads 1.5 s apart agree: a daemon's status hears of them on
    the controller's next tick (0.5 s after a packet-in), so a read right after a ping misses its own."""
    counts = [switch_counters(lab, i)[0] for i in nodes]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.5)
        again = [switch_counters(lab, i)[0] for i in nodes]
        if again == counts:
            break
        counts = again
    return counts


def unicast_path(lab: Lab, a: int, b: int) -> tuple[int, int] | None:
    """(bridges a -> b, bridges b -> a) that hold an evio flow for the pair's overlay MACs, right after a
    ping: the length of the path the unicast flows really take (a shortest path crosses hops + 1)."""
    macs = []
    for index in (a, b):
        device = overlay_device(lab, index)
        if device is None:
            return None
        macs.append(lab.exec(index, ["cat", f"/sys/class/net/{device}/address"], check=False).stdout.strip().lower())
    counts = [0, 0]
    for node in lab.nodes:
        flows = lab.ovs(node.index).ofctl("dump-flows", bridge_of(lab, node.index), f"cookie={EVIO_COOKIE}").lower()
        for way, (src, dst) in enumerate(((macs[0], macs[1]), (macs[1], macs[0]))):
            if f"dl_src={src},dl_dst={dst}" in flows:
                counts[way] += 1
    return counts[0], counts[1]


def set_transit(lab: Lab, on: bool, timeout: float = 30.0) -> None:
    """Switch every daemon's transit fast path (tunnel.transit) by a config reload (SIGHUP), then delete
    the evio flows of every bridge so the next frames install (and mirror) fresh ones."""
    overlay = lab.plan.overlay
    lab.reload_configs(lambda config: config["overlays"][overlay].setdefault("tunnel", {}).update(transit=on), timeout)
    for node in lab.nodes:
        state = lab.daemon_status(node.index)["overlays"][overlay]["transit"]
        if bool(state.get("enabled")) != on:
            raise SystemExit(f"{node.name}: transit fast path still {'off' if on else 'on'} after the reload")
    for node in lab.nodes:
        lab.ovs(node.index).ofctl("del-flows", bridge_of(lab, node.index), f"cookie={EVIO_COOKIE}")


def transit_forwarded(lab: Lab, path: list[int]) -> tuple[int, int]:
    """Frames the transit fast path forwarded so far on the nodes of `path`, and on every other node (where
    the frames went a longer way round)."""
    overlay = lab.plan.overlay
    counts = {n.index: int(lab.daemon_status(n.index)["overlays"][overlay]["transit"].get("forwarded", 0))
              for n in lab.nodes}
    on_path = sum(counts[i] for i in path)
    return on_path, sum(counts.values()) - on_path


def bridge_of(lab: Lab, index: int) -> str:
    return str(lab.daemon_status(index)["overlays"][lab.plan.overlay]["bridge"])


def switch_counters(lab: Lab, index: int) -> tuple[int, dict[str, int]]:
    """(packet-ins, drops by reason: the controller's and the tunnels') of node `index` so far."""
    overlay = lab.daemon_status(index)["overlays"][lab.plan.overlay]
    drops = {k: int(v) for k, v in overlay["drops"].items()}
    for link in overlay["links"]:
        for reason, n in (link.get("drops") or {}).items():
            drops[f"tunnel {reason}"] = drops.get(f"tunnel {reason}", 0) + int(n)
    return int(overlay["switch"]["packet_ins"]), drops


def overlay_device(lab: Lab, index: int) -> str | None:
    """The interface holding node `index`'s overlay address (the bridge's internal port)."""
    address = str(lab.node(index).overlay_address.ip)
    out = lab.exec(index, ["ip", "-j", "addr", "show"], check=False).stdout
    for row in json.loads(out or "[]"):
        if any(info.get("local") == address for info in row.get("addr_info", [])):
            return str(row["ifname"])
    return None


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        usage = full_nodes.process_usage(pid)
        if usage is not None:
            total += usage.cpu_seconds
    return total


def lab_pids(lab: Lab) -> tuple[list[int], list[int]]:
    """PIDs of every daemon and every ovs-vswitchd in the lab."""
    daemons = [r.pid for r in (lab.daemon(n.index) for n in lab.nodes) if r is not None]
    switches = [p for p in (lab.ovs(n.index).pid("ovs-vswitchd") for n in lab.nodes) if p is not None]
    return daemons, switches


Run = tuple[float | None, float | None, float | None, float, int | None]


def tap_packets(lab: Lab) -> int:
    """Packets through every tunnel TAP of the lab so far, both directions (a super-frame counts once)."""
    total = 0
    for node in lab.nodes:
        out = lab.exec(node.index, ["ip", "-j", "-s", "link", "show", "type", "tun"], check=False).stdout
        for link in json.loads(out or "[]"):
            stats = link.get("stats64", {})
            total += int(stats.get("rx", {}).get("packets", 0)) + int(stats.get("tx", {}).get("packets", 0))
    return total


TAP_FRAMES: dict[int, list[float]] = {}
"""Per path (intermediates): TAP frames per GB delivered, per TAP crossing, one entry per run."""


class PathProfile:
    """Counters of the nodes on one path, read around one iperf3 run (--profile)."""

    def __init__(self, lab: Lab, path: list[int]) -> None:
        self.lab, self.path = lab, path
        self.others = [n.index for n in lab.nodes if n.index not in path]
        self.processes: dict[str, int] = {}
        self.ovs_env: dict[str, str] = {}
        for index in path + self.others:
            record = lab.daemon(index)
            if record is not None:
                self.processes[f"node{index} daemon"] = record.pid
            pid = lab.ovs(index).pid("ovs-vswitchd")
            if pid is not None:
                self.processes[f"node{index} vswitchd"] = pid
            self.ovs_env[f"node{index}"] = str(lab.ovs(index).run_dir / "ovs-vswitchd.ctl")
        self.namespaces = [lab.netns(i) for i in path + self.others]
        self.device = overlay_device(lab, path[-1])

    def __enter__(self) -> PathProfile:
        self.log_sizes = {i: self.lab.daemon_log(i).stat().st_size for i in self.path + self.others}
        self.switch_before = {i: switch_counters(self.lab, i) for i in self.path + self.others}
        self.before = profiling.snapshot(self.processes, self.namespaces, self.ovs_env)
        return self

    def __exit__(self, *exc: object) -> None:
        self.delta = profiling.diff(self.before, profiling.snapshot(self.processes, self.namespaces, self.ovs_env))
        self.switch_after = {i: switch_counters(self.lab, i) for i in self.path + self.others}
        self.log_lines: dict[int, list[str]] = {}
        for i in self.path + self.others:
            with self.lab.daemon_log(i).open("rb") as f:
                f.seek(self.log_sizes[i])
                self.log_lines[i] = f.read().decode(errors="replace").splitlines()

    def report(self) -> str:
        d = self.delta
        frames = 0
        if self.device is not None:
            frames = d.links.get(self.lab.netns(self.path[-1]), {}).get(self.device, {}).get("rx_packets", 0)
        if frames <= 0:
            return "    profile: no frames delivered"
        lines = [f"    profile: {frames} frames delivered to node{self.path[-1]}'s {self.device}; "
                 "per delivered frame (us CPU user+system, context switches voluntary+involuntary):"]
        for index in self.path + self.others:
            role = "source" if index == self.path[0] else "destination" if index == self.path[-1] else "transit"
            if index in self.others:
                # Off the shortest path: shown only if it carried the flow (a longer way round the ring).
                if d.process(f"node{index} daemon").cpu / frames < 3e-6:
                    continue
                role = "OFF the shortest path"
            parts = []
            for kind in ("daemon", "vswitchd"):
                label = f"node{index} {kind}"
                if label not in d.processes:
                    continue
                total = d.process(label)
                busiest = sorted(d.processes[label].items(), key=lambda kv: -kv[1].cpu)[:3]
                threads = ", ".join(f"{name} {c.cpu / frames * 1e6:.1f} us/{c.wakeups / frames:.2f}"
                                    for name, c in busiest if c.cpu > 0 or c.wakeups > 0)
                parts.append(f"{kind} {total.user / frames * 1e6:.1f}+{total.system / frames * 1e6:.1f} us, "
                             f"{total.voluntary / frames:.2f}+{total.involuntary / frames:.2f} cs [{threads}]")
            ins = self.switch_after[index][0] - self.switch_before[index][0]
            drops = {k: v - self.switch_before[index][1].get(k, 0) for k, v in self.switch_after[index][1].items()}
            drops = {k: v for k, v in drops.items() if v}
            parts.append(f"packet-ins +{ins}" + (f", drops {drops}" if drops else ""))
            notable = [line for line in self.log_lines[index] if "WARNING" in line or "moved" in line]
            if notable:
                parts.append(f"{len(notable)} log lines, e.g. {notable[0][-160:]!r}")
            lines.append(f"      node{index} ({role}): " + "; ".join(parts))
        m = d.machine
        busy = sum(v for k, v in m.items() if k not in ("idle", "iowait"))
        lines.append("      machine: " + ", ".join(f"{k} {v / frames * 1e6:.1f}" for k, v in m.items() if v > 0)
                     + f" us/frame; busy {busy / frames * 1e6:.1f} us/frame "
                     f"({busy / max(sum(m.values()), 1e-9):.0%} of both cores)")
        drops_moved = d.drops()
        lines.append("      drops: " + ("; ".join(drops_moved) if drops_moved else "none at any interface or UDP socket"))
        coverage: dict[str, int] = {}
        for counters in d.coverage.values():
            for key, value in counters.items():
                coverage[key] = coverage.get(key, 0) + value
        top = sorted(coverage.items(), key=lambda kv: -kv[1])[:10]
        lines.append("      ovs coverage on the path, per frame: " + ", ".join(f"{k} {v / frames:.2f}" for k, v in top))
        return "\n".join(lines)


def iperf_with_cpu(lab: Lab, a: int, b: int, duration: float, loaded_rtt: list[float] | None = None) -> Run:
    """(Mbit/s, daemon CPU s per GB, ovs-vswitchd CPU s per GB, load average at the end, TCP retransmissions).

    With `loaded_rtt`, pings every 50 ms during the run and adds their RTTs to it (queueing under load).

    CPU per GB counts every daemon and switch of the lab, idle ones too: at a few Mbit/s it is
    mostly their idle work and means little."""
    daemons, switches = lab_pids(lab)
    taps_before = tap_packets(lab)
    before = cpu_seconds(daemons), cpu_seconds(switches)
    pinger = subprocess.Popen(
        ["ip", "netns", "exec", lab.netns(a), "ping", "-i", "0.05", "-w", f"{duration:g}", "-W", "2",
         str(lab.node(b).overlay_address.ip)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    ) if loaded_rtt is not None else None
    result = tcp_run(lab, a, b, duration, role="node-bench-iperf")
    if pinger is not None and loaded_rtt is not None:
        out, _ = pinger.communicate(timeout=duration + 10)
        loaded_rtt.extend(_times(out))
    after = cpu_seconds(daemons), cpu_seconds(switches)
    taps = tap_packets(lab) - taps_before
    load = load_average()
    if result is None:
        return None, None, None, load, None
    mbit, gigabytes, retransmits = result.mbit, result.gigabytes, result.retransmits
    if gigabytes <= 0:
        return mbit, None, None, load, retransmits
    # A path through k intermediates crosses 2 (k + 1) TAPs: out of each tunnel's sender, into its receiver.
    crossings = 2 * lab_topology_hops(lab, a, b)
    TAP_FRAMES.setdefault(crossings // 2 - 1, []).append(taps / gigabytes / crossings)
    return mbit, (after[0] - before[0]) / gigabytes, (after[1] - before[1]) / gigabytes, load, retransmits


_HOPS: dict[tuple[int, int], int] = {}


def lab_topology_hops(lab: Lab, a: int, b: int) -> int:
    """Tunnels on the path from `a` to `b` (remembered: the ring does not change during a run)."""
    if (a, b) not in _HOPS:
        _HOPS[(a, b)] = lab.topology().hops(lab.node(a).name, lab.node(b).name)
    return _HOPS[(a, b)]


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
    ap.add_argument("--rounds", type=int, default=2, help="measurements per path, paths interleaved (default 2)")
    ap.add_argument("--no-offload", action="store_true", help="tunnels without TAP offloads (tunnel.offload false)")
    # The daemon's default (decision 0053) unless asked otherwise: a benchmark measures what ships.
    ap.add_argument("--tso", action=argparse.BooleanOptionalAction, default=True,
                    help="tunnels with TSO on their TAPs (tunnel.tso; default on, as the daemon)")
    ap.add_argument("--datapath", choices=["auto", "native", "python"], default="auto",
                    help="tunnel.datapath: native (Rust), python, or auto (native where installed; default)")
    ap.add_argument("--paths", default=",".join(map(str, PATHS)),
                    help="intermediate nodes of the paths measured, where the ring has them (default 0,2,4,8)")
    ap.add_argument("--profile", action="store_true", help="after each run, where the time went on the path")
    ap.add_argument("--first-packet", action="store_true", help="first-packet RTT of a new flow on each path")
    ap.add_argument("--transit", choices=("both", "on", "off"), default="both",
                    help="transit fast path (tunnel.transit) off and on in every round, or only one (default both)")
    ap.add_argument("--trust", action="store_true",
                    help="an overlay CA whose certificates name the nodes' addresses (signed host claims: 0055, 0062)")
    args = ap.parse_args()
    modes = ["off", "on"] if args.transit == "both" else [args.transit]
    wanted = [int(x) for x in args.paths.split(",") if x.strip()]
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    started = time.monotonic()
    print(f"load average at start: {load_average():.2f}", flush=True)
    print(f"tunnel offloads: {'off' if args.no_offload else 'on'}, TSO on the TAPs: {'on' if args.tso else 'off'}, "
          f"data path: {args.datapath}", flush=True)  # fmt: skip
    tunnel = {"offload": not args.no_offload, "tso": args.tso, "datapath": args.datapath, "transit": modes[0] == "on"}
    with Lab.up(unique_lab_name(), nodes=args.nodes, nat=args.nat, topology=topology, tunnel=tunnel, daemons=True,
                trust=args.trust) as lab:
        print(f"lab {lab.name}: {args.nodes} nodes up in {time.monotonic() - started:.1f} s", flush=True)
        topo = wait_stable(lab, timeout=60 + 4 * args.nodes)
        print(f"ring stable after {time.monotonic() - started:.1f} s", flush=True)

        pairs: dict[int, tuple[int, int]] = {}
        for intermediates in wanted:
            pair = pair_with_hops(lab, topo, intermediates + 1)
            if pair is None:
                print(f"no path with {intermediates} intermediate nodes in a ring of {args.nodes} "
                      f"(needs --nodes {2 * intermediates + 2})", flush=True)
            else:
                pairs[intermediates] = pair
        paths = {i: path_of(lab, topo, a, b) for i, (a, b) in pairs.items()}
        # Per (mode, intermediates): mode is the transit fast path's, "off" or "on".
        keys = [(mode, i) for mode in modes for i in pairs]
        runs: dict[tuple[str, int], list[Run]] = {k: [] for k in keys}
        pings: dict[tuple[str, int], list[tuple[float, float]]] = {k: [] for k in keys}
        underlay: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
        firsts: dict[tuple[str, int], list[tuple[float, float, list[int], list[int]]]] = {k: [] for k in keys}
        crossings: dict[tuple[str, int], list[tuple[int, int]]] = {k: [] for k in keys}
        current = modes[0]
        for round_no in range(1, args.rounds + 1):
            for mode in modes:
                if mode != current:
                    set_transit(lab, mode == "on")
                    current = mode
                    print(f"  transit fast path {mode} (config reloaded, flows deleted)", flush=True)
                for intermediates, (a, b) in pairs.items():
                    key = (mode, intermediates)
                    label = f"round {round_no}, transit {mode}, {intermediates} intermediate"
                    if args.first_packet:
                        first = first_packet(lab, paths[intermediates])
                        if first is not None:
                            firsts[key].append(first)
                            print(f"  {label}: first packet of a new flow {first[0]:.3f} ms, later {first[1]:.3f} ms, "
                                  f"packet-ins per switch asked {'/'.join(map(str, first[2])) or 'none'} for the first "
                                  f"echo and its reply ({len(paths[intermediates])} switches on a shortest path), "
                                  f"{'/'.join(map(str, first[3])) or 'none'} for the later ones", flush=True)
                    rtt = ping_rtt(lab, a, b)
                    crossed = unicast_path(lab, a, b)
                    if crossed is not None:
                        crossings[key].append(crossed)
                        print(f"  {label}: unicast flows on {crossed[0]} bridges node{a} -> node{b}, {crossed[1]} "
                              f"back (shortest: {intermediates + 2})", flush=True)
                    under = underlay_rtt(lab, a, b)
                    forwarded_before = transit_forwarded(lab, paths[intermediates])
                    loaded: list[float] = []
                    if args.profile:
                        with PathProfile(lab, paths[intermediates]) as profile:
                            run = iperf_with_cpu(lab, a, b, args.duration, loaded)
                    else:
                        run = iperf_with_cpu(lab, a, b, args.duration)
                    flows_after = unicast_path(lab, a, b)  # the flows iperf3's stream left: where it really went
                    if flows_after is not None:
                        print(f"  {label}: after iperf3, unicast flows on {flows_after[0]} bridges there, "
                              f"{flows_after[1]} back (shortest: {intermediates + 2})", flush=True)
                    after = transit_forwarded(lab, paths[intermediates])
                    forwarded = (after[0] - forwarded_before[0], after[1] - forwarded_before[1])
                    if rtt is not None:
                        pings[key].append(rtt)
                    if under is not None:
                        underlay[key].append(under)
                    runs[key].append(run)
                    mbit, daemon_cpu, switch_cpu, load, retransmits = run
                    print(f"  {label}, node{a} -> node{b}: "
                          f"iperf {_fmt(mbit, '.0f')} Mbit/s ({_fmt(retransmits, 'd')} retransmitted), "
                          f"RTT mean/median {_fmt(rtt and rtt[0], '.3f')}/{_fmt(rtt and rtt[1], '.3f')} ms "
                          f"(underlay {_fmt(under, '.3f')}), "
                          f"CPU per GB: daemons {_fmt(daemon_cpu, '.1f')} s, ovs-vswitchd {_fmt(switch_cpu, '.1f')} s, "
                          f"transit frames on the path {forwarded[0]} (elsewhere {forwarded[1]}), load {load:.2f}",
                          flush=True)
                    if args.profile:
                        print(f"    path {' -> '.join(f'node{i}' for i in paths[intermediates])}; ping RTT during the "
                              f"run: median {_fmt(statistics.median(loaded) if loaded else None, '.2f')} ms, "
                              f"max {_fmt(max(loaded) if loaded else None, '.2f')} ms, {len(loaded)} answered")
                        print(profile.report(), flush=True)

        setups = setup_times(lab)
        usage = idle_usage(lab, args.idle)

    print("\n| path | transit | nodes | iperf3 TCP 1 stream, Mbit/s (each round) | median | ping RTT mean / median, ms "
          "| CPU s/GB daemons / ovs-vswitchd | load |")
    print("|---|---|---|---|---|---|---|---|")
    rtts: dict[str, dict[int, tuple[float, float]]] = {mode: {} for mode in modes}
    medians: dict[tuple[str, int], float | None] = {}
    for intermediates, (a, b) in pairs.items():
        for mode in modes:
            key = (mode, intermediates)
            mbits = [r[0] for r in runs[key]]
            medians[key] = _median(mbits)
            rtt = None
            if pings[key]:
                rtt = (statistics.median(p[0] for p in pings[key]), statistics.median(p[1] for p in pings[key]))
                rtts[mode][intermediates] = rtt
            daemon_cpu = _median([r[1] for r in runs[key]])
            switch_cpu = _median([r[2] for r in runs[key]])
            loads = [r[3] for r in runs[key]]
            print(f"| {intermediates} intermediate | {mode} | node{a} -> node{b} "
                  f"| {' / '.join(_fmt(m, '.0f') for m in mbits)} | {_fmt(medians[key], '.0f')} "
                  f"| {_fmt(rtt and rtt[0], '.3f')} / {_fmt(rtt and rtt[1], '.3f')} "
                  f"| {_fmt(daemon_cpu, '.1f')} / {_fmt(switch_cpu, '.1f')} "
                  f"| {' / '.join(f'{x:.1f}' for x in loads)} |")
    if len(modes) == 2:
        print()
        for intermediates in pairs:
            off, on = medians[("off", intermediates)], medians[("on", intermediates)]
            ratio = f"{on / off:.2f}x" if on is not None and off else "-"
            print(f"{intermediates} intermediate: median {_fmt(on, '.0f')} Mbit/s with the transit fast path, "
                  f"{_fmt(off, '.0f')} without: {ratio}")
    print()
    for intermediates, per_crossing in sorted(TAP_FRAMES.items()):
        print(f"TAP frames per GB delivered, per TAP crossing ({intermediates} intermediate, every mode): "
              f"{' / '.join(f'{x:,.0f}' for x in per_crossing)} (one frame per 1428-byte MTU: about 700,000)")
    for mode in modes:
        print(f"\ntransit fast path {mode}:")
        mode_rtts = rtts[mode]
        for n in sorted(mode_rtts):
            if n and 0 in mode_rtts:
                mean_oh = (mode_rtts[n][0] - mode_rtts[0][0]) / n / 2
                median_oh = (mode_rtts[n][1] - mode_rtts[0][1]) / n / 2
                print(f"switching overhead per intermediate node ({n} intermediates): {mean_oh:.3f} ms from mean "
                      f"RTTs, {median_oh:.3f} ms from median RTTs (paper {PAPER['overhead_ms']} ms, "
                      f"target <= {TARGET['overhead_ms']} ms)")
        print_one_way(mode_rtts, {i: underlay[(mode, i)] for i in pairs})
        for n in pairs:
            results = firsts[(mode, n)]
            if results:
                print(f"first packet of a new flow, {n} intermediate ({len(paths[n])} switches): first RTT "
                      f"{' / '.join(f'{r[0]:.2f}' for r in results)} ms vs later "
                      f"{' / '.join(f'{r[1]:.2f}' for r in results)} ms; packet-ins on the path "
                      f"{' , '.join(f'{sum(r[2])} on {len(r[2])} switches ({max(r[2], default=0)} max; {sum(r[3])} later)' for r in results)}"
                      f" (target <= 2 per switch, first RTT <= 2 ms)")
        for n in pairs:
            counts = crossings[(mode, n)]
            if counts:
                print(f"unicast path, {n} intermediate: bridges with the pair's flows there / back "
                      f"{' , '.join(f'{c[0]} / {c[1]}' for c in counts)} (shortest {n + 2} each way)")
        adjacent = [r[0] for r in runs.get((mode, 0), []) if r[0] is not None]
        if adjacent:
            print(f"adjacent nodes, one TCP stream: best {max(adjacent):.0f}, median {statistics.median(adjacent):.0f} "
                  f"Mbit/s (paper {PAPER['bandwidth_mbit']:.0f}, target >= {TARGET['bandwidth_mbit']:.0f})")
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
    print(f"load average at the end: {load_average():.2f}")
    return 0


def print_one_way(rtts: dict[int, tuple[float, float]], underlay: dict[int, list[float]]) -> None:
    """One-way latency per hop from median RTTs: an adjacent hop over its underlay, and the
    least-squares slope over every path measured for each intermediate node."""
    if 0 in rtts and underlay.get(0):
        under = statistics.median(underlay[0])
        print(f"one-way latency of an adjacent hop (tunnel + both bridges): {(rtts[0][1] - under) / 2:.3f} ms "
              f"over the underlay's {under / 2:.3f} ms (median overlay RTT {rtts[0][1]:.3f} ms, underlay {under:.3f} ms)")
    if len(rtts) >= 2:
        xs = sorted(rtts)
        ys = [rtts[x][1] for x in xs]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
        print(f"one-way latency added per intermediate node (least squares over {xs} intermediates, median RTTs): "
              f"{slope / 2:.3f} ms (target <= {TARGET['overhead_ms']} ms)")


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    sys.exit(main())
