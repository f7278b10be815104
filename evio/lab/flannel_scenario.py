"""E10: Flannel over evio behind mixed NATs, run once on a lab of full nodes and reported.

One run: etcd up; for vxlan and then host-gw bound to the evio bridge, every
ordered pod pair pinged and sent TCP while each NAT router's WAN side is
captured, then pod-to-pod TCP beside node-to-node TCP over the same overlay
path (alternated, medians); last the negative control, vxlan bound to the
node's LAN interface. `evio lab flannel` prints the report, tests/lab checks it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from evio.lab.flannel import Connectivity, FlannelLab, describe, pair_label
from evio.lab.flannel_plan import BACKENDS, Backend
from evio.lab.lab import Lab

HOST_GW_TARGET = 0.9  # host-gw pod-to-pod TCP at least this share of node-to-node TCP (issue 11)


@dataclass(frozen=True)
class Throughput:
    backend: Backend
    pod_mbit: float
    node_mbit: float

    @property
    def ratio(self) -> float:
        return self.pod_mbit / self.node_mbit if self.node_mbit else 0.0


@dataclass
class FlannelReport:
    nodes: int
    src: int
    dst: int
    connectivity: dict[str, Connectivity] = field(default_factory=dict)  # "vxlan", "host-gw", "lan (control)"
    throughput: dict[Backend, Throughput] = field(default_factory=dict)
    vxlan_on_bridge: bool = False  # flannel.1 sends through the evio bridge
    host_gw_encapsulates: bool = True  # any VXLAN device under host-gw (must be False)
    seconds: dict[str, float] = field(default_factory=dict)

    def problems(self, host_gw_target: float = HOST_GW_TARGET) -> list[str]:
        """What keeps this run from passing; empty when every check held."""
        out: list[str] = []
        for backend in BACKENDS:
            conn = self.connectivity.get(backend)
            if conn is None:
                out.append(f"{backend}: not run")
                continue
            failed = [f"{p.src}->{p.dst}" for p in conn.pairs if not p.ok]
            if failed:
                out.append(f"{backend}: pod pairs without ping or TCP: {', '.join(failed)}")
            for router, verdict in sorted(conn.captures.items()):
                if not verdict.clean:
                    out.append(f"{backend}: WAN capture not clean: {describe({router: verdict})[0]}")
            if not conn.captures:
                out.append(f"{backend}: no WAN captures")
        control = self.connectivity.get("lan")
        if control is None:
            out.append("negative control: not run")
        elif not control.none_answered:
            out.append(f"negative control: {control.answered} pod pairs connected through the NATs")
        if not self.vxlan_on_bridge:
            out.append("vxlan: flannel.1 is not on the evio bridge")
        if self.host_gw_encapsulates:
            out.append("host-gw: a VXLAN device is present (double encapsulation)")
        gw = self.throughput.get("host-gw")
        if gw is None:
            out.append("host-gw: no TCP figures")
        elif gw.ratio < host_gw_target:
            out.append(f"host-gw: pod-to-pod TCP is {gw.ratio:.0%} of node-to-node (target {host_gw_target:.0%})")
        return out

    def lines(self, lab: Lab) -> list[str]:
        out = ["pod-to-pod over evio (ping RTT ms / TCP Mbit/s):"]
        header = f"  {'pair':34} " + " ".join(f"{name:>18}" for name in self.connectivity)
        out.append(header)
        first = next(iter(self.connectivity.values()), None)
        for i, pair in enumerate(first.pairs if first else ()):
            cells = []
            for conn in self.connectivity.values():
                p = conn.pairs[i]
                rtt = "-" if p.ping_ms is None else f"{p.ping_ms:.2f}"
                tcp = "-" if p.tcp_mbit is None else f"{p.tcp_mbit:.0f}"
                cells.append(f"{rtt + ' / ' + tcp:>18}")
            out.append(f"  {pair_label(lab, pair.src, pair.dst):34} " + " ".join(cells))
        out.append("")
        out.append(f"TCP node{self.src} -> node{self.dst} (iperf3, medians), same overlay path, same run:")
        out.append(f"  {'backend':10} {'pod-to-pod':>12} {'node-to-node':>13} {'ratio':>7}")
        for t in self.throughput.values():
            out.append(f"  {t.backend:10} {t.pod_mbit:>8.0f} Mb/s {t.node_mbit:>9.0f} Mb/s {t.ratio:>7.0%}")
        out.append(f"  (target: host-gw >= {HOST_GW_TARGET:.0%} of node-to-node)")
        out.append("")
        out.append("captures on the NAT routers' WAN side while the pods talked:")
        for name, conn in self.connectivity.items():
            for line in describe(conn.captures):
                out.append(f"  {name:8} {line}")
        out.append("")
        out.append("vxlan: flannel.1 checksums its own packets (tx-checksum-ip-generic off, docs/kubernetes.md)")
        out.append(f"flannel.1 on the evio bridge (vxlan): {'yes' if self.vxlan_on_bridge else 'NO'}; "
                   f"VXLAN device under host-gw: {'YES' if self.host_gw_encapsulates else 'none'}")
        out.append("steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items()))
        return out


def run(lab: Lab, *, src: int = 1, dst: int = 2, seconds: int = 3, rounds: int = 3,
        tcp_bytes: str = "1M", log: Callable[[str], None] = lambda _: None) -> FlannelReport:
    """E10 on `lab` (full nodes, overlay formed). Leaves Flannel stopped; Lab.down removes the rest."""
    report = FlannelReport(len(lab.nodes), src, dst)
    flannel = FlannelLab(lab)
    started = time.monotonic()
    flannel.start_etcd()
    report.seconds["etcd"] = time.monotonic() - started
    try:
        for backend in BACKENDS:
            step = time.monotonic()
            log(f"{backend}: flanneld on every node, --iface the evio bridge ...")
            flannel.start(backend)
            if backend == "vxlan":
                report.vxlan_on_bridge = all(flannel.vxlan_on_bridge(n.index) for n in lab.nodes)
            else:
                report.host_gw_encapsulates = any(flannel.encapsulating(n.index) for n in lab.nodes)
            log(f"{backend}: ping and TCP between every pod pair, WAN captured ...")
            report.connectivity[backend] = flannel.connectivity(tcp_bytes=tcp_bytes)
            log(f"{backend}: TCP node{src} -> node{dst}, pod and node alternated ...")
            pod, node = flannel.throughput(src, dst, seconds=seconds, rounds=rounds)
            report.throughput[backend] = Throughput(backend, pod, node)
            flannel.stop()
            report.seconds[backend] = time.monotonic() - step
        step = time.monotonic()
        log("negative control: vxlan bound to the LAN interface ...")
        flannel.start("vxlan", interface="lan")
        report.connectivity["lan"] = flannel.connectivity(tcp_bytes=tcp_bytes, ping_count=1)
        report.seconds["control"] = time.monotonic() - step
    finally:
        flannel.stop()
    return report
