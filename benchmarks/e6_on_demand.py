"""E6 in the lab: TCP throughput of sampled node pairs with on-demand links off and on (paper section 5.6).

    flock /tmp/evio-heavy.lock .venv/bin/python benchmarks/e6_on_demand.py \\
        [--nodes 16] [--pairs 48] [--duration 3] [--long-distance 2] [--plot e6_on_demand.png]

One lab of full nodes (`evio lab`, daemons on, NAT `eim` so tunnels are direct),
s = 2 and k = --long-distance (the paper ran its BF+OND overlay with fewer
long-distance links than log n, k = 4 at n = 128; k = 2 at n = 16 leaves paths
of several hops to shorten). In one run:

1. the overlay forms with on-demand links disabled in every node's config;
   every node sends one ARP broadcast and each receiver's FRB hop count gives
   each pair's path length (as benchmarks/e7_path_length.py measures it);
2. --pairs ordered pairs are sampled, spread evenly over the path lengths
   (round-robin over the lengths, random within one, --seed), no pair twice;
3. *off*: one iperf3 TCP stream per pair, the first second left out (TCP's
   ramp), then --duration seconds measured;
4. every node's config is rewritten with on-demand links enabled (the
   default 1 MB/s threshold; idle timeout --idle-timeout) and reloaded (SIGHUP);
5. *on*: one stream per pair for --acquire + --duration seconds, reported
   every 0.5 s, while the pair's two daemons are asked every 0.1 s whether
   their on-demand link is up: the time from the flow's start to the link
   being up at both ends, the flow's throughput before and after, and its
   throughput over the last --duration seconds (the figure the CDF uses);
   whether the link carries the flow (the client's tunnel's sent bytes against
   the flow's, once the link is up) and over which path (direct, or relayed by
   the TURN server: with --nat mixed, pairs of symmetric NATs are relayed, and
   those are reported apart since the relay, not the overlay, caps them);
6. once the last flow stopped, every node is watched until no on-demand link
   is left: when each one went, after its own flow stopped.

Printed: the CDF of both phases as percentiles with the share of pairs at or
above the paper's 330 Mbit/s bar (paper: with BF + on-demand, about 80 %
above it; 96 % in the text), the same by path length, the on-demand link's
acquisition time and before/after throughput, the release times. Writes the
CDF plot to --plot. A benchmark, not a test: figures depend on the load of
the 2-core machine, where every intermediate node's daemon and switch share
the same cores as the endpoints. Root only; the lab is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e7_path_length import measure_lab, wait_formed  # benchmarks/ is on sys.path when run as a script

from evio.lab.daemons import Topology
from evio.lab.iperf import IPERF_PORT, server_argv, wait_listening
from evio.lab.lab import Lab
from evio.plots.cdf import draw_cdfs, percentile, share_at_least
from evio.testing.labs import unique_lab_name

PAPER_BAR_MBIT = 330.0
PAPER_SHARE_ON = 0.80  # Fig. 5's caption; the text says 96 %
PAPER_SHARE_OFF = 0.41  # BF without on-demand links, k = log n (text)
ACQUIRE_TARGET = 2.0
PERCENTILES = (0.05, 0.10, 0.20, 0.25, 0.50, 0.75, 0.90)


@dataclass
class PairRun:
    client: str
    server: str
    hops: int
    off_mbit: float | None = None
    on_mbit: float | None = None  # the last --duration seconds of the on-phase flow
    acquired: float | None = None  # seconds from flow start to the on-demand link up at both ends
    before_mbit: float | None = None  # the same flow before its link was up
    after_mbit: float | None = None  # ... and from 0.5 s after
    adjacent: bool = False  # already linked: no on-demand link to get
    path: str | None = None  # the on-demand link's path at the flow's end: direct, or relay (TURN)
    datapath: str | None = None  # the tunnel's data path: native or python
    carried: float | None = None  # share of the flow's bytes after its link was up that the link carried
    flow_ended: float | None = None  # monotonic
    released: float | None = None  # seconds from the flow's end to its link gone, seen going while watched
    gone_by: float | None = None  # already gone when first watched: released at most this long after its flow
    notes: list[str] = field(default_factory=list)


# -- the lab -------------------------------------------------------------------------------------------


def index_of(name: str) -> int:
    return int(name.removeprefix("node"))


def set_on_demand(lab: Lab, on_demand: Mapping[str, Any]) -> None:
    """Every node's config with these on-demand settings, reloaded (SIGHUP)."""
    overlay = lab.plan.overlay

    def edit(config: dict[str, Any]) -> None:
        config["overlays"][overlay].setdefault("topology", {})["on_demand"] = dict(on_demand)

    lab.reload_configs(edit)


