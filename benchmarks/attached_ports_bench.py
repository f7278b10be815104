#!/usr/bin/env python3
"""Containers behind attached ports against their nodes: TCP over the same overlay path (issue 23).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/attached_ports_bench.py [--rounds 3] [--seconds 5]

A 2-node lab behind endpoint-independent NATs (a direct tunnel), real daemons. On each node a
"container" (a network namespace on a veth, the overlay's MTU, attached with `evio attach`: the
recipe of docs/operations.md). Rounds alternate an iperf3 TCP run from node1 to node2's overlay
address and one from container 1 to container 2, so both see the same load; the medians and their
ratio are printed with the load average. Target: the containers at >= 90 % of the nodes' rate.
Root only; the lab and the namespaces are removed at the end, also on failure or Ctrl-C. A
benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from ipaddress import IPv4Interface
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.lab.iperf import parse_tcp_report, tcp_run  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402
from evio.testing.labs import unique_lab_name  # noqa: E402
from evio.testing.waiting import wait_for_value  # noqa: E402

TARGET = 0.90
PORT = 5211


def container(lab: Lab, index: int, netns: str, address: IPv4Interface) -> None:
    """docs/operations.md's container recipe on node `index`, the veth named vc<index>."""
    evio = " ".join([*lab.evio_command(index)])
    # sysfs as the node sees it (`ip netns exec` mounts its own); the recipe itself runs by nsenter, so the
    # namespace `ip netns add` makes outlives the shell (under `ip netns exec` its mount would not).
    mtu = subprocess.run(["ip", "netns", "exec", lab.netns(index), "cat", "/sys/class/net/evbr-ov1/mtu"],
                         check=True, capture_output=True, text=True).stdout.strip()
    script = f"""
        MTU={mtu}
        ip netns add {netns}
        ip link add vc{index} mtu $MTU type veth peer name eth0 mtu $MTU netns {netns}
        ip -n {netns} link set eth0 up
        ip -n {netns} address add {address} dev eth0
        {evio} attach ov1 vc{index} --config {lab.node(index).config_path}
    """
    subprocess.run(["nsenter", f"--net=/run/netns/{lab.netns(index)}", "sh", "-ec", script], check=True,
                   capture_output=True)


def container_run(client_ns: str, server_ns: str, server: IPv4Interface, seconds: float) -> float | None:
    """Mbit/s of one iperf3 TCP run between two container namespaces (None if it failed)."""
    address = str(server.ip)
    listener = subprocess.Popen(["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", address, "-p", str(PORT)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not subprocess.run(["ip", "netns", "exec", server_ns, "ss", "-Htln", f"sport = :{PORT}"],
                                 capture_output=True, text=True).stdout.strip():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        done = subprocess.run(["ip", "netns", "exec", client_ns, "iperf3", "-c", address, "-p", str(PORT),
                               "-t", f"{seconds:g}", "-J"], capture_output=True, text=True, timeout=seconds + 30)
        run = parse_tcp_report(done.stdout)
        return run.mbit if run is not None else None
    finally:
        listener.kill()
        listener.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    name = unique_lab_name()
    namespaces = [f"attach-{name}-c1", f"attach-{name}-c2"]
    addresses = [IPv4Interface("10.254.0.201/16"), IPv4Interface("10.254.0.202/16")]
    load_before = os.getloadavg()
    lab = Lab.up(name, nodes=2, nat="eim", daemons=True)
    try:
        wait_for_value(lab.topology, lambda t: any(link.state == "up" and link.port is not None for link in t.links),
                       60, what="a link on both bridges")
        for index in (1, 2):
            container(lab, index, namespaces[index - 1], addresses[index - 1])
        nodes, containers = [], []
        for _ in range(args.rounds):
            node_run = tcp_run(lab, 1, 2, args.seconds, role="iperf3-attach-bench")
            nodes.append(node_run.mbit if node_run is not None else float("nan"))
            containers.append(container_run(namespaces[0], namespaces[1], addresses[1], args.seconds) or float("nan"))
        node_mbit, container_mbit = statistics.median(nodes), statistics.median(containers)
        ratio = container_mbit / node_mbit if node_mbit else float("nan")
        load_after = os.getloadavg()
        print(f"node1 -> node2 (overlay addresses): {' '.join(f'{m:.0f}' for m in nodes)} Mbit/s, median {node_mbit:.0f}")
        print(f"container1 -> container2 (attached veths): {' '.join(f'{m:.0f}' for m in containers)} Mbit/s, "
              f"median {container_mbit:.0f}")
        print(f"containers / nodes: {ratio:.2f} (target >= {TARGET:.2f}: {'met' if ratio >= TARGET else 'NOT met'})")
        print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min; {os.cpu_count()} cores)")
        for index in (1, 2):
            ports = lab.daemon_status(index)["overlays"]["ov1"]["attached_ports"]
            print(f"node{index} attached ports: " + ", ".join(
                f"{p}: rx {d['rx']['bytes'] / 1e9:.2f} GB, tx {d['tx']['bytes'] / 1e9:.2f} GB" for p, d in ports.items()))
    finally:
        for netns in namespaces:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        Lab.down(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
