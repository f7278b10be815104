#!/usr/bin/env python3
"""What Open vSwitch's userspace (netdev) datapath alone allows on this machine, beside evio's full stack.

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/switch_ceiling.py [--duration 4] [--rounds 1]
        [--paths 0,1,2,6] [--switches ovs,linux] [--links veth,tap] [--node-bench]

Where the openvswitch kernel module is missing, every evio bridge is a netdev
bridge: ovs-vswitchd moves every frame itself, reading and writing its ports
through AF_PACKET sockets (a "system" port: evio's tunnel TAPs) and the TAP
behind the bridge's internal port (the node's interface). This benchmark takes
evio out and measures the switch with nothing else on the path, in paths built
from namespaces it creates and removes (also on failure, Ctrl-C or SIGTERM):

- bare veth: two namespaces joined by one veth (the baseline);
- 1 bridge: node A's bridge, A's address on its internal port, a veth from a
  bridge port to namespace B (B's address on the plain veth end);
- 2 bridges: the adjacent full-stack path without the tunnel: A's internal
  port -> A's bridge -> link -> B's bridge -> B's internal port;
- 6 bridges: the same through 4 intermediate nodes' bridges, each with two
  link ports (the full stack with the transit fast path off, where every
  intermediate node's bridge switches every frame).

Switches (--switches): "ovs", each bridge a node's own: a private ovsdb-server
and ovs-vswitchd in the node's namespace (evio.bridge.ovs_instance, as the lab
runs them, userspace TSO on), made by evio's OvsBridge (datapath_type=netdev,
OpenFlow 1.3, fail_mode secure, in-band off, RSTP off, the tunnels' MTU on the
internal port, and the 4 MiB receive buffer on vswitchd's packet socket of
every added port); then its controller is removed and one flow,
`priority=0,actions=NORMAL`, does the switching (MAC learning in vswitchd).
"linux": a Linux bridge per node, the address on the bridge device: switching
in the kernel, in softirq, no process woken; a stand-in for Open vSwitch's
kernel datapath, which the daemon uses where the module is loaded.

Links between bridges (--links): "veth", a veth pair: vswitchd reads and writes
it through the same AF_PACKET "system" port code as evio's tunnel TAPs, so a
veth is a TAP pair joined by a forwarder that costs nothing (the kernel hands
the frame across); "tap", two TAPs made as evio makes its tunnels'
(evio.tunnel.datapath.tap: virtio-net header, TSO, no addresses) joined by a
forwarder process of this script that copies every read, super-frames whole,
to the other TAP: a tunnel that does no work, one process and two TAP
crossings per hop. Neither splits a super-frame into MTU-sized records as a
real tunnel does, so both are ceilings. What the tunnel costs on top (its
daemon, crypto, UDP) is in peers_bench.py.

Per path, `--rounds` times, paths interleaved: iperf3 TCP, one stream, with
its retransmissions, CPU seconds per GB of every vswitchd and forwarder of
the path, and the bytes per frame the links carried towards B (over the MTU:
TCP super-frames crossed whole); the median ping RTT (50 pings 20 ms apart,
after a warm-up); and the first packet of a new flow (median of 3 trials):
after a warm-up (the neighbour entries are fresh), every bridge's MAC table
(`fdb/flush`) and datapath flows (`dpctl/del-flows`) flushed, then one ping
(each OVS bridge floods the echo and learns, the echo and its reply an upcall
in every vswitchd; no controller) and 4 more 0.2 s apart (datapath flows).
Each row shows its ratio to the bare veth, with the 1-minute load average
beside it.

With `--node-bench`, `benchmarks/node_bench.py` runs afterwards in the same
invocation (a ring of 10 full nodes, paths of 0 and 4 intermediates, transit
fast path off and on, --first-packet; a few minutes) and its figures are put
beside the OVS rows: the adjacent pair beside 2 bridges, 4 intermediates
beside 6 bridges, and the ratio evio / switch alone. A benchmark, not a test:
it asserts nothing. Root only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import profiling  # noqa: E402
from node_bench import _times, cpu_seconds, load_average  # noqa: E402  benchmarks/ is on sys.path

from evio.bridge.commands import SubprocessRunner  # noqa: E402
from evio.bridge.ovs_bridge import BridgeSpec, OvsBridge  # noqa: E402
from evio.bridge.ovs_instance import OvsInstance  # noqa: E402
from evio.lab.netns import run_in  # noqa: E402
from evio.lab.tunnel_testbed import VethTestbed, iperf, run, unique_prefix  # noqa: E402
from evio.tunnel.datapath.mtu import tap_mtu  # noqa: E402
from evio.tunnel.datapath.offload import VNET_HDR_LEN  # noqa: E402
from evio.tunnel.datapath.tap import LinuxTap  # noqa: E402

SUBNET = "10.203.0"
FIRST_TRIALS = 3
"""Flushes per first-packet figure (its median): one ping's RTT on a shared machine is one scheduler's whim."""
MTU = tap_mtu()
"""The tunnels' TAP MTU, which evio also puts on the bridge's internal port: every path here uses it."""
PATHS = (0, 1, 2, 6)
"""Bridges on each path measured; 0 is the bare veth."""
SWITCHES = ("ovs", "linux")
"""Open vSwitch's netdev bridge as evio makes it, or a Linux bridge (the kernel switching)."""
LINKS = ("veth", "tap")
"""Links between bridges: a veth pair, or two TAPs (as evio's tunnels') joined by a forwarder process."""
EVIO_PATH = {2: 0, 6: 4}
"""Bridges on a path -> intermediate nodes of the node_bench path it stands beside."""
TARGETS = {"adjacent_mbit": 3000.0, "four_mbit": 1000.0, "per_node_ms": 0.05, "first_ms": 2.0}
"""Issue 25's full-stack targets."""