def pair_view(lab: Lab, a: str, b: str) -> Topology:
    return lab.topology([index_of(a), index_of(b)])


def on_demand_links(topo: Topology) -> set[frozenset[str]]:
    """Pairs joined by a link some end holds as on-demand."""
    return {frozenset((link.node, link.peer)) for link in topo.links if link.type == "on_demand"}


def linked(topo: Topology, a: str, b: str) -> bool:
    return topo.adjacent(a, b)


def link_of(lab: Lab, a: str, b: str) -> dict[str, Any] | None:
    """a's link to b as a's daemon reports it."""
    peer = lab.node(index_of(b)).node_id
    links = lab.daemon_status(index_of(a))["overlays"][lab.plan.overlay]["links"]
    return next((link for link in links if link.get("peer") == peer), None)


def tx_bytes(link: Mapping[str, Any] | None) -> int | None:
    tx = link.get("tx") if link is not None else None
    return int(tx["bytes"]) if isinstance(tx, Mapping) and "bytes" in tx else None


def on_demand_up_at(lab: Lab, a: str, b: str) -> float | None:
    """When (monotonic) the link a - b came up at its later end, if it is up at both ends and on-demand
    at one. From each link's age in its daemon's status: a daemon slowed by the flow answers late,
    but the age it reports still dates the link."""
    overlay = lab.plan.overlay
    ups: list[float] = []
    on_demand = False
    for me, other in ((a, b), (b, a)):
        status = lab.daemon_status(index_of(me))
        fetched = time.monotonic()
        peer = lab.node(index_of(other)).node_id
        link = next((l for l in status["overlays"][overlay]["links"] if l.get("peer") == peer), None)
        if link is None or link.get("state") != "up" or link.get("age") is None:
            return None
        on_demand = on_demand or link.get("type") == "on_demand"
        ups.append(fetched - float(link["age"]))
    return max(ups) if on_demand else None


# -- pairs ---------------------------------------------------------------------------------------------


def sample_pairs(hops: Mapping[tuple[str, str], int], count: int, rng: random.Random) -> list[tuple[str, str, int]]:
    """`count` ordered pairs, round-robin over the path lengths (random within one), no unordered pair twice."""
    by_length: dict[int, list[tuple[str, str]]] = {}
    for pair, length in sorted(hops.items()):
        by_length.setdefault(length, []).append(pair)
    for pairs in by_length.values():
        rng.shuffle(pairs)
    chosen: list[tuple[str, str, int]] = []
    used: set[frozenset[str]] = set()
    while len(chosen) < count and any(by_length.values()):
        for length in sorted(by_length):
            while by_length[length]:
                a, b = by_length[length].pop()
                if frozenset((a, b)) not in used:
                    used.add(frozenset((a, b)))
                    chosen.append((a, b, length))
                    break
            if len(chosen) >= count:
                break
    rng.shuffle(chosen)  # lengths mixed over the run, so the machine's load drifts over all of them alike
    # The last pair is several hops apart: its link is still up when the run watches the releases, so
    # at least that one is timed as it goes.
    far = [i for i, (_, _, length) in enumerate(chosen) if length > 1]
    if far:
        chosen.append(chosen.pop(far[-1]))
    return chosen


# -- iperf3 --------------------------------------------------------------------------------------------


Watch = Callable[[float, Callable[[], bool]], None]  # (flow started at, is it still running)


