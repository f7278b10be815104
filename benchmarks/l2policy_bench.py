"""TCP throughput between two full nodes with an L2 policy of 100 rules against none (issue 23: <= 5 % cost).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/l2policy_bench.py [--rounds 3] [--seconds 5] [--rules 100]

One lab of two full nodes (endpoint-independent NATs, their own Open vSwitch and daemons). Each round
runs one iperf3 TCP stream node1 -> node2 with no policy, then again after a reload has given both
nodes `--rules` rules, then takes them off again (rounds alternate, so the machine's load drifts over
both alike). The rules are what a policy of that size looks like to the switch: every one is a
table-0 flow per tunnel port or one for every port, on ports and protocols the stream does not use,
so every frame is looked up past all of them and allowed by the default. Prints each run, the
median of each mode, the ratio, and the load average beside them. A benchmark, not a test: the
figures depend on the load of the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from evio.lab.iperf import tcp_run
from evio.lab.lab import Lab
from evio.testing.labs import unique_lab_name
from evio.testing.waiting import wait_for_value

OVERLAY = "ov1"


def policy(count: int) -> list[dict[str, Any]]:
    """`count` rules that the iperf3 stream (TCP to 5201) matches none of."""
    rules: list[dict[str, Any]] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            rules.append({"name": f"r{i}", "action": "drop", "in_port": "members", "ip_proto": "tcp",
                          "dst_port": 6000 + i})
        elif kind == 1:
            rules.append({"name": f"r{i}", "action": "drop", "ip_proto": "udp", "src_port": 7000 + i})
        elif kind == 2:
            rules.append({"name": f"r{i}", "action": "drop", "eth_src": f"02:99:00:00:{i // 256:02x}:{i % 256:02x}"})
        else:
            rules.append({"name": f"r{i}", "action": "drop", "in_port": "members", "vlan": 100 + i})
    return rules


def linked(lab: Lab) -> bool:
    for index in (1, 2):
        links = lab.daemon_status(index)["overlays"][OVERLAY]["links"]
        if not any(link["state"] == "up" and link["on_bridge"] for link in links):
            return False
    return True


def set_policy(lab: Lab, rules: list[dict[str, Any]]) -> None:
    def edit(config: dict[str, Any]) -> None:
        if rules:
            config["overlays"][OVERLAY]["policy"] = rules
        else:
            config["overlays"][OVERLAY].pop("policy", None)

    lab.reload_configs(edit)
    time.sleep(1.0)  # the reload's flow changes are written at the controller's next step; let them land


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per iperf3 run (default 5)")
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--name", default=None, help="lab name (default: a unique one)")
    args = parser.parse_args()
    name = args.name or unique_lab_name()
    results: dict[str, list[float]] = {"none": [], "rules": []}
    try:
        lab = Lab.up(name, nodes=2, nat="eim", daemons=True)
        wait_for_value(lambda: linked(lab), bool, 60.0, what="the two nodes linked")
        for round_no in range(args.rounds):
            for mode in ("none", "rules"):
                set_policy(lab, policy(args.rules) if mode == "rules" else [])
                flows = lab.ovs(2).ofctl("dump-flows", f"evbr-{OVERLAY}", "table=0").count("cookie=")
                run = tcp_run(lab, 1, 2, args.seconds, role="l2policy-iperf")
                mbit = run.mbit if run is not None else 0.0
                results[mode].append(mbit)
                print(f"round {round_no + 1} {mode:5s}: {mbit:8.1f} Mbit/s  (table-0 flows on node2: {flows}; "
                      f"load {load()})", flush=True)
    finally:
        Lab.down(name)
    none, rules = statistics.median(results["none"]), statistics.median(results["rules"])
    ratio = rules / none if none else float("nan")
    print(f"TCP node1->node2, median of {args.rounds}: no policy {none:.1f} Mbit/s, {args.rules} rules "
          f"{rules:.1f} Mbit/s, ratio {ratio:.3f} (target >= 0.95); load average {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
