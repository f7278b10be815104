#!/usr/bin/env python3
"""Signaling messages through the server per link set up, offers through the server against along the ring (0064).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/ring_signal_bench.py [--nodes 8] [--restarts 2]

Two labs of --nodes full nodes in trust mode behind mixed NATs, the daemon's default topology, one after
the other: first with `trust.offers_over_overlay: false` (every link request and tunnel offer through the
XMPP server, as before decision 0064), then with it on. In each: the ring closes and the links settle,
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
import collections
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.cli.lab_node_cmd import wait_ring  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402
from evio.node.control_client import ControlError  # noqa: E402

SETUP_ACTIONS = ("overlay.link", "tunnel.offer")


def overlay_doc(lab: Lab, index: int) -> dict[str, Any]:
    """The node's overlay status; a daemon just restarted is waited for (up to a minute)."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            doc: dict[str, Any] = lab.daemon_status(index, timeout=15.0)["overlays"][lab.plan.overlay]
            return doc
        except (ControlError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


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


def snapshot(lab: Lab) -> dict[int, dict[str, Any]]:
    return {n.index: overlay_doc(lab, n.index) for n in lab.nodes}


def totals(docs: dict[int, dict[str, Any]], before: dict[int, dict[str, Any]] | None = None,
           restarted: frozenset[int] = frozenset()) -> dict[str, Any]:
    """Summed over the nodes; with `before`, what changed since (a restarted node's counters began anew)."""
    out: dict[str, Any] = {"links": 0.0, "messages": 0, "setup_requests": 0, "requests_in_setup": 0, "ring": 0,
                           "fallbacks": collections.Counter()}  # fmt: skip
    for index, doc in docs.items():
        prior = before.get(index) if before is not None and index not in restarted else None
        for key, value in counts(doc).items():
            was = counts(prior)[key] if prior is not None else (collections.Counter() if key == "fallbacks" else 0)
            out[key] += value - was
    out["links"] /= 2
    return out


def counts(doc: dict[str, Any]) -> dict[str, Any]:
    messages = doc["signal"]["messages"]
    ring = doc["signal"].get("ring") or {}
    return {
        "links": doc["tunnels"]["up"],
        "messages": sum(messages["out"].values()),
        "setup_requests": sum(messages["out"].get(a, 0) for a in SETUP_ACTIONS),
        "requests_in_setup": sum(messages["requests_in"].get(a, 0) for a in SETUP_ACTIONS),
        "ring": ring.get("sent", {}).get("ring", 0),
        "fallbacks": collections.Counter(ring.get("fallbacks", {})),
    }


def run(name: str, nodes: int, restarts: int, over_overlay: bool) -> dict[str, dict[str, Any]]:
    started = time.monotonic()
    lab = Lab.up(name, nodes=nodes, nat="mixed", daemons=True, trust=True,
                 trust_options={"offers_over_overlay": over_overlay})  # fmt: skip
    try:
        topo, closed = wait_ring(lab, 60.0 + 10.0 * nodes)
        if not closed:
            print(f"  ring not closed: gaps {topo.ring_gaps()}", flush=True)
        settle(lab, quiet=15.0, timeout=120.0)
        formed = snapshot(lab)
        results = {"formation": totals(formed)}
        results["formation"]["seconds"] = time.monotonic() - started
        restarted = frozenset(range(1, 1 + restarts))
        for index in sorted(restarted):
            lab.stop_daemon(index)
            lab.start_daemon(index)
            wait_ring(lab, 60.0)
            settle(lab, quiet=15.0, timeout=120.0)
        results["restarts"] = totals(snapshot(lab), formed, restarted)
        results["restarts"]["seconds"] = time.monotonic() - started
        for phase in results.values():
            phase["load"] = os.getloadavg()[0]
        return results
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
        results[label] = run(args.name, args.nodes, args.restarts, on)
        for phase, r in results[label].items():
            links = max(r["links"], 1.0)
            setup = r["setup_requests"] + r["requests_in_setup"]  # each request through it is answered once
            print(f"offers {label}, {phase}: {r['links']:.0f} links up, {r['messages']} messages through the server "
                  f"({r['messages'] / links:.2f} per link), setting links up {setup} ({setup / links:.2f} per link);"
                  f" along the ring {r['ring']} requests answered, fell back {dict(r['fallbacks'])};"
                  f" {r['seconds']:.0f} s, load {r['load']:.1f}", flush=True)
    if args.only:
        return 0
    for phase in ("formation", "restarts"):
        before, after = results["through the server"][phase], results["along the ring"][phase]
        for key in ("messages", "setup"):
            b, a = (per_link(r, key) for r in (before, after))
            print(f"{phase}: {key} per link {b:.2f} -> {a:.2f}: {b / a if a else float('inf'):.1f}x fewer")
    return 0


def per_link(r: dict[str, Any], key: str) -> float:
    value = r["messages"] if key == "messages" else r["setup_requests"] + r["requests_in_setup"]
    return float(value) / max(r["links"], 1.0)


if __name__ == "__main__":
    sys.exit(main())