def iperf_json(lab: Lab, client: str, server: str, argv: Sequence[str], watch: Watch | None = None) -> dict[str, Any] | None:
    """One iperf3 client run from `client` to `server`'s overlay address; `watch(started)` runs meanwhile."""
    a, b = index_of(client), index_of(server)
    address = str(lab.node(b).overlay_address.ip)
    server_record = lab.spawn(b, server_argv(lab, b), role="e6-iperf-server")
    log = lab.directory / "logs" / f"e6-iperf-{client}-{server}-{time.monotonic_ns()}.json"
    client_record = None
    try:
        if not wait_listening(lab, b):
            return None
        started = time.monotonic()
        client_record = lab.spawn(a, ["iperf3", "-c", address, "-p", str(IPERF_PORT), "-J", *argv],
                                  role="e6-iperf-client", log_path=log)
        if watch is not None:
            watch(started, lambda: lab.is_running(client_record))
        deadline = time.monotonic() + 60
        while lab.is_running(client_record):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)
        try:
            result: dict[str, Any] = json.loads(log.read_text())
        except (OSError, ValueError):
            return None
        return result if "end" in result and "error" not in result else None
    finally:
        for record in (client_record, server_record):
            if record is not None:
                lab.stop(record)
        log.unlink(missing_ok=True)


def intervals(result: Mapping[str, Any]) -> list[tuple[float, float, float]]:
    """(start, end, bytes) of each reported interval, seconds from the flow's start."""
    out = []
    for interval in result.get("intervals", []):
        total = interval["sum"]
        out.append((float(total["start"]), float(total["end"]), float(total["bytes"])))
    return out


def mbit_between(parts: Sequence[tuple[float, float, float]], start: float, end: float) -> float | None:
    """Mbit/s over the intervals that lie within [start, end]."""
    chosen = [(s, e, n) for s, e, n in parts if s >= start - 1e-6 and e <= end + 1e-6 and e > s]
    seconds = sum(e - s for s, e, _ in chosen)
    if seconds < 0.25:
        return None
    return sum(n for _, _, n in chosen) * 8 / seconds / 1e6


def run_off(lab: Lab, pair: PairRun, duration: float) -> None:
    result = iperf_json(lab, pair.client, pair.server, ["-t", f"{1 + duration:g}", "-O", "1"])
    if result is None:
        pair.notes.append("off: iperf3 failed")
        return
    pair.off_mbit = float(result["end"]["sum_received"]["bits_per_second"]) / 1e6


def run_on(lab: Lab, pair: PairRun, duration: float, acquire: float) -> None:
    a, b = pair.client, pair.server
    pair.adjacent = linked(pair_view(lab, a, b), a, b)

    sent_on_link: list[int] = []  # the client's tx bytes on its link to the server: once it is up, at the end

    def watch(started: float, running: Callable[[], bool]) -> None:
        if pair.adjacent:
            return
        while running():
            up_at = on_demand_up_at(lab, a, b)
            if up_at is not None:
                pair.acquired = max(0.0, up_at - started)
                break
            time.sleep(0.1)
        else:
            return
        # Is the link used? The client's tunnel counts what it sends on it from here to the flow's end
        # (the link outlives the flow by the idle timeout); the flow's own count is iperf3's.
        first = tx_bytes(link_of(lab, a, b))
        while running():
            time.sleep(0.2)
        link = link_of(lab, a, b)
        last = tx_bytes(link)
        if link is not None:
            pair.path, pair.datapath = link.get("path"), link.get("datapath")
        if first is not None and last is not None:
            sent_on_link.extend((first, last))

    total = acquire + duration
    result = iperf_json(lab, a, b, ["-t", f"{total:g}", "-i", "0.5"], watch)
    pair.flow_ended = time.monotonic()
    if result is None:
        pair.notes.append("on: iperf3 failed")
        return
    parts = intervals(result)
    end = max((e for _, e, _ in parts), default=total)
    pair.on_mbit = mbit_between(parts, end - duration, end)
    if pair.acquired is not None:
        pair.before_mbit = mbit_between(parts, 0.0, pair.acquired)
        pair.after_mbit = mbit_between(parts, pair.acquired + 0.5, end)
        # The flow's bytes from the interval its link came up in: a little more than the link can
        # have carried, so the share errs low (the tunnel's count adds its headers, erring high).
        after = sum(n for s, e, n in parts if e > pair.acquired)
        if sent_on_link and after > 0:
            pair.carried = (sent_on_link[1] - sent_on_link[0]) / after
    elif not pair.adjacent:
        pair.notes.append("on: no on-demand link while the flow ran")


