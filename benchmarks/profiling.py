"""Counters read before and after a benchmark run, for an account of where the time goes.

Used by node_bench.py (--profile) and peers_bench.py. Everything here reads
/proc, `ip -s link`, /proc/net/udp and `ovs-appctl`; nothing changes the
system. A `Snapshot` is taken before and after a run and `diff` gives, per
process (and per thread), user and system CPU seconds and voluntary /
involuntary context switches; per interface packets and drops; per network
namespace UDP socket drops and packet socket drops (ovs-vswitchd reads the
TAPs of the netdev datapath through packet sockets, whose overflow no
interface counter shows); machine-wide CPU split from /proc/stat; and the
OVS coverage counters that moved.

Kernel work done in softirq context (veth, the UDP stack, TAP writes) is
charged to whichever task was running on that CPU, so a process's "system"
seconds include some packet processing for others; the machine-wide
softirq column shows how much there was in all.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
_COVERAGE = re.compile(r"^(\S+)\s+.*total:\s+(\d+)\s*$")


@dataclass(frozen=True)
class TaskCounters:
    """CPU seconds and context switches of one thread (or summed over a process's threads)."""

    user: float = 0.0
    system: float = 0.0
    voluntary: int = 0
    involuntary: int = 0

    def __add__(self, other: TaskCounters) -> TaskCounters:
        return TaskCounters(self.user + other.user, self.system + other.system,
                            self.voluntary + other.voluntary, self.involuntary + other.involuntary)

    def __sub__(self, other: TaskCounters) -> TaskCounters:
        return TaskCounters(self.user - other.user, self.system - other.system,
                            self.voluntary - other.voluntary, self.involuntary - other.involuntary)

    @property
    def cpu(self) -> float:
        return self.user + self.system

    @property
    def wakeups(self) -> int:
        return self.voluntary + self.involuntary


def task_counters(task_dir: Path) -> TaskCounters | None:
    try:
        stat = (task_dir / "stat").read_text()
        status = (task_dir / "status").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return TaskCounters(int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK,
                        int(values.get("voluntary_ctxt_switches", "0")),
                        int(values.get("nonvoluntary_ctxt_switches", "0")))


def threads(pid: int) -> dict[str, TaskCounters]:
    """Per thread name (threads of one name summed): the process's threads now."""
    out: dict[str, TaskCounters] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        counters = task_counters(task)
        if counters is None:
            continue
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        name = re.sub(r"\d+$", "N", name)  # handler12, revalidator3: one row per kind
        out[name] = out.get(name, TaskCounters()) + counters
    return out


def machine_cpu() -> dict[str, float]:
    """Machine-wide CPU seconds by kind (/proc/stat)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: int(v) / CLK_TCK for n, v in zip(names, first, strict=False)}


def links(netns: str) -> dict[str, dict[str, int]]:
    """Per interface in `netns`: packets and drops (ip -s link)."""
    done = subprocess.run(["ip", "-n", netns, "-s", "-j", "link", "show"], capture_output=True, text=True, check=False)
    out: dict[str, dict[str, int]] = {}
    try:
        rows = json.loads(done.stdout or "[]")
    except ValueError:
        return out
    for row in rows:
        stats = row.get("stats64") or row.get("stats") or {}
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        out[row["ifname"]] = {"rx_packets": rx.get("packets", 0), "tx_packets": tx.get("packets", 0),
                              "rx_dropped": rx.get("dropped", 0), "tx_dropped": tx.get("dropped", 0),
                              "rx_bytes": rx.get("bytes", 0), "tx_bytes": tx.get("bytes", 0)}
    return out


def udp_drops(netns: str) -> dict[str, int]:
    """UDP receive-queue drops per local socket in `netns` (the last column of /proc/net/udp),
    and the namespace's UDP error counters (RcvbufErrors, SndbufErrors, InErrors)."""
    out: dict[str, int] = {}
    done = subprocess.run(["ip", "netns", "exec", netns, "cat", "/proc/net/udp", "/proc/net/snmp"],
                          capture_output=True, text=True, check=False)
    lines = done.stdout.splitlines()
    for line in lines:
        parts = line.split()
        if len(parts) >= 13 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            out[f"sock {parts[1]}"] = int(parts[-1])
    udp = [line.split() for line in lines if line.startswith("Udp:")]
    if len(udp) == 2:
        for name, value in zip(udp[0][1:], udp[1][1:], strict=False):
            if name in ("InErrors", "RcvbufErrors", "SndbufErrors", "NoPorts"):
                out[name] = int(value)
    return out


def packet_drops(netns: str) -> dict[str, int]:
    """Drops per interface of the packet sockets in `netns` (ss's skmem d), summed over its sockets."""
    out: dict[str, int] = {}
    done = subprocess.run(["ip", "netns", "exec", netns, "ss", "-0", "-a", "-m", "-n", "-H"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    for line in done.stdout.splitlines():
        fields = line.split()
        found = re.search(r"skmem:\([^)]*\bd(\d+)\)", line)
        if len(fields) >= 5 and found:
            iface = fields[4].rpartition(":")[2]
            out[iface] = out.get(iface, 0) + int(found.group(1))
    return out


def ovs_coverage(control: str) -> dict[str, int]:
    """ovs-vswitchd's coverage counters (totals), asked through its control socket."""
    done = subprocess.run(["ovs-appctl", "-T", "5", "-t", control, "coverage/show"],
                          capture_output=True, text=True, check=False, timeout=10)
    out = {}
    for line in done.stdout.splitlines():
        m = _COVERAGE.match(line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


@dataclass
class Snapshot:
    processes: dict[str, dict[str, TaskCounters]] = field(default_factory=dict)  # label -> thread -> counters
    links: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # netns -> ifname -> counters
    udp: dict[str, dict[str, int]] = field(default_factory=dict)  # netns -> socket/counter -> drops
    packet: dict[str, dict[str, int]] = field(default_factory=dict)  # netns -> interface -> packet socket drops
    coverage: dict[str, dict[str, int]] = field(default_factory=dict)  # label -> counter -> total
    machine: dict[str, float] = field(default_factory=dict)


def snapshot(processes: Mapping[str, int], namespaces: Iterable[str],
             ovs: Mapping[str, str] | None = None) -> Snapshot:
    """`processes`: label -> pid; `ovs`: label -> the control socket of an ovs-vswitchd."""
    snap = Snapshot(machine=machine_cpu())
    for label, pid in processes.items():
        snap.processes[label] = threads(pid)
    for netns in namespaces:
        snap.links[netns] = links(netns)
        snap.udp[netns] = udp_drops(netns)
        snap.packet[netns] = packet_drops(netns)
    for label, control in (ovs or {}).items():
        snap.coverage[label] = ovs_coverage(control)
    return snap


@dataclass
class Delta:
    processes: dict[str, dict[str, TaskCounters]]
    links: dict[str, dict[str, dict[str, int]]]
    udp: dict[str, dict[str, int]]
    packet: dict[str, dict[str, int]]
    coverage: dict[str, dict[str, int]]
    machine: dict[str, float]

    def process(self, label: str) -> TaskCounters:
        total = TaskCounters()
        for counters in self.processes.get(label, {}).values():
            total = total + counters
        return total

    def drops(self) -> list[str]:
        """Every drop counter that moved, as 'netns ifname rx_dropped +N'."""
        out = []
        for netns, ifaces in self.links.items():
            for ifname, counters in ifaces.items():
                for key in ("rx_dropped", "tx_dropped"):
                    if counters.get(key, 0) > 0:
                        out.append(f"{netns} {ifname} {key} +{counters[key]}")
        for netns, counters in self.udp.items():
            for key, value in counters.items():
                if value > 0 and key != "NoPorts":
                    out.append(f"{netns} udp {key} +{value}")
        for netns, counters in self.packet.items():
            for iface, value in counters.items():
                if value > 0:
                    out.append(f"{netns} {iface} packet socket drops +{value}")
        return out


def diff(before: Snapshot, after: Snapshot) -> Delta:
    processes = {}
    for label, threads_after in after.processes.items():
        threads_before = before.processes.get(label, {})
        processes[label] = {t: c - threads_before.get(t, TaskCounters()) for t, c in threads_after.items()}
    link_delta = {}
    for netns, ifaces in after.links.items():
        link_delta[netns] = {
            ifname: {k: v - before.links.get(netns, {}).get(ifname, {}).get(k, 0) for k, v in counters.items()}
            for ifname, counters in ifaces.items()
        }
    udp = {netns: {k: v - before.udp.get(netns, {}).get(k, 0) for k, v in counters.items()}
           for netns, counters in after.udp.items()}
    packet = {netns: {k: v - before.packet.get(netns, {}).get(k, 0) for k, v in counters.items()}
              for netns, counters in after.packet.items()}
    coverage = {label: {k: v - before.coverage.get(label, {}).get(k, 0) for k, v in counters.items()
                        if v - before.coverage.get(label, {}).get(k, 0) > 0}
                for label, counters in after.coverage.items()}
    machine = {k: v - before.machine.get(k, 0.0) for k, v in after.machine.items()}
    return Delta(processes, link_delta, udp, packet, coverage, machine)
