#!/usr/bin/env python3
"""Where the pairs of an all-pairs ping are lost, right after the ring closes (issue 23).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/pingall_lab.py [--nodes 32] [--rounds 2] [--timeout 2] [--idle 15] [--trust]

A lab of --nodes full nodes behind mixed NATs (the daemon's defaults). As soon as successor links close
the ring, `evio lab pingall` runs --rounds times. Around each round every daemon's status is read, and
what changed is printed summed over the daemons: link events (links up and down: a ring still
settling), switch drops by reason (the budgets of the switch: packet-ins, floods, learning), FRB errors,
per-port drops, packet-ins and broadcasts. A failed pair is then pinged again with a long timeout, to
tell a pair that is slow (the answer came late) from one that is lost. The host's neighbour tables
are shared by every namespace: a round that fills them loses pairs (decision 0058), so that is counted too. The load average is printed
beside every round. With --trust the overlay has a CA whose node certificates name each node's address, so every
switch answers the first ARP for a member's address itself (decision 0062); without it, an address is answered
locally only once its owner answered a flooded request (decision 0056). Root only; the lab is removed at the end, also on failure. A benchmark: it asserts
nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import scale_lab  # noqa: E402

from evio.cli.lab_node_cmd import all_pairs_ping, wait_ring  # noqa: E402
from evio.lab.lab import Lab  # noqa: E402
from evio.node.control_client import ControlError  # noqa: E402


def counters(lab: Lab) -> collections.Counter[str]:
    """The daemons' counters that can explain a lost frame, summed over the daemons."""
    total: collections.Counter[str] = collections.Counter()
    for node in lab.nodes:
        try:
            status = lab.daemon_status(node.index)
        except ControlError:  # a daemon too busy to answer is itself a finding
            total["status unanswered"] += 1
            continue
        for overlay in status.get("overlays", {}).values():
            events = overlay.get("link_events", {})
            total["link up events"] += events.get("up", 0)
            total["link down events"] += events.get("down", 0)
            for key, value in overlay.get("switch", {}).items():
                if isinstance(value, dict):  # packet_ins_by_kind
                    for kind, count in value.items():
                        total[f"switch {key} {kind}"] += count
                else:
                    total[f"switch {key}"] += value
            for kind, count in overlay.get("broadcasts", {}).get("by_ethertype", {}).items():
                total[f"broadcasts received {kind}"] += count
            trust = overlay.get("trust") or {}
            for flood in ("revocation_flood", "member_list_flood"):
                for key, value in (trust.get(flood) or {}).get("counts", {}).items():
                    total[f"{flood} {key}"] += value
            for group in ("drops", "frb_errors", "segment_errors"):
                for reason, value in overlay.get(group, {}).items():
                    total[f"{group} {reason}"] += value
            for _port, drops in overlay.get("port_drops", {}).items():
                for reason, value in drops.items():
                    total[f"port_drops {reason}"] += value
            total["broadcasts received"] += overlay.get("broadcasts", {}).get("received", 0)
            transit = overlay.get("transit", {})
            if isinstance(transit, dict):
                for key, value in transit.items():
                    if isinstance(value, int):
                        total[f"transit {key}"] += value
    return total


def packet_ins(lab: Lab) -> dict[int, int]:
    """Each switch's packet-ins so far (node index -> count); a daemon that does not answer is left out."""
    counts = {}
    for node in lab.nodes:
        try:
            overlays = lab.daemon_status(node.index).get("overlays", {})
        except ControlError:
            continue
        counts[node.index] = sum(o.get("switch", {}).get("packet_ins", 0) for o in overlays.values())
    return counts


def spread(values: list[float]) -> str:
    """min / median / p90 / max of `values`."""
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{ordered[0]:.1f} / {statistics.median(ordered):.1f} / {p90:.1f} / {ordered[-1]:.1f}"


def print_cpu(split: scale_lab.Split) -> None:
    """CPU per process kind over the round (% of one core per process, and in all), with its busiest threads."""
    for kind, (count, share, wakeups, threads) in split.items():
        top = sorted(threads.items(), key=lambda item: -item[1][0])[:4]
        names = ", ".join(f"{name} {cpu:.1f}" for name, (cpu, _) in top)
        print(f"    {kind:<13} {count:>3} x {share:5.1f} % = {count * share / 100:5.2f} cores, "
              f"{wakeups:6.0f} wake-ups/s each; threads: {names}")


def host_table_fulls() -> int:
    """Times this host's kernel could not make a neighbour entry (ARP and NDP; every namespace shares
    the tables, decision 0058): summed over the CPUs' rows of /proc/net/stat/{arp,ndisc}_cache."""
    total = 0
    for name in ("arp_cache", "ndisc_cache"):
        lines = Path("/proc/net/stat", name).read_text().split("\n")
        column = lines[0].split().index("table_fulls")
        total += sum(int(line.split()[column], 16) for line in lines[1:] if line.strip())
    return total


def log_sizes(lab: Lab) -> dict[int, int]:
    return {node.index: lab.daemon_log(node.index).stat().st_size for node in lab.nodes}