def watch_releases(lab: Lab, runs: Sequence[PairRun], timeout: float) -> float | None:
    """Until no on-demand link is left anywhere (None if some is after `timeout`), and how long that took.

    A pair's link still up at the first look is timed as it goes (`released`, from its flow's end);
    one already gone only gets the bound `gone_by`."""
    pending = {frozenset((r.client, r.server)): r for r in runs if r.acquired is not None and r.flow_ended}
    started = time.monotonic()
    first = True
    while True:
        topo = lab.topology()
        now = time.monotonic()
        present = on_demand_links(topo)
        for key, run in list(pending.items()):
            if key not in present:
                assert run.flow_ended is not None
                if first:
                    run.gone_by = now - run.flow_ended
                else:
                    run.released = now - run.flow_ended
                del pending[key]
        first = False
        if not present:
            return now - started
        if now - started > timeout:
            return None
        time.sleep(0.5)


# -- report --------------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def print_report(runs: Sequence[PairRun], args: argparse.Namespace, idle_timeout: float) -> None:
    off = [r.off_mbit for r in runs if r.off_mbit is not None]
    on = [r.on_mbit for r in runs if r.on_mbit is not None]
    print(f"\nE6: one TCP stream per pair, n = {args.nodes}, s = 2, k = {args.long_distance}, "
          f"{len(runs)} pairs, {args.duration:g} s measured each")
    print()
    print(f"{'CDF':<22} {'on-demand off':>14} {'on-demand on':>14} {'on / off':>9}")
    print("-" * 62)
    for share in PERCENTILES:
        lo = percentile(off, share) if off else None
        hi = percentile(on, share) if on else None
        ratio = hi / lo if lo and hi else None
        print(f"{f'p{round(share * 100)} (Mbit/s)':<22} {fmt(lo):>14} {fmt(hi):>14} {fmt(ratio, '.2f'):>9}")
    print(f"{'mean (Mbit/s)':<22} {fmt(statistics.mean(off) if off else None):>14} "
          f"{fmt(statistics.mean(on) if on else None):>14}")
    print(f"{f'>= {PAPER_BAR_MBIT:.0f} Mbit/s':<22} {100 * share_at_least(off, PAPER_BAR_MBIT):>13.0f}% "
          f"{100 * share_at_least(on, PAPER_BAR_MBIT):>13.0f}%")
    print(f"{'paper (n = 128)':<22} {f'{100 * PAPER_SHARE_OFF:.0f}% (k=log n)':>14} "
          f"{f'{100 * PAPER_SHARE_ON:.0f}% (k=4)':>14}   (Fig. 5: BF vs BF+OND, 330 Mbit/s bar; "
          f"text: 41 % vs 96 %)")
    print()
    print(f"{'by path length':<16} {'pairs':>5} {'off median':>11} {'on median':>10} {'links got':>10} "
          f"{'acquired median / max':>22}")
    for length in sorted({r.hops for r in runs}):
        group = [r for r in runs if r.hops == length]
        offs = [r.off_mbit for r in group if r.off_mbit is not None]
        ons = [r.on_mbit for r in group if r.on_mbit is not None]
        got = [r.acquired for r in group if r.acquired is not None]
        to_get = sum(1 for r in group if not r.adjacent)
        print(f"{f'{length} hop(s)':<16} {len(group):>5} {fmt(statistics.median(offs) if offs else None):>11} "
              f"{fmt(statistics.median(ons) if ons else None):>10} {f'{len(got)}/{to_get}':>10} "
              f"{fmt(statistics.median(got) if got else None, '.2f'):>11} / {fmt(max(got) if got else None, '.2f')} s")
    got = [r.acquired for r in runs if r.acquired is not None]
    needed = [r for r in runs if not r.adjacent]
    print()
    if got:
        within = sum(1 for g in got if g <= ACQUIRE_TARGET)
        print(f"on-demand link, flow start -> up at both ends: median {statistics.median(got):.2f} s, "
              f"p90 {percentile(got, 0.9):.2f} s, max {max(got):.2f} s; {len(got)}/{len(needed)} flows got one "
              f"({within} within the {ACQUIRE_TARGET:g} s target)")
    pairs = [(r.before_mbit, r.after_mbit) for r in runs if r.before_mbit is not None and r.after_mbit is not None]
    if pairs:
        before = statistics.median(p[0] for p in pairs)
        after = statistics.median(p[1] for p in pairs)
        ratios = [p[1] / p[0] for p in pairs if p[0] > 0]
        print(f"the same flow before / after its link: median {before:.0f} -> {after:.0f} Mbit/s, "
              f"median ratio {statistics.median(ratios):.2f}x ({len(pairs)} flows with both sides measured)")
    carried = [r.carried for r in runs if r.carried is not None]
    if carried:
        print(f"the flow's bytes sent on its on-demand link once up: median {100 * statistics.median(carried):.0f} %, "
              f"least {100 * min(carried):.0f} % ({len(carried)} flows; the rest went through intermediates "
              f"or before the first look)")
    by_path: dict[str, list[float]] = {}
    for r in runs:
        if r.acquired is not None and r.on_mbit is not None:
            by_path.setdefault(f"{r.path or 'unknown'} ({r.datapath or 'unknown'} data path)", []).append(r.on_mbit)
    for kind, values in sorted(by_path.items()):
        print(f"  on-demand links on a {kind} path: {len(values)} pairs, median {statistics.median(values):.0f} Mbit/s, "
              f"{100 * share_at_least(values, PAPER_BAR_MBIT):.0f} % >= {PAPER_BAR_MBIT:.0f}"
              + ("  (through the TURN server: its relay caps these, not the overlay)" if kind.startswith("relay") else ""))
    made = [r for r in runs if r.acquired is not None]
    released = [r.released for r in made if r.released is not None]
    gone = [r.gone_by for r in made if r.gone_by is not None]
    print(f"idle on-demand links (idle_timeout {idle_timeout:g} s, counters polled every 0.5 s, rates over 1 s): "
          f"{len(released) + len(gone)} of {len(made)} released by the end")
    if released:
        print(f"  timed as they went, after their flow stopped: {', '.join(f'{x:.1f}' for x in sorted(released))} s")
    if gone:
        print(f"  already gone at the first look, at most {min(gone):.1f} s after their flow stopped "
              f"(the most recent; the rest earlier)")
    for r in runs:
        if r.notes:
            print(f"  {r.client} -> {r.server}: {'; '.join(r.notes)}")


