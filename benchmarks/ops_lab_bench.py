"""`evio status` and metrics scrape latency on a real node with 16 links, in the lab (root; not a test).

    .venv/bin/python benchmarks/ops_lab_bench.py [--rounds 100] [--nodes 17]

Brings up a lab of 17 full nodes (their own OVS and `evio run` daemon) with
s = 8, so every node holds 16 tunnels, enables node 1's metrics endpoint by
a config reload (SIGHUP), and times from node 1's namespace, as a client on the
node sees them: the control socket's `ping` request (the baseline) against
`status`, and an HTTP 404 (the baseline) against GET /metrics. Removes the
lab at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evio.lab import daemons as full_nodes
from evio.lab.lab import Lab
from evio.lab.node_config import node_config_path
from evio.testing.labs import unique_lab_name

CLIENT = r"""
import http.client, json, socket, sys, time
sock_path, rounds = sys.argv[1], int(sys.argv[2])
def control(request):
    s = socket.socket(socket.AF_UNIX); s.connect(sock_path)
    s.sendall(json.dumps({"request": request}).encode() + b"\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    return data
def get(path):
    c = http.client.HTTPConnection("127.0.0.1", 9470, timeout=5); c.request("GET", path)
    body = c.getresponse().read(); c.close(); return body
out = {}
for name, call in (("ping", lambda: control("ping")), ("status", lambda: control("status")),
                   ("404", lambda: get("/nope")), ("metrics", lambda: get("/metrics"))):
    call(); times = []
    for _ in range(rounds):
        t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
    out[name] = times
out["links"] = len(json.loads(control("status"))["status"]["overlays"].popitem()[1]["links"])
print(json.dumps(out))
"""


def row(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{name:38} {ordered[len(ordered) // 2] * 1000:10.2f} {p95 * 1000:8.2f} {ordered[-1] * 1000:8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=17)
    args = parser.parse_args()
    successors = (args.nodes - 1) // 2
    name = unique_lab_name()
    try:
        started = time.monotonic()
        with Lab.up(name, nodes=args.nodes, nat="mixed", topology={"successors": successors, "on_demand": {"enabled": False}},
                    daemons=True) as lab:
            overlay = lab.plan.overlay
            deadline = time.monotonic() + 600
            while True:
                counts = [sum(lab.daemon_status(n.index)["overlays"][overlay]["link_counts"].values()) for n in lab.nodes]
                if counts[0] == args.nodes - 1:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"node1 has {counts[0]} links after 600 s: {counts}")
                time.sleep(2)
            formed = time.monotonic() - started
            path = node_config_path(lab.directory, lab.plan.node(1))
            document = json.loads(path.read_text())
            document["metrics"] = {"enabled": True, "listen": "127.0.0.1:9470"}
            path.write_text(json.dumps(document))
            record = lab.daemon(1)
            assert record is not None
            os.kill(record.pid, signal.SIGHUP)
            while lab.daemon_status(1)["reloads"] < 1:
                time.sleep(0.2)
            sock = full_nodes.control_socket(lab.directory, lab.plan.node(1))
            done = lab.exec(1, [sys.executable, "-c", CLIENT, str(sock), str(args.rounds)], timeout=600)
            result = json.loads(done.stdout)
    finally:
        Lab.down(name)
    print(f"lab of {args.nodes} full nodes, s = {successors}: node1 with {result['links']} links "
          f"({formed:.0f} s to form); {args.rounds} rounds each, from node1's namespace")
    print(f"{'request':38} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    print(row("control socket: ping (baseline)", result["ping"]))
    print(row(f"control socket: status, {result['links']} links", result["status"]))
    print(row("HTTP: GET /nope, 404 (baseline)", result["404"]))
    print(row(f"HTTP: GET /metrics, {result['links']} links", result["metrics"]))


if __name__ == "__main__":
    main()