@dataclass
class Measured:
    mbit: float | None
    retransmits: int | None
    switch_cpu_gb: float | None  # ovs-vswitchd CPU seconds per GB delivered, every vswitchd of the path
    forwarder_cpu_gb: float | None  # the same of the TAP links' forwarders
    frame_bytes: float | None  # bytes per frame the links carried towards B: over 1428, TSO super-frames survived
    rtt_ms: float | None  # median
    first_ms: float | None
    later_ms: float | None  # median of the 4 pings after the first
    load: float


class SwitchPath:
    """`bridges` nodes in a row, each a namespace with its own switch: an evio-made netdev bridge of its own
    Open vSwitch ("ovs"), or a Linux bridge ("linux"); linked by veth pairs or TAP pairs with a forwarder.
    A's address on the first bridge's internal port (a Linux bridge's own device), B's on the last one's (with
    one bridge, on a plain veth end in a namespace of its own). `a_netns`, `b_netns`, `b_address` to measure."""

    def __init__(self, prefix: str, bridges: int, switch: str = "ovs", link: str = "veth", mtu: int = MTU) -> None:
        if bridges < 1:
            raise ValueError("a path of bridges has at least one")
        if switch not in SWITCHES or link not in LINKS or (link == "tap" and bridges < 2):
            raise ValueError(f"no {switch!r} path of {bridges} bridges with {link!r} links")
        self.prefix, self.bridges, self.switch, self.link, self.mtu = prefix, bridges, switch, link, mtu
        self.forwarders: list[subprocess.Popen[str]] = []
        self.namespaces = [f"{prefix}n{i}" for i in range(bridges)] + ([f"{prefix}b"] if bridges == 1 else [])
        self.a_netns, self.b_netns = self.namespaces[0], self.namespaces[-1]
        self.a_address, self.b_address = f"{SUBNET}.1", f"{SUBNET}.2"
        self.bridge_name = f"{prefix}br"  # every node's bridge: one per namespace, each its own vswitchd's
        self.instances: list[OvsInstance] = []
        self.ovs_bridges: list[OvsBridge] = []
        self.base = Path(tempfile.mkdtemp(prefix="evsw", dir="/tmp"))  # short: Unix socket paths live under it

    def up(self) -> None:
        try:
            for netns in self.namespaces:
                run(["ip", "netns", "add", netns])
                run(["ip", "-n", netns, "link", "set", "lo", "up"])
            for i in range(self.bridges):
                address = self.a_address if i == 0 else self.b_address if i == self.bridges - 1 else None
                if self.switch == "linux":
                    self._linux_bridge(i, address)
                    continue
                ovs = OvsInstance(self.base / f"ovs{i}", netns=self.namespaces[i])
                self.instances.append(ovs)
                ovs.start()
                spec = BridgeSpec(self.bridge_name, 6653, f"{address}/24" if address else None, mtu=self.mtu,
                                  datapath_id=i + 1)
                bridge = OvsBridge(spec, SubprocessRunner(prefix=["ip", "netns", "exec", self.namespaces[i]]),
                                   "netdev", str(ovs.db_socket))
                self.ovs_bridges.append(bridge)
                asyncio.run(bridge.create())
                # No controller: vswitchd's own MAC learning switches (fail_mode stays secure, so the one flow rules).
                ovs.vsctl("del-controller", self.bridge_name)
                ovs.ofctl("add-flow", self.bridge_name, "priority=0,actions=NORMAL")
            for i in range(len(self.namespaces) - 1):
                self._link(i)
            if self.bridges == 1:
                end = f"{self.prefix}l0b"
                run(["ip", "-n", self.b_netns, "addr", "add", f"{self.b_address}/24", "dev", end])
        except BaseException:
            self.down()
            raise

    def _linux_bridge(self, i: int, address: str | None) -> None:
        """The kernel's own switch, as a stand-in for Open vSwitch's kernel datapath (the module is missing
        here): frames switched in softirq, no process woken. The address goes on the bridge device."""
        netns, name = self.namespaces[i], self.bridge_name
        run(["ip", "-n", netns, "link", "add", name, "mtu", str(self.mtu), "type", "bridge"])
        if address is not None:
            run(["ip", "-n", netns, "addr", "add", f"{address}/24", "dev", name])
        run(["ip", "-n", netns, "link", "set", name, "up"])

    def _add_port(self, node: int, port: str) -> None:
        if self.switch == "linux":
            run(["ip", "-n", self.namespaces[node], "link", "set", port, "master", self.bridge_name])
        else:
            asyncio.run(self.ovs_bridges[node].add_port(port))

    def _link(self, i: int) -> None:
        """Node i's bridge to node i + 1's (or to namespace B, on a path of one bridge): a veth pair, or two
        TAPs made as evio makes its tunnels' and joined by a forwarder process."""
        left, right = f"{self.prefix}l{i}a", f"{self.prefix}l{i}b"
        ends = ((i, self.namespaces[i], left), (i + 1, self.namespaces[i + 1], right))
        if self.link == "veth":
            run(["ip", "link", "add", left, "netns", self.namespaces[i], "mtu", str(self.mtu), "type", "veth",
                 "peer", "name", right, "netns", self.namespaces[i + 1], "mtu", str(self.mtu)])
            for node, netns, end in ends:
                if node < self.bridges:
                    # What evio's tunnel TAPs get (evio.tunnel.datapath.tap): the stack ignores a port's frames.
                    run(["sysctl", "-q", "-w", f"net.ipv6.conf.{end}.disable_ipv6=1",
                         f"net.ipv4.conf.{end}.rp_filter=1"], netns)
                run(["ip", "-n", netns, "link", "set", end, "up"])
        else:
            forwarder = subprocess.Popen(
                [sys.executable, __file__, "--forward", f"{self.namespaces[i]}:{left}",
                 f"{self.namespaces[i + 1]}:{right}", "--mtu", str(self.mtu)],
                stdout=subprocess.PIPE, text=True, cwd=REPO)
            self.forwarders.append(forwarder)
            assert forwarder.stdout is not None
            ready = forwarder.stdout.readline()
            if not ready.startswith("ready"):
                raise RuntimeError(f"forwarder {left} <-> {right} did not start: {ready!r}")
        for node, _, end in ends:
            if node < self.bridges:
                self._add_port(node, end)

    def down(self) -> None:
        """Stop the forwarders (their TAPs go with them) and every Open vSwitch, kill what else runs inside,
        delete the namespaces (the veths go with them)."""
        for forwarder in self.forwarders:
            forwarder.kill()
            forwarder.wait(5)
        for ovs in self.instances:
            try:
                ovs.stop()
            except Exception as err:  # noqa: BLE001 - teardown goes on whatever broke
                print(f"  stopping {ovs.base_dir}: {err}", flush=True)
        for netns in self.namespaces:
            for pid in run(["ip", "netns", "pids", netns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run(["ip", "netns", "del", netns], check=False)
        shutil.rmtree(self.base, ignore_errors=True)

    def link_ends(self) -> list[tuple[str, str]]:
        """(namespace, interface) of each link's end on A's side."""
        return [(self.namespaces[i], f"{self.prefix}l{i}a") for i in range(len(self.namespaces) - 1)]

    def switch_pids(self) -> list[int]:
        return [p for p in (ovs.pid("ovs-vswitchd") for ovs in self.instances) if p is not None]

    def flush(self) -> None:
        """Every bridge forgets its MACs and its datapath flows: the next frame is a new flow everywhere."""
        if self.switch == "linux":
            for netns in self.namespaces[: self.bridges]:
                run(["ip", "-n", netns, "link", "set", self.bridge_name, "type", "bridge", "fdb_flush"])
        for ovs in self.instances:
            for command in (["fdb/flush", self.bridge_name], ["dpctl/del-flows"]):
                done = subprocess.run(["ovs-appctl", "-t", str(ovs.run_dir / "ovs-vswitchd.ctl"), *command],
                                      env=ovs.env, capture_output=True, text=True, timeout=30, check=False)
                if done.returncode != 0:  # a first packet after a flush that did not happen would be a later one
                    raise RuntimeError(f"ovs-appctl {' '.join(command)} failed: {done.stderr.strip()}")


def forward(left: str, right: str, mtu: int) -> None:
    """The forwarder between two TAPs (NETNS:NAME each), both directions, until killed: each TAP made as evio
    makes a tunnel's (evio.tunnel.datapath.tap: virtio-net header, TSO, its MTU, no addresses), every read
    written to the other TAP as it is, super-frames and their header included. Prints "ready" once both are up."""
    def make(name: str) -> LinuxTap:
        return asyncio.run(LinuxTap.create(name, mtu, offload=True, tso=True))

    taps = []
    for spec in (left, right):
        netns, name = spec.split(":")
        taps.append(run_in(netns, partial(make, name)))
    if not all(tap.vnet_hdr for tap in taps):
        print("offloads refused by the kernel", flush=True)
        return
    selector = selectors.DefaultSelector()
    selector.register(taps[0].fd, selectors.EVENT_READ, taps[1].fd)
    selector.register(taps[1].fd, selectors.EVENT_READ, taps[0].fd)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            for _ in range(64):  # a burst per wake-up, as the tunnels read
                try:
                    frame = os.read(key.fd, 65536 + VNET_HDR_LEN + 64)
                except BlockingIOError:
                    break
                try:
                    os.write(key.data, frame)
                except BlockingIOError:  # the other TAP's queue is full: dropped, as a tunnel would
                    pass


def ping_median(netns: str, address: str, count: int = 50) -> float | None:
    run(["ping", "-c", "3", "-i", "0.2", "-W", "2", address], netns, check=False)  # ARP and flows first
    times = _times(run(["ping", "-c", str(count), "-i", "0.02", "-W", "2", address], netns, check=False).stdout)
    return statistics.median(times) if times else None


def first_packet(netns: str, address: str, flush: Callable[[], None], trials: int = FIRST_TRIALS
                 ) -> tuple[float | None, float | None]:
    """(first RTT, RTT of the 4 pings after it) in ms after `flush()`, the median of each over `trials` flushes;
    the neighbour entry is made fresh before each."""
    firsts: list[float] = []
    laters: list[float] = []
    for _ in range(trials):
        run(["ping", "-c", "2", "-i", "0.2", "-W", "2", address], netns, check=False)
        flush()
        firsts += _times(run(["ping", "-c", "1", "-W", "2", address], netns, check=False).stdout)
        laters += _times(run(["ping", "-c", "4", "-i", "0.2", "-W", "2", address], netns, check=False).stdout)
    return _median(list(firsts)), _median(list(laters))


def sent_towards_b(ends: list[tuple[str, str]]) -> tuple[int, int]:
    """(bytes, frames) sent so far by the link ends on A's side of each link (the data's direction)."""
    total = [0, 0]
    for netns, name in ends:
        counters = profiling.links(netns).get(name, {})
        total[0] += counters.get("tx_bytes", 0)
        total[1] += counters.get("tx_packets", 0)
    return total[0], total[1]


def measure(a_netns: str, b_netns: str, address: str, seconds: float, switches: list[int], forwarders: list[int],
            flush: Callable[[], None], ends: list[tuple[str, str]]) -> Measured:
    rtt = ping_median(a_netns, address)
    first, later = first_packet(a_netns, address, flush)
    before = cpu_seconds(switches), cpu_seconds(forwarders)
    sent = sent_towards_b(ends)
    try:
        tcp = iperf(a_netns, b_netns, address, seconds)
    except RuntimeError as err:
        print(f"  iperf3 failed: {err}", flush=True)
        tcp = None
    used = cpu_seconds(switches) - before[0], cpu_seconds(forwarders) - before[1]
    sent_bytes, sent_frames = (now - then for now, then in zip(sent_towards_b(ends), sent, strict=True))
    mbit = tcp["mbit"] if tcp else None
    gigabytes = mbit * seconds / 8000 if mbit else 0.0
    per_gb = [u / gigabytes if pids and gigabytes > 0 else None for u, pids in zip(used, (switches, forwarders),
                                                                                   strict=True)]
    return Measured(mbit, int(tcp["retransmits"]) if tcp else None, per_gb[0], per_gb[1],
                    sent_bytes / sent_frames if sent_frames else None, rtt, first, later, load_average())


def measure_path(bridges: int, switch: str, link: str, seconds: float) -> Measured:
    prefix = unique_prefix("evsw")
    if bridges == 0:
        with VethTestbed(prefix, SUBNET, MTU) as tb:
            return measure(tb.a.netns, tb.b.netns, tb.b.address, seconds, [], [], lambda: None,
                           [(tb.a.netns, tb.a.interface)])
    path = SwitchPath(prefix, bridges, switch, link)
    try:
        path.up()
        return measure(path.a_netns, path.b_netns, path.b_address, seconds, path.switch_pids(),
                       [f.pid for f in path.forwarders], path.flush, path.link_ends())
    finally:
        path.down()


# ---------------------------------------------------------------------- node_bench's figures


@dataclass
class EvioFigures:
    """node_bench.py's summary, per (transit mode, intermediates): median Mbit/s, median RTT, first-packet RTTs;
    per mode: the one-way latency added per intermediate node."""

    mbit: dict[tuple[str, int], float] = field(default_factory=dict)
    rtt_ms: dict[tuple[str, int], float] = field(default_factory=dict)
    first_ms: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    per_node_ms: dict[str, float] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)


_ROW = re.compile(r"^\| (\d+) intermediate \| (on|off) \|[^|]*\|[^|]*\| ([\d.]+|-) \| ([\d.]+|-) / ([\d.]+|-) \|"
                  r"[^|]*\| ([^|]*) \|$")
_FIRST = re.compile(r"^first packet of a new flow, (\d+) intermediate \(.*?\): first RTT ([\d. /]+) ms")
_PER_NODE = re.compile(r"^one-way latency added per intermediate node .*?: (-?[\d.]+) ms")
_MODE = re.compile(r"^transit fast path (on|off):$")


def parse_node_bench(text: str) -> EvioFigures:
    """The figures of node_bench.py's printed summary (its table, then one block per transit mode)."""
    figures = EvioFigures()
    mode = "on"
    for line in text.splitlines():
        line = line.rstrip()
        if match := _ROW.match(line):
            key = (match[2], int(match[1]))
            if match[3] != "-":
                figures.mbit[key] = float(match[3])
            if match[5] != "-":
                figures.rtt_ms[key] = float(match[5])
            figures.loads += [float(x) for x in match[6].split(" / ") if re.fullmatch(r"[\d.]+", x.strip())]
        elif match := _MODE.match(line):
            mode = match[1]
        elif match := _FIRST.match(line):
            figures.first_ms[(mode, int(match[1]))] = [float(x) for x in match[2].split("/") if x.strip()]
        elif match := _PER_NODE.match(line):
            figures.per_node_ms[mode] = float(match[1])
    return figures


def run_node_bench(seconds: float) -> EvioFigures:
    """node_bench.py in a child process, its output passed through as it comes."""
    argv = [sys.executable, str(REPO / "benchmarks" / "node_bench.py"), "--nodes", "10", "--rounds", "1",
            "--paths", "0,4", "--first-packet", "--idle", "1", "--duration", f"{seconds:g}"]
    print(f"\n{' '.join(argv[1:])}", flush=True)
    lines = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"  | {line}", end="", flush=True)
            lines.append(line)
    return parse_node_bench("".join(lines))