def print_pairs(runs: Sequence[PairRun]) -> None:
    print(f"\n{'pair':<18} {'hops':>4} {'off':>6} {'on':>6} {'acquired':>9} {'before':>7} {'after':>6} "
          f"{'link path':>10} {'carried':>8}  (Mbit/s, s; carried: the flow's bytes sent on its on-demand link)")
    for r in sorted(runs, key=lambda r: (r.hops, r.client, r.server)):
        path = f"{r.path or '-'}/{r.datapath or '-'}" if not r.adjacent else ""
        print(f"{r.client + ' -> ' + r.server:<18} {r.hops:>4} {fmt(r.off_mbit):>6} {fmt(r.on_mbit):>6} "
              f"{'adjacent' if r.adjacent else fmt(r.acquired, '.2f'):>9} {fmt(r.before_mbit):>7} "
              f"{fmt(r.after_mbit):>6} {path:>10} {fmt(None if r.carried is None else 100 * r.carried, '.0f'):>7}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16, help="lab size (default 16)")
    parser.add_argument("--pairs", type=int, default=48, help="node pairs measured (default 48)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per flow (default 3)")
    parser.add_argument("--acquire", type=float, default=2.5,
                        help="seconds the on-phase flow runs before its measured part (default 2.5)")
    parser.add_argument("--long-distance", type=int, default=2, help="k, long-distance links per node (default 2)")
    parser.add_argument("--idle-timeout", type=float, default=5.0,
                        help="on-demand idle timeout in the on phase (default 5; the daemon's default is 60)")
    parser.add_argument("--nat", default="eim", help="NAT kind of the nodes (default eim: direct tunnels)")
    parser.add_argument("--seed", type=int, default=1, help="pair sampling seed (default 1)")
    parser.add_argument("--plot", type=Path, default=Path("e6_on_demand.png"), help="CDF plot (.png or .svg)")
    parser.add_argument("--name", default=None, help="lab name (default: a fresh one)")
    args = parser.parse_args()

    began = time.monotonic()
    name = args.name or unique_lab_name()
    topology = {"successors": 2, "long_distance": args.long_distance, "on_demand": {"enabled": False}}
    runs: list[PairRun] = []
    Lab.down(name)  # a leftover from an interrupted run
    try:
        lab = Lab.up(name, nodes=args.nodes, nat=args.nat, daemons=True, topology=topology)
        print(f"lab {name}: {args.nodes} nodes up in {time.monotonic() - began:.0f} s", flush=True)
        topo, formed_at = wait_formed(lab, timeout=60.0 + 4.0 * args.nodes)
        print(f"overlay formed {fmt(formed_at)} s later and quiet ({time.monotonic() - began:.0f} s)", flush=True)
        measured = measure_lab(lab)
        hops = dict(measured.pairs)
        print(f"path lengths (FRB hop counts) of {len(hops)}/{measured.expected} pairs: "
              + ", ".join(f"{h} hop(s): {sum(1 for v in hops.values() if v == h)}" for h in sorted(set(hops.values()))),
              flush=True)
        rng = random.Random(args.seed)
        runs = [PairRun(a, b, h) for a, b, h in sample_pairs(hops, args.pairs, rng)]

        for i, run in enumerate(runs, 1):
            run_off(lab, run, args.duration)
            print(f"  off {i}/{len(runs)} {run.client} -> {run.server} ({run.hops} hops): {fmt(run.off_mbit)} Mbit/s",
                  flush=True)

        set_on_demand(lab, {"enabled": True, "idle_timeout": args.idle_timeout})
        print(f"on-demand links enabled by a config reload ({time.monotonic() - began:.0f} s)", flush=True)
        for i, run in enumerate(runs, 1):
            run_on(lab, run, args.duration, args.acquire)
            print(f"  on  {i}/{len(runs)} {run.client} -> {run.server} ({run.hops} hops): {fmt(run.on_mbit)} Mbit/s, "
                  f"link {'adjacent' if run.adjacent else fmt(run.acquired, '.2f') + ' s'}, "
                  f"before/after {fmt(run.before_mbit)}/{fmt(run.after_mbit)}", flush=True)
        left = watch_releases(lab, runs, timeout=args.idle_timeout + 60.0)
        print(f"every on-demand link released {fmt(left, '.1f')} s after the last flow "
              f"({time.monotonic() - began:.0f} s)", flush=True)
    finally:
        Lab.down(name)

    print_pairs(runs)
    print_report(runs, args, args.idle_timeout)
    off = [r.off_mbit for r in runs if r.off_mbit is not None]
    on = [r.on_mbit for r in runs if r.on_mbit is not None]
    draw_cdfs({"BF, on-demand off": off, "BF + on-demand": on}, args.plot,
              f"E6: TCP throughput per pair, n = {args.nodes}, s = 2, k = {args.long_distance}",
              "Mbit/s (one iperf3 TCP stream)",
              marks=[(PAPER_BAR_MBIT, 100 * (1 - PAPER_SHARE_ON), "paper: BF+OND, 80 % above 330 Mbit/s")])
    print(f"\nplot: {args.plot}; whole run {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
