#!/usr/bin/env python3
"""Where the first packet of a new flow spends its time: one timeline per path, from captures and syscalls.

    sudo .venv/bin/python benchmarks/first_packet_trace.py [--nodes 4] [--hops 1,2] [--rounds 2] [--strace]

A small ring of full nodes (as benchmarks/node_bench.py builds it). For each pair `--hops` apart: a warm-up
ping (neighbour entries fresh), the evio flows of every bridge deleted, then one ping while tcpdump runs
in the namespace of every node of the path (`-i any`: the host's overlay device, the tunnel TAPs between
bridge and daemon, the underlay) and, with `--strace`, strace follows each daemon's and each
ovs-vswitchd's recvfrom/sendto/read/write (the OpenFlow connection between them is a Unix socket: the
packet-in read, the answer written). It prints every capture line and syscall on the OpenFlow socket,
merged by time, relative to the echo request leaving the host, and then the packet-ins each switch
counted for that one echo and its reply, as `node_bench.py --first-packet` counts them.

strace slows every traced syscall (tens of microseconds), so the first RTT is printed from a run
without it as well. A benchmark aid, not a test; root only; the lab is removed at the end.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import node_bench  # noqa: E402

from evio.lab.lab import Lab  # noqa: E402
from evio.testing.labs import unique_lab_name  # noqa: E402

_STAMP = re.compile(r"^(?:\[pid\s+(\d+)\]\s+)?(\d+\.\d+)\s+(.*)$")
# An OpenFlow 1.3 message in a traced buffer: its version byte, 4, first (strace prints it "\\4").
_OPENFLOW = re.compile(r'^(recvfrom|sendto|sendmsg|recvmsg)\(\d+, .*?"\\4')


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""


def _mac(lab: Lab, index: int) -> str | None:
    device = node_bench.overlay_device(lab, index)
    if device is None:
        return None
    return lab.exec(index, ["cat", f"/sys/class/net/{device}/address"], check=False).stdout.strip().lower()


def trace_one(lab: Lab, path: list[int], use_strace: bool, flush: bool) -> tuple[float | None, list[int]]:
    a, b = path[0], path[-1]
    target = str(lab.node(b).overlay_address.ip)
    lab.exec(a, ["ping", "-c", "2", "-i", "0.2", "-W", "2", target], check=False)
    nodes = [n.index for n in lab.nodes]
    for index in nodes:
        lab.ovs(index).ofctl("del-flows", node_bench.bridge_of(lab, index), f"cookie={node_bench.EVIO_COOKIE}")
    if flush:  # a flow new as after an idle spell: no datapath flow left from the warm-up either
        for index in nodes:
            print(f"  node{index} dpctl/del-flows: {node_bench.ovs_appctl(lab, index, 'dpctl/del-flows').strip() or 'done'}", flush=True)
    before = node_bench.settled_packet_ins(lab, nodes)
    macs = [_mac(lab, a), _mac(lab, b)]
    for index in (a, b):
        for line in node_bench.ovs_appctl(lab, index, "dpctl/dump-flows").splitlines():
            if any(mac and mac in line for mac in macs):
                print(f"  node{index} datapath flow before the ping: {line[:300]}", flush=True)
    snoops = []
    for index in (a, b):  # the OpenFlow conversation of each end's bridge, decoded by OVS
        ovs = lab.ovs(index)
        argv = ["stdbuf", "-oL", "ovs-ofctl", "-O", "OpenFlow13", "snoop",
                f"unix:{ovs.run_dir / node_bench.bridge_of(lab, index)}.snoop"]
        snoops.append((index, subprocess.Popen(argv, env=ovs.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               text=True)))
    captures = []
    for index in path:
        argv = ["ip", "netns", "exec", lab.netns(index), "tcpdump", "-i", "any", "-n", "-l", "-tt", "-e",
                "--time-stamp-precision=micro", "not tcp and not (udp port 53)"]
        captures.append((index, _spawn(argv)))
    straces = []
    if use_strace:
        for index in path:
            record = lab.daemon(index)
            vswitchd = lab.ovs(index).pid("ovs-vswitchd")
            for who, pid in (("daemon", record.pid if record else None), ("vswitchd", vswitchd)):
                if pid is None:
                    continue
                argv = ["strace", "-f", "-ttt", "-e", "trace=recvfrom,sendto,sendmsg,recvmsg", "-s", "12", "-p", str(pid)]
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                straces.append((f"node{index} {who}", proc))
    time.sleep(1.5)  # tcpdump and strace attached
    out = lab.exec(a, ["ping", "-c", "1", "-W", "2", target], check=False).stdout
    time.sleep(0.5)
    events: list[tuple[float, str]] = []
    for index, proc in captures:
        for line in _stop(proc).splitlines():
            stamp, _, rest = line.partition(" ")
            try:
                events.append((float(stamp), f"node{index} cap  {rest[:150]}"))
            except ValueError:
                continue
    for who, proc in straces:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        for line in (err or "").splitlines():
            m = _STAMP.match(line)
            if m and _OPENFLOW.search(m.group(3)):
                events.append((float(m.group(2)), f"{who} tid {m.group(1) or '-'}  {m.group(3)[:110]}"))
    events.sort()
    start = next((t for t, text in events if "ICMP echo request" in text and f"node{a} cap" in text), None)
    if start is None and events:
        start = events[0][0]
    for stamp, text in events:
        print(f"  {1000 * (stamp - (start or stamp)):9.3f} ms  {text}", flush=True)
    times = node_bench._times(out)
    after = node_bench.settled_packet_ins(lab, nodes)
    for index, proc in snoops:
        for line in _stop(proc).splitlines():
            if any(word in line for word in ("OFPT_PACKET_IN", "OFPT_FLOW_MOD", "OFPT_PACKET_OUT", "ADD ", "DEL",
                                            "in_port", "icmp", "arp", "dl_")):
                print(f"  node{index} snoop: {line[:260]}", flush=True)
    return (times[0] if times else None), [x - y for x, y in zip(after, before, strict=True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4, help="ring size (default 4)")
    ap.add_argument("--hops", default="1,2", help="overlay hops between the pairs traced (default 1,2)")
    ap.add_argument("--rounds", type=int, default=2, help="traces per pair (default 2)")
    ap.add_argument("--strace", action="store_true", help="also the OpenFlow socket's syscalls (slows them)")
    ap.add_argument("--flush", choices=("no", "yes", "both"), default="both",
                    help="delete the datapath flows too before each first ping (default both: each round twice)")
    ap.add_argument("--transit", choices=("on", "off"), default="on", help="tunnel.transit (default on)")
    args = ap.parse_args()
    topology = {"successors": 1, "long_distance": 0, "on_demand": {"enabled": False}}
    tunnel = {"offload": True, "datapath": "auto", "transit": args.transit == "on"}
    print(f"load average at start: {node_bench.load_average():.2f}", flush=True)
    with Lab.up(unique_lab_name(), nodes=args.nodes, nat="eim", topology=topology, tunnel=tunnel, daemons=True) as lab:
        topo = node_bench.wait_stable(lab, timeout=60 + 4 * args.nodes)
        for hops in [int(x) for x in args.hops.split(",") if x.strip()]:
            pair = node_bench.pair_with_hops(lab, topo, hops)
            if pair is None:
                print(f"no pair {hops} hops apart", flush=True)
                continue
            path = node_bench.path_of(lab, topo, *pair)
            for round_no in range(1, args.rounds + 1):
                print(f"path {' -> '.join(f'node{i}' for i in path)}, round {round_no}, load "
                      f"{node_bench.load_average():.2f}:", flush=True)
                for flush in {"no": [False], "yes": [True], "both": [False, True]}[args.flush]:
                    first, asked = trace_one(lab, path, args.strace, flush)
                    print(f"  first RTT {first} ms (traced, datapath flows {'flushed' if flush else 'kept'}); "
                          f"packet-ins per node {asked}", flush=True)
                plain = node_bench.first_packet(lab, path)
                if plain is not None:
                    print(f"  untraced: first RTT {plain[0]:.3f} ms, later {plain[1]:.3f} ms, packet-ins "
                          f"{'/'.join(map(str, plain[2]))} (later {'/'.join(map(str, plain[3])) or 'none'})",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