# ---------------------------------------------------------------------- the table


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


Key = tuple[int, str, str]
"""(bridges on the path, switch, link kind between them)."""
BARE: Key = (0, "none", "veth")


def label_of(key: Key) -> str:
    bridges, switch, link = key
    if bridges == 0:
        return "bare veth"
    label = f"{bridges} {'OVS netdev' if switch == 'ovs' else 'Linux'} bridge{'s' if bridges > 1 else ''}"
    if bridges in EVIO_PATH:
        label += f" ({'adjacent' if EVIO_PATH[bridges] == 0 else f'{EVIO_PATH[bridges]} intermediates'})"
    return label + (", TAP links + forwarder" if link == "tap" else ", veth links" if bridges > 1 else "")


def print_table(results: dict[Key, list[Measured]], evio: EvioFigures | None) -> None:
    base_mbit = _median([m.mbit for m in results.get(BARE, [])])
    base_rtt = _median([m.rtt_ms for m in results.get(BARE, [])])
    print("\n| path | iperf3 TCP 1 stream, Mbit/s (each round) | x bare veth | retransmitted "
          "| CPU s/GB vswitchd / forwarder | bytes per frame on the links | ping RTT median, ms | x bare veth | first packet / later, ms | load "
          "| evio full stack (node_bench): Mbit/s, RTT ms, first packet ms | evio / switch alone: Mbit/s, RTT |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, runs in results.items():
        bridges = key[0]
        mbit, rtt = _median([m.mbit for m in runs]), _median([m.rtt_ms for m in runs])
        evio_cell, ratio_cell = "", ""
        if evio is not None and bridges in EVIO_PATH and key[1] == "ovs":
            cells, ratios = [], []
            for mode in ("off", "on"):
                at = (mode, EVIO_PATH[bridges])
                if at not in evio.mbit and at not in evio.rtt_ms:
                    continue
                e_mbit, e_rtt = evio.mbit.get(at), evio.rtt_ms.get(at)
                firsts = evio.first_ms.get(at, [])
                cells.append(f"transit {mode}: {_fmt(e_mbit, '.0f')}, {_fmt(e_rtt, '.3f')}, "
                             f"{' / '.join(f'{x:.2f}' for x in firsts) or '-'}")
                ratios.append(f"transit {mode}: {_ratio(e_mbit, mbit)}, {_ratio(e_rtt, rtt)}")
            evio_cell, ratio_cell = "; ".join(cells), "; ".join(ratios)
        cpu = f"{_fmt(_median([m.switch_cpu_gb for m in runs]), '.2f')} / {_fmt(_median([m.forwarder_cpu_gb for m in runs]), '.2f')}"
        print(f"| {label_of(key)} | {' / '.join(_fmt(m.mbit, '.0f') for m in runs)} | {_ratio(mbit, base_mbit)} "
              f"| {' / '.join(_fmt(m.retransmits, 'd') for m in runs)} | {cpu} "
              f"| {' / '.join(_fmt(m.frame_bytes, ',.0f') for m in runs)} | {_fmt(rtt, '.3f')} "
              f"| {_ratio(rtt, base_rtt)} "
              f"| {' , '.join(_fmt(m.first_ms, '.3f') + ' / ' + _fmt(m.later_ms, '.3f') for m in runs)} "
              f"| {' / '.join(f'{m.load:.2f}' for m in runs)} | {evio_cell} | {ratio_cell} |")
    print()
    if evio is not None and evio.per_node_ms:
        print("evio full stack, one-way latency added per intermediate node: " + ", ".join(
            f"transit {mode} {ms:.3f} ms" for mode, ms in sorted(evio.per_node_ms.items())))
    for switch, link in ((switch, link) for switch in SWITCHES for link in LINKS):
        two = _median([m.rtt_ms for m in results.get((2, switch, link), [])])
        six = _median([m.rtt_ms for m in results.get((6, switch, link), [])])
        adjacent = _median([m.mbit for m in results.get((2, switch, link), [])])
        four = _median([m.mbit for m in results.get((6, switch, link), [])])
        if adjacent is None and four is None:
            continue
        per_node = (six - two) / 4 / 2 if two is not None and six is not None else None
        firsts = [m.first_ms for m in results.get((6, switch, link), []) if m.first_ms is not None]
        print(f"{'OVS netdev' if switch == 'ovs' else 'Linux'} bridges alone, {link} links, against issue 25's "
              f"targets: adjacent {_fmt(adjacent, '.0f')} Mbit/s "
              f"(>= {TARGETS['adjacent_mbit']:.0f}), 4 intermediates {_fmt(four, '.0f')} Mbit/s "
              f"(>= {TARGETS['four_mbit']:.0f}), one-way per intermediate node {_fmt(per_node, '.3f')} ms (half the "
              f"median RTT's growth from 2 to 6 bridges, over 4; <= {TARGETS['per_node_ms']}), first packet through "
              f"6 bridges {' / '.join(f'{x:.2f}' for x in firsts) or '-'} ms (<= {TARGETS['first_ms']:g})")


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `finally`: the namespaces are removed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per iperf3 run (default 4)")
    ap.add_argument("--rounds", type=int, default=1, help="measurements per path, paths interleaved (default 1)")
    ap.add_argument("--paths", default=",".join(map(str, PATHS)),
                    help="bridges on the paths measured, 0 for the bare veth (default 0,1,2,6)")
    ap.add_argument("--switches", default=",".join(SWITCHES),
                    help="switches: ovs (Open vSwitch netdev, as evio here), linux (Linux bridge); default both")
    ap.add_argument("--links", default=",".join(LINKS),
                    help="links between bridges: veth, tap (TAP pair + forwarder; paths of 2 bridges or more); "
                         "default both")
    ap.add_argument("--node-bench", action="store_true",
                    help="also run node_bench.py (10 nodes, paths of 0 and 4 intermediates; minutes) for evio's figures")
    ap.add_argument("--forward", nargs=2, metavar="NETNS:TAP", help=argparse.SUPPRESS)  # a TAP link's forwarder
    ap.add_argument("--mtu", type=int, default=MTU, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.forward:
        forward(args.forward[0], args.forward[1], args.mtu)
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    links = [x.strip() for x in args.links.split(",") if x.strip()]
    switches = [x.strip() for x in args.switches.split(",") if x.strip()]
    keys: list[Key] = []
    for bridges in (int(x) for x in args.paths.split(",") if x.strip()):
        if bridges == 0:
            keys.append(BARE)
        else:
            keys += [(bridges, switch, link) for switch in switches for link in links
                     if link == "veth" or bridges >= 2]
    print(f"load average at start: {load_average():.2f}; MTU {MTU} on every path (the tunnels' TAP MTU)", flush=True)
    results: dict[Key, list[Measured]] = {key: [] for key in keys}
    for round_no in range(1, args.rounds + 1):
        for key in keys:
            m = measure_path(*key, args.duration)
            results[key].append(m)
            print(f"  round {round_no}, {label_of(key)}: iperf {_fmt(m.mbit, '.0f')} Mbit/s "
                  f"({_fmt(m.retransmits, 'd')} retransmitted), CPU vswitchd {_fmt(m.switch_cpu_gb, '.2f')} s/GB, "
                  f"forwarders {_fmt(m.forwarder_cpu_gb, '.2f')} s/GB, {_fmt(m.frame_bytes, ',.0f')} bytes per frame on "
                  f"the links, RTT median {_fmt(m.rtt_ms, '.3f')} ms, "
                  f"first packet {_fmt(m.first_ms, '.3f')} ms (later {_fmt(m.later_ms, '.3f')}), load {m.load:.2f}",
                  flush=True)
    evio = run_node_bench(args.duration) if args.node_bench else None
    print_table(results, evio)
    print(f"load average at the end: {load_average():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
