#!/usr/bin/env python3
"""Signaling messages through the server per link set up, offers through the server against along the ring (0067).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/ring_signal_bench.py [--nodes 8] [--restarts 2]

Two labs of --nodes full nodes in trust mode behind mixed NATs, the daemon's default topology, one after
the other: first with `trust.offers_over_overlay: false` (every link request and tunnel offer through the
XMPP server, as before decision 0067), then with it on. In each: the ring closes and the links settle,
then --restarts nodes are restarted one at a time (each rejoins an overlay that has links), and the links
settle again. Each daemon counts the requests and responses it sent through the server by action
(`signal.messages` of `evio status`), and the link requests and offers that went along the ring
(`signal.ring`). Printed per lab: links set up (tunnels up, summed over the nodes, halved), the messages
through the server and per link, those of setting links up (link requests, offers and their answers), the
ring's share, and the ratio between the two labs, with the host's load. Root only; each lab is removed at
the end, also on failure or Ctrl-C. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.cli.lab_node_cmd import wait_ring  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402

SETUP_ACTIONS = ("overlay.link", "tunnel.offer")


def overlay_doc(lab: Lab, index: int) -> dict[str, Any]:
    doc: dict[str, Any] = lab.daemon_status(index, timeout=15.0)["overlays"][lab.plan.overlay]
    return doc


def settle(lab: Lab, quiet: float, timeout: float) -> None:
    """Until no node's tunnel count changed for `quiet` seconds (or `timeout`)."""
    last: tuple[int, ...] = ()
    since = time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        now = tuple(overlay_doc(lab, n.index)["tunnels"]["up"] for n in lab.nodes)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(2.0)


def totals(lab: Lab) -> dict[str, float]:
    out: dict[str, float] = {"links": 0, "messages": 0, "setup_requests": 0, "responses": 0, "ring": 0,
                             "ring_served": 0, "fallbacks": 0, "requests_in_setup": 0}  # fmt: skip
    for node in lab.nodes:
        doc = overlay_doc(lab, node.index)
        out["links"] += doc["tunnels"]["up"] / 2
        messages = doc["signal"]["messages"]
        out["messages"] += sum(messages["out"].values())
        out["responses"] += messages["out"].get("response", 0)
        out["setup_requests"] += sum(messages["out"].get(a, 0) for a in SETUP_ACTIONS)
        out["requests_in_setup"] += sum(messages["requests_in"].get(a, 0) for a in SETUP_ACTIONS)
        ring = doc["signal"].get("ring") or {}
        out["ring"] += ring.get("sent", {}).get("ring", 0)
        out["ring_served"] += sum(ring.get("served", {}).values())
        out["fallbacks"] += sum(ring.get("fallbacks", {}).values())
    return out


def run(name: str, nodes: int, restarts: int, over_overlay: bool) -> dict[str, float]:
    started = time.monotonic()
    lab = Lab.up(name, nodes=nodes, nat="mixed", daemons=True, trust=True,
                 trust_options={"offers_over_overlay": over_overlay})  # fmt: skip
    try:
        topo, closed = wait_ring(lab, 60.0 + 10.0 * nodes)
        if not closed:
            print(f"  ring not closed: gaps {topo.ring_gaps()}", flush=True)
        settle(lab, quiet=15.0, timeout=120.0)
        for index in range(1, 1 + restarts):
            lab.stop_daemon(index)
            lab.start_daemon(index)
            wait_ring(lab, 60.0)
            settle(lab, quiet=15.0, timeout=120.0)
        result = totals(lab)
        result["seconds"] = time.monotonic() - started
        result["load"] = os.getloadavg()[0]
        return result
    finally:
        Lab.down(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--restarts", type=int, default=2, help="nodes restarted one at a time once the ring is up")
    parser.add_argument("--name", default="i24rs")
    parser.add_argument("--only", choices=("before", "after"), help="one lab only (no ratio)")
    args = parser.parse_args()
    results = {}
    labs = (("through the server", False), ("along the ring", True))
    for label, on in labs:
        if args.only and on != (args.only == "after"):
            continue
        r = results[label] = run(args.name, args.nodes, args.restarts, on)
        links = max(r["links"], 1.0)
        setup_messages = r["setup_requests"] + r["requests_in_setup"]  # each request through it is answered once
        print(f"offers {label}: {r['links']:.0f} links up, {r['messages']:.0f} messages through the server "
              f"({r['messages'] / links:.2f} per link), setting links up {setup_messages:.0f} "
              f"({setup_messages / links:.2f} per link); along the ring {r['ring']:.0f} requests answered, "
              f"{r['fallbacks']:.0f} fell back; {r['seconds']:.0f} s, load {r['load']:.1f}", flush=True)
    if args.only:
        return 0
    before, after = results["through the server"], results["along the ring"]

    def per_link(r: dict[str, float], key: str) -> float:
        value = r["messages"] if key == "all" else r["setup_requests"] + r["requests_in_setup"]
        return value / max(r["links"], 1.0)

    for key in ("all", "setup"):
        b, a = per_link(before, key), per_link(after, key)
        print(f"{key} messages per link: {b:.2f} -> {a:.2f}: {b / a if a else float('inf'):.1f}x fewer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
