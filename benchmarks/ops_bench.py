"""`evio status` and metrics scrape latency on a node with 16 links (not a test).

    .venv/bin/python benchmarks/ops_bench.py [--rounds 200]

Builds 17 daemons on the fake platform (in-memory signaling and links, fake
OVSDB and SDN; the daemon's own Node, overlay controller, control socket and
metrics endpoint) with s = 8, so node 1 holds 16 links, then times from another
thread, as a client process would see them:

- the control socket's `ping` request (connect, one line each way: the baseline)
  against `status` (the whole status document, what `evio status` reads);
- an HTTP request for a path that is not served (404: the baseline) against
  GET /metrics (every family built at scrape time from the status document).

The fake links carry no traffic, so the counters are zero; building the
documents costs the same. Prints median, p95 and max per row.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import http.client
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from evio.config.model import Config, NodeConfig, TopologyConfig
from evio.node.control import query
from evio.node.node import Node
from evio.node.plan import plan_node
from evio.testing.fake_node import FakeLinkHub, FakePlatform
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.node_fleet import DOMAIN, fleet_config
from evio.testing.waiting import wait_until as until

NODES = 17
SUCCESSORS = 8


def node_id(index: int) -> int:
    return index << 120  # evio.testing's nid() stops at 15 nodes


def config(index: int) -> Config:
    base = fleet_config(index)
    ov1 = dataclasses.replace(base.overlays["ov1"], topology=TopologyConfig(successors=SUCCESSORS))
    return dataclasses.replace(base, overlays={"ov1": ov1}, node=NodeConfig(id=node_id(index)))


def timed(call: Callable[[], object], rounds: int) -> list[float]:
    call()  # warm
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def http_get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return body


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sock = Path(tmp) / "control.sock"
        signal_hub, link_hub = FakeSignalHub(), FakeLinkHub()
        signal_hub.set_group("ov1", [f"node{i}@{DOMAIN}" for i in range(1, NODES + 1)])
        nodes: dict[int, Node] = {}
        for i in range(1, NODES + 1):
            platform = FakePlatform(signal_hub, link_hub, seed=i)
            plan = plan_node(config(i), node_id(i), controller_port=6653, kernel_module_loaded=False)
            if i == 1:
                plan = dataclasses.replace(plan, metrics_listen=("127.0.0.1", 0))
            nodes[i] = Node(plan, platform, control_socket=sock if i == 1 else None)
        runs = [asyncio.create_task(node.run()) for node in nodes.values()]
        await until(lambda: all(node.ready.is_set() for node in nodes.values()), 30)
        try:
            stack = nodes[1].overlays["ov1"]
            await until(lambda: sum(1 for i in stack.controller.adjacency().values() if i.state.value == "up") == 16,
                        60)
            metrics = nodes[1].metrics
            assert metrics is not None
            port = metrics.bound_port
            rows = [
                ("control socket: ping (baseline)", await asyncio.to_thread(timed, lambda: query(sock, "ping"), rounds)),
                ("control socket: status, 16 links", await asyncio.to_thread(timed, lambda: query(sock, "status"), rounds)),
                ("HTTP: GET /nope, 404 (baseline)", await asyncio.to_thread(timed, lambda: http_get(port, "/nope"), rounds)),
                ("HTTP: GET /metrics, 16 links", await asyncio.to_thread(timed, lambda: http_get(port, "/metrics"), rounds)),
            ]
            status_size = len(str(await asyncio.to_thread(query, sock, "status")))
            metrics_size = len(await asyncio.to_thread(http_get, port, "/metrics"))
        finally:
            for node in nodes.values():
                node.stop()
            await asyncio.gather(*runs, return_exceptions=True)
    print(f"node with 16 links ({NODES} nodes, s = {SUCCESSORS}), {rounds} rounds each; "
          f"status document ~{status_size} B, metrics page {metrics_size} B")
    print(f"{'request':38} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}")
    for name, values in rows:
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(f"{name:38} {statistics.median(values) * 1000:10.2f} {p95 * 1000:8.2f} {max(values) * 1000:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    logging.disable(logging.WARNING)  # the fake platform has no vswitchd to raise buffers on
    asyncio.run(main(parser.parse_args().rounds))