def links_down(lab: Lab, since: dict[int, int]) -> collections.Counter[str]:
    """Why links went down since `since` (each daemon's log: "link down peer=... (REASON, was KIND)")."""
    reasons: collections.Counter[str] = collections.Counter()
    for node in lab.nodes:
        with lab.daemon_log(node.index).open("rb") as log:
            log.seek(since.get(node.index, 0))
            for line in log.read().decode(errors="replace").splitlines():
                if " link down peer=" in line and "(" in line:
                    reasons[line.rsplit("(", 1)[1].rstrip(")")] += 1
    return reasons


def delta(before: collections.Counter[str], after: collections.Counter[str]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in sorted(set(before) | set(after)) if after[key] != before[key]}


def retry(lab: Lab, failed: tuple[str, ...], timeout: float) -> tuple[int, list[float]]:
    """Ping each failed pair again with a long timeout: how many answer, and their times (ms)."""
    by_name = {node.name: node for node in lab.nodes}
    answered, times = 0, []
    for pair in failed:
        a, b = (by_name[name] for name in pair.split("->"))
        done = lab.exec(a.index, ["ping", "-c", "1", "-W", f"{timeout:g}", str(b.overlay_address.ip)], check=False,
                        timeout=timeout + 10)
        if done.returncode == 0:
            answered += 1
            for word in done.stdout.split():
                if word.startswith("time="):
                    times.append(float(word[5:]))
    return answered, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2.0, help="per ping, as `evio lab pingall` (default 2)")
    parser.add_argument("--name", default="pa")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds measured with no ping after the rounds")
    parser.add_argument("--trust", action="store_true", help="an overlay CA; certificates name the nodes' addresses")
    args = parser.parse_args()
    lab = Lab.up(args.name, nodes=args.nodes, nat="mixed", daemons=True, trust=args.trust)
    try:
        started = time.monotonic()
        _, closed = wait_ring(lab, 60.0 + 4.0 * args.nodes)
        print(f"n={args.nodes}{' trust' if args.trust else ''}: ring {'closed' if closed else 'NOT closed'} {time.monotonic() - started:.1f} s after "
              f"the daemons were ready (load average {os.getloadavg()[0]:.1f})", flush=True)
        kinds = scale_lab.processes_by_kind(lab)
        for round_ in range(1, args.rounds + 1):
            before, sizes, fulls = counters(lab), log_sizes(lab), host_table_fulls()
            switches, cpu, round_started = packet_ins(lab), scale_lab.counters(kinds), time.monotonic()
            load = os.getloadavg()[0]
            summary = all_pairs_ping(lab, 1, args.timeout)
            seconds = time.monotonic() - round_started
            cpu_split = scale_lab.split_cpu(kinds, cpu, scale_lab.counters(kinds), seconds)
            switched = packet_ins(lab)
            after = counters(lab)
            print(f"\nround {round_} (load average {load:.1f} before, {os.getloadavg()[0]:.1f} after): {summary.text()}")
            print(f"  RTT ms, min / median / p90 / max: {spread(list(summary.rtts_ms))}")
            per_second = [(switched[i] - switches[i]) / seconds for i in switched if i in switches]
            print(f"  packet-ins per switch per second, min / median / p90 / max: {spread(per_second)}")
            print(f"  CPU over the round's {seconds:.1f} s (status reads included):")
            print_cpu(cpu_split)
            by_source = collections.Counter(pair.split("->")[0] for pair in summary.failed)
            by_target = collections.Counter(pair.split("->")[1] for pair in summary.failed)
            print(f"  failed pairs by source: {dict(by_source.most_common(6))}; by target: {dict(by_target.most_common(6))}")
            print("  counters that changed during the round, summed over the daemons:")
            for key, value in delta(before, after).items():
                print(f"    {key:<44} {value:>8}")
            print(f"  links down, why (daemon logs): {dict(links_down(lab, sizes).most_common())}")
            print(f"  neighbour entries the host's kernel could not make (table full): {host_table_fulls() - fulls}")
            if summary.failed:
                answered, times = retry(lab, summary.failed, 10.0)
                shown: Any = sorted(times)[-5:]
                print(f"  the {len(summary.failed)} failed pairs again, one ping of up to 10 s each: {answered} answered"
                      f"; slowest {shown} ms (load average {os.getloadavg()[0]:.1f})", flush=True)
        if args.idle > 0:  # the same counters with no ping: what the overlay costs by itself
            before, switches, cpu = counters(lab), packet_ins(lab), scale_lab.counters(kinds)
            time.sleep(args.idle)
            cpu_split = scale_lab.split_cpu(kinds, cpu, scale_lab.counters(kinds), args.idle)
            switched, after = packet_ins(lab), counters(lab)
            per_second = [(switched[i] - switches[i]) / args.idle for i in switched if i in switches]
            print(f"\nidle for {args.idle:g} s, no ping (load average {os.getloadavg()[0]:.1f}): packet-ins per switch "
                  f"per second, min / median / p90 / max: {spread(per_second)}")
            print_cpu(cpu_split)
            for key, value in delta(before, after).items():
                print(f"    {key:<44} {value:>8}")
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
