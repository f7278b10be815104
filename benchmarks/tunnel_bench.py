#!/usr/bin/env python3
"""Tunnel benchmark: one tunnel against the bare underlay between the same two namespaces.

    sudo .venv/bin/python benchmarks/tunnel_bench.py [--duration 10] [--rounds 2] [--setup-trials 10]
    sudo .venv/bin/python benchmarks/tunnel_bench.py --against ../main [--no-offload]   (a change's cost)

Part 1, data path: two namespaces joined by a veth pair (MTU 1500), one
tunnel endpoint in each (evio.lab.tunnel_endpoint: uvloop, FdDatapath, AES-GCM
unless --cipher says otherwise, TAP MTU 1428). Each round measures, through
the tunnel and over the veth: iperf3 TCP with 1 and 4 streams, iperf3 UDP at
100 Mbit/s (loss, jitter), ping RTT (100 x 10 ms). The table gives every
round and the ratio tunnel / underlay of the mean. It also reports the
endpoints' CPU time per frame during the single-stream TCP run.

Part 2, setup time (unless --setup-trials 0): a 2-node lab (evio.lab) with
endpoint-independent NATs (direct) and with one symmetric NAT (relayed);
each trial starts both endpoints and times the tunnel from the initiator's
connect() until both sides are up, and at the answering side from the offer
until the first authenticated record (traffic can flow from then on).

Root only; everything made is removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.lab.tunnel_testbed import EndpointProcess, VethTestbed, iperf, ping_rtt, unique_prefix  # noqa: E402

ID_A = "aa" * 16
ID_B = "bb" * 16
TUN_A, TUN_B = "10.99.0.1", "10.99.0.2"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def ping_ms(netns: str, address: str) -> float:
    avg, received = ping_rtt(netns, address, 100, 0.01)
    assert received == 100, f"ping {address}: {received}/100"
    return avg


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def start_pair(tb: VethTestbed, workdir: Path, extra: list[str],
               env: dict[str, str] | None = None) -> tuple[EndpointProcess, EndpointProcess]:  # fmt: skip
    common = ["--signal-dir", str(workdir), *extra]
    b = EndpointProcess(tb.b.netns, ["--node", ID_B, "--peer", ID_A, "--address", f"{TUN_B}/24", *common], workdir / "b.log", env)
    b.wait_event("ready")
    a = EndpointProcess(tb.a.netns, ["--node", ID_A, "--peer", ID_B, "--connect", "--address", f"{TUN_A}/24", *common],
                        workdir / "a.log", env)  # fmt: skip
    a.wait_event("up", timeout=20)
    b.wait_event("up", timeout=20)
    return a, b


def datapath_part(args: argparse.Namespace) -> None:
    rows: dict[str, dict[str, list[float]]] = {}

    def add(metric: str, where: str, value: float) -> None:
        rows.setdefault(metric, {"tunnel": [], "underlay": []})[where].append(value)

    cpu_notes = []
    with VethTestbed(unique_prefix()) as tb, tempfile.TemporaryDirectory(prefix="evt-bench-") as d:
        a, b = start_pair(tb, Path(d), ["--cipher", args.cipher, *(["--no-mmsg"] if args.no_mmsg else [])])
        try:
            targets = {"tunnel": TUN_B, "underlay": tb.b.address}
            for r in range(args.rounds):
                for where, address in targets.items():
                    before = (cpu_seconds(a.pid), cpu_seconds(b.pid), a.stats()["tx_frames"]) if where == "tunnel" else None
                    t1 = iperf(tb.a.netns, tb.b.netns, address, args.duration, 1)
                    if before:
                        frames = a.stats()["tx_frames"] - before[2]
                        ca, cb = cpu_seconds(a.pid) - before[0], cpu_seconds(b.pid) - before[1]
                        cpu_notes.append(f"round {r + 1}: {frames} frames A->B; CPU per frame: sender {ca / frames * 1e6:.2f} us, receiver {cb / frames * 1e6:.2f} us; "
                                         f"CPU busy: sender {ca / args.duration:.0%}, receiver {cb / args.duration:.0%}")
                    add("TCP 1 stream Mbit/s", where, t1["mbit"])
                    if args.tcp_only:
                        continue
                    add("TCP 4 streams Mbit/s", where, iperf(tb.a.netns, tb.b.netns, address, args.duration, 4)["mbit"])
                    u = iperf(tb.a.netns, tb.b.netns, address, args.duration, 1, udp_mbit=100)
                    add("UDP 100M Mbit/s", where, u["mbit"])
                    add("UDP 100M loss %", where, u["loss"])
                    add("UDP 100M jitter ms", where, u["jitter"])
                    add("ping RTT ms", where, ping_ms(tb.a.netns, address))
            sa, sb = a.stats(), b.stats()
        finally:
            a.stop()
            b.stop()

    mode = "one system call per datagram" if args.no_mmsg else "sendmmsg/recvmmsg bursts"
    print(f"\nData path: veth underlay MTU 1500, tunnel TAP MTU 1428, {args.cipher}, {mode}, iperf3 {args.duration:g} s, {args.rounds} round(s)\n")
    head = f"| {'metric':22} | {'tunnel (per round)':24} | {'underlay (per round)':24} | tunnel / underlay |"
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for metric, values in rows.items():
        t, u = values["tunnel"], values["underlay"]
        tm, um = statistics.mean(t), statistics.mean(u)
        ratio = f"{tm / um:.2f}" if um else "-"
        if metric.startswith("ping"):
            ratio += f" (+{tm - um:.3f} ms)"
        print(f"| {metric:22} | {' / '.join(f'{x:.3f}' if x < 10 else f'{x:.0f}' for x in t):24} | "
              f"{' / '.join(f'{x:.3f}' if x < 10 else f'{x:.0f}' for x in u):24} | {ratio:17} |")
    print()
    for note in cpu_notes:
        print("  " + note)
    print(f"  drops: sender {sa['drops'] or 'none'}, receiver {sb['drops'] or 'none'}")


def offload_part(args: argparse.Namespace) -> None:
    """TAP offloads on against off (the baseline) in one run, rounds interleaved: one TCP stream each,
    with what it costs per GB delivered: CPU of each end, TAP reads and writes, records."""
    modes = {"offloads off": ["--no-offload"], "offloads on": [], "on, with TSO": ["--tso"]}
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with VethTestbed(unique_prefix()) as tb:
        for _ in range(args.rounds):
            for mode, extra in modes.items():
                with tempfile.TemporaryDirectory(prefix="evt-bench-") as d:
                    a, b = start_pair(tb, Path(d), ["--cipher", args.cipher, *extra])
                    try:
                        sa0, sb0 = a.stats(), b.stats()
                        ca0, cb0 = cpu_seconds(a.pid), cpu_seconds(b.pid)
                        t1 = iperf(tb.a.netns, tb.b.netns, TUN_B, args.duration, 1)
                        ca, cb = cpu_seconds(a.pid) - ca0, cpu_seconds(b.pid) - cb0
                        sa, sb = a.stats(), b.stats()
                    finally:
                        a.stop()
                        b.stop()
                gb = max(sb["rx_bytes"] - sb0["rx_bytes"], 1) / 1e9
                runs[mode].append({
                    "mbit": t1["mbit"],
                    "cpu_a": ca / gb, "cpu_b": cb / gb,
                    "reads": (sa["tap_reads"] - sa0["tap_reads"]) / gb,
                    "records": (sa["tx_frames"] - sa0["tx_frames"]) / gb,
                    "writes": (sb["tap_writes"] - sb0["tap_writes"]) / gb,
                    "gso": (sa["gso_reads"] - sa0["gso_reads"]) / gb,
                    "gro": (sb["gro_writes"] - sb0["gro_writes"]) / gb,
                    "drops": sum(sa["drops"].values()) + sum(sb["drops"].values()),
                })
    print(f"\nTAP offloads, one TCP stream A -> B, iperf3 {args.duration:g} s, {args.rounds} round(s) interleaved; "
          "per GB received by B\n")
    print("| mode | Mbit/s (each round) | CPU s/GB sender / receiver | TAP reads/GB at A (super-frames) "
          "| records/GB | TAP writes/GB at B (super-frames) | drops |")
    print("|---|---|---|---|---|---|---|")
    med: dict[str, dict[str, float]] = {}
    for mode, rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        med[mode] = m
        mbits = " / ".join(format(r["mbit"], ".0f") for r in rs)
        print(f"| {mode} | {mbits} | {m['cpu_a']:.2f} / {m['cpu_b']:.2f} "
              f"| {m['reads']:.0f} ({m['gso']:.0f}) | {m['records']:.0f} | {m['writes']:.0f} ({m['gro']:.0f}) "
              f"| {sum(r['drops'] for r in rs):.0f} |")
    off, on = med["offloads off"], med["offloads on"]
    print(f"| on / off | {on['mbit'] / off['mbit']:.2f} | {on['cpu_a'] / off['cpu_a']:.2f} / {on['cpu_b'] / off['cpu_b']:.2f} "
          f"| {on['reads'] / off['reads']:.3f} | {on['records'] / off['records']:.2f} | {on['writes'] / off['writes']:.3f} | |")


NAT_PAIRS = (("eim", "eim"), ("eim", "symmetric"))  # a direct tunnel; one through the TURN relay


@dataclass
class SetupRun:
    """Setup trials of one NAT pair: seconds from the initiator's connect() until both sides are up,
    from the offer until traffic can flow at the answering side, and the paths the tunnels took."""

    nats: tuple[str, str]
    times: list[float] = field(default_factory=list)
    answering: list[float] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)


def measure_setup(trials: int, nats: tuple[str, str], trees: dict[str, str] | None = None) -> dict[str, SetupRun]:
    """`trials` tunnels per tree set up between the two nodes of a fresh 2-node lab behind NATs `nats`.

    ``trees``: label -> checkout whose evio the endpoints run (PYTHONPATH); trials alternate between
    them (ABBA) in the same lab. Without it, this checkout only, labelled "this tree"."""
    from evio.lab.lab import Lab
    from evio.testing.labs import unique_lab_name

    trees = trees or {"this tree": str(REPO)}
    runs = {label: SetupRun(nats) for label in trees}
    order = list(trees.items())
    with Lab.up(unique_lab_name(), nodes=2, nat=list(nats)) as lab, tempfile.TemporaryDirectory(prefix="evt-bench-") as d:
        n1, n2 = lab.node(1), lab.node(2)
        pub = lab.public
        common = ["--stun", f"{pub.address}:{pub.stun_port}", "--turn", f"{pub.address}:{pub.stun_port}", "--turn-secret", pub.turn_secret]
        for trial in range(trials * len(order)):
            label, tree = order[::-1 if (trial // len(order)) % 2 else 1][trial % len(order)]
            run, env = runs[label], {"PYTHONPATH": tree}
            workdir = Path(d) / str(trial)
            workdir.mkdir()
            b = EndpointProcess(n2.netns, ["--node", n2.node_id, "--peer", n1.node_id, "--signal-dir", str(workdir), *common], workdir / "b.log", env)
            a = None
            try:
                b.wait_event("ready")
                a = EndpointProcess(n1.netns, ["--node", n1.node_id, "--peer", n2.node_id, "--connect", "--signal-dir", str(workdir), *common],
                                    workdir / "a.log", env)
                up_a = a.wait_event("up", timeout=20)
                up_b = b.wait_event("up", timeout=20)
                started = up_a["t"] - up_a["setup"]
                run.times.append(max(up_a["t"], up_b["t"]) - started)
                run.answering.append(up_b["setup"])
                # Up on the path that connected first; where that was the relay, the direct one may follow.
                settled = up_a
                for _ in range(15):
                    settled = a.stats()
                    if settled.get("path") == "direct":
                        break
                    time.sleep(0.1)
                first = "" if settled.get("path") == up_a["path"] else f"{up_a['path']} first, then "
                run.kinds.add(f"{first}{settled.get('path')} ({settled.get('local')} -> {settled.get('remote')})")
            finally:
                for p in (a, b):
                    if p is not None:
                        p.stop()
    return runs


def setup_part(args: argparse.Namespace) -> None:
    trees = {"baseline": args.setup_against, "this tree": str(REPO)} if args.setup_against else None
    print(f"\nSetup time in the lab ({args.setup_trials} trials each): initiator's connect() until both sides are up"
          + (f"; baseline {args.setup_against}, trials interleaved" if trees else "") + "\n")
    print("| NAT A / NAT B | tree | path (pair) | median s | min s | max s | offer -> up at the answering side, median / max s |")
    print("|---|---|---|---|---|---|---|")
    for nats in NAT_PAIRS[:1] if args.direct_only else NAT_PAIRS:
        runs = measure_setup(args.setup_trials, nats, trees)
        for label, run in runs.items():
            print(f"| {nats[0]} / {nats[1]} | {label} | {', '.join(sorted(run.kinds))} | {statistics.median(run.times):.3f} "
                  f"| {min(run.times):.3f} | {max(run.times):.3f} "
                  f"| {statistics.median(run.answering):.3f} / {max(run.answering):.3f} |")
        if trees:
            base, this = (statistics.median(runs[k].times) for k in ("baseline", "this tree"))
            base_b, this_b = (statistics.median(runs[k].answering) for k in ("baseline", "this tree"))
            print(f"| {nats[0]} / {nats[1]} | this / baseline | | {this / base:.2f} | | | {this_b / base_b:.2f} |")


def against_part(args: argparse.Namespace) -> None:
    """The Python data path of this checkout against another's (--against: the baseline, main say),
    rounds interleaved (ABBA): one TCP stream, CPU per frame at each end. ``--no-offload`` for the plain passes."""
    trees = {"baseline": args.against, "this tree": str(REPO)}
    extra = ["--cipher", args.cipher, "--datapath", "python", *(["--no-offload"] if args.no_offload else [])]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    with VethTestbed(unique_prefix()) as tb:
        for r in range(args.rounds):
            # ABBA: neither tree always runs first in a round (right after the other's teardown).
            for tree, path in list(trees.items())[:: -1 if r % 2 else 1]:
                with tempfile.TemporaryDirectory(prefix="evt-bench-") as d:
                    a, b = start_pair(tb, Path(d), extra, {"PYTHONPATH": path})
                    try:
                        fa0, fb0 = a.stats()["tx_frames"], b.stats()["rx_frames"]
                        ca0, cb0 = cpu_seconds(a.pid), cpu_seconds(b.pid)
                        t1 = iperf(tb.a.netns, tb.b.netns, TUN_B, args.duration, 1)
                        ca, cb = cpu_seconds(a.pid) - ca0, cpu_seconds(b.pid) - cb0
                        fa, fb = a.stats()["tx_frames"] - fa0, b.stats()["rx_frames"] - fb0
                    finally:
                        a.stop()
                        b.stop()
                runs[tree].append({"mbit": t1["mbit"], "us_a": ca / max(fa, 1) * 1e6, "us_b": cb / max(fb, 1) * 1e6})
    mode = "offloads off" if args.no_offload else "offloads on"
    print(f"\nPython data path, {mode}, one TCP stream A -> B, iperf3 {args.duration:g} s, {args.rounds} round(s) "
          f"interleaved; baseline: {args.against}\n")
    print("| tree | Mbit/s (each round) | CPU us/frame sender (median) | CPU us/frame receiver (median) |")
    print("|---|---|---|---|")
    med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in runs.items()}
    for tree, rs in runs.items():
        m = med[tree]
        print(f"| {tree} | {' / '.join(format(r['mbit'], '.0f') for r in rs)} | {m['us_a']:.2f} | {m['us_b']:.2f} |")
    base, this = med["baseline"], med["this tree"]
    print(f"| this / baseline | {this['mbit'] / base['mbit']:.3f} | {this['us_a'] / base['us_a']:.3f} | {this['us_b'] / base['us_b']:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per iperf3 run (default 10)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--setup-trials", type=int, default=10)
    parser.add_argument("--cipher", choices=["aes-256-gcm", "chacha20-poly1305"], default="aes-256-gcm")
    parser.add_argument("--skip-datapath", action="store_true")
    parser.add_argument("--no-mmsg", action="store_true", help="endpoints send one datagram per system call (comparison)")
    parser.add_argument("--tcp-only", action="store_true", help="only the single-stream TCP runs (quick comparisons)")
    parser.add_argument("--offload", action="store_true", help="only TAP offloads on against off, one TCP stream")
    parser.add_argument("--against", metavar="TREE", help="only this checkout's Python data path against TREE's, one TCP stream")
    parser.add_argument("--no-offload", action="store_true", help="with --against: no TAP offloads or UDP GRO (the plain passes)")
    parser.add_argument("--setup-against", metavar="TREE", help="setup trials of this checkout and TREE's, interleaved in the same labs")
    parser.add_argument("--direct-only", action="store_true", help="setup trials only with the direct NAT pair (eim / eim)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("tunnel_bench: needs root (network namespaces, TAP devices)", file=sys.stderr)
        return 2
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores shared with everything else)")
    if args.offload:
        offload_part(args)
        return 0
    if args.against:
        against_part(args)
        return 0
    if not args.skip_datapath:
        datapath_part(args)
    if args.setup_trials:
        setup_part(args)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
