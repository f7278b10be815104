"""Simulator benchmark (not a test): path lengths for both log forms, and timings.

    .venv/bin/python benchmarks/sim_bench.py [--seed N] [--all-roots] [--baseline DIR]

Prints, for n = 8, 32, 64, 128, 1024 and both forms of eq. (1)/(2): k, mean
path length, exactly-once delivery ratio, roots flooded, seconds (build +
flood); then each form's Table 1 distribution at n = 128; then wall and CPU
time for n = 10 000 and n = 100 000 (default log form, default root sample;
target: n = 100 000 within 60 s). Roots are every node up to the simulator's
delivery budget and a random sample beyond it (as `evio sim`), unless
--all-roots. The machine's load average is printed with the timings: on a
shared machine wall time is CPU time stretched by the other work.

--baseline DIR: a copy of the code to compare with (a tree holding `evio/`,
e.g. `git archive main evio | tar -x -C DIR`). The large sizes then run as
`evio sim -n N --seed S` in child processes, the baseline's then this tree's,
one after the other: wall and CPU time (user + system) of each, the ratio
beside, and whether the two printed the same figures (timings left out).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from evio.config.model import LogForm
from evio.sim.overlay import OverlayParams, build_overlay
from evio.sim.stats import (
    PAPER_MEAN_PATH,
    PAPER_TABLE_1,
    BroadcastStats,
    broadcast_stats,
    choose_roots,
    default_root_count,
    max_path_histogram,
    paper_fig7_estimate,
)

SIZES = (8, 32, 64, 128, 1024)
LARGE = (10_000, 100_000)
TREE = Path(__file__).resolve().parents[1]
# Timings in `evio sim`'s output: "(12.34 s)", "elapsed 12.34 s", ", 12.34 s)".
_TIMINGS = re.compile(r"\(\d+\.\d+ s\)|elapsed \d+\.\d+ s|, \d+\.\d+ s\)")


def measure(n: int, form: LogForm, seed: int, all_roots: bool) -> tuple[BroadcastStats, int, bool, float, float]:
    rng = random.Random(seed)
    t0 = time.perf_counter()
    built = build_overlay(n, OverlayParams(successors=2, long_distance=None, log_form=form), rng)
    t1 = time.perf_counter()
    adjacency = built.overlay.adjacency()
    roots = choose_roots(adjacency, None if all_roots else default_root_count(n), rng)
    stats = broadcast_stats(adjacency, roots)
    return stats, built.overlay.long_distance_count(), built.settled, t1 - t0, time.perf_counter() - t1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--all-roots", action="store_true", help="flood from every node, whatever n")
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR", help="code to compare with (see above)")
    args = parser.parse_args()
    if args.baseline is not None:
        if not (args.baseline / "evio").is_dir():
            parser.error(f"{args.baseline} holds no evio/")
        if args.all_roots:
            parser.error("--baseline compares `evio sim` with its default roots")

    print(f"Symphony + Bounded Flood simulator, s=2, k=floor(log2 n), seed={args.seed}")
    print()
    header = (
        f"{'n':>6} {'form':>6} {'k':>3} {'mean path':>10} {'1/2 log2 n':>11} {'paper':>6} "
        f"{'exactly-once':>13} {'roots':>6} {'build s':>8} {'flood s':>8}"
    )
    print(header)
    print("-" * len(header))
    tables: dict[LogForm, dict[int, int]] = {}
    for n in SIZES:
        for form in LogForm:
            stats, k, settled, build_s, flood_s = measure(n, form, args.seed, args.all_roots)
            if n == 128:
                tables[form] = max_path_histogram(stats.max_path_by_node)
            paper = PAPER_MEAN_PATH.get(n)
            print(
                f"{n:>6} {form.value:>6} {k:>3} {stats.mean_path_length:>10.2f} {paper_fig7_estimate(n):>11.2f} "
                f"{(f'{paper:.2f}' if paper else '-'):>6} {stats.exactly_once_ratio:>13.4f} {stats.roots:>6} "
                f"{build_s:>8.2f} {flood_s:>8.2f}{'' if settled else '  (still settling)'}"
            )

    print()
    print("Table 1 at n=128: nodes per maximum path length (hops)")
    hops = sorted(set(PAPER_TABLE_1).union(*(t.keys() for t in tables.values())))
    print(f"{'':>8}" + "".join(f"{h:>5}" for h in hops))
    print(f"{'paper':>8}" + "".join(f"{PAPER_TABLE_1.get(h, (0, 0.0))[0]:>5}" for h in hops))
    for form, table in tables.items():
        print(f"{form.value:>8}" + "".join(f"{table.get(h, 0):>5}" for h in hops))

    print()
    for n in LARGE:
        if args.baseline is not None:
            compare(n, args.seed, args.baseline)
            continue
        cpu = time.process_time()
        stats, k, settled, build_s, flood_s = measure(n, LogForm.LN, args.seed, args.all_roots)
        cpu = time.process_time() - cpu
        print(
            f"n={n} (ln, k={k}): build {build_s:.2f} s ({'stable' if settled else 'still settling'}), "
            f"flood from {stats.roots} roots {flood_s:.2f} s, total {build_s + flood_s:.2f} s wall, "
            f"{cpu:.2f} s CPU (load average {os.getloadavg()[0]:.1f}, target 60 s); "
            f"mean path {stats.mean_path_length:.2f}, exactly-once {stats.exactly_once_ratio:.4f}"
        )


def run_cli(tree: Path, n: int, seed: int) -> tuple[float, float, str]:
    """`evio sim -n N --seed S` from `tree` in a child process: wall s, CPU s (user + system), output without timings."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "evio", "sim", "-n", str(n), "--seed", str(seed)],
        env=env, cwd=tree, capture_output=True, text=True, check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, _TIMINGS.sub("", done.stdout)


def compare(n: int, seed: int, baseline: Path) -> None:
    load_before = os.getloadavg()[0]
    base_wall, base_cpu, base_out = run_cli(baseline, n, seed)
    wall, cpu, out = run_cli(TREE, n, seed)
    print(
        f"evio sim -n {n} --seed {seed}, one after the other (load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after; target at n = 100 000: 60 s wall)"
    )
    print(f"  {'':28}{'wall s':>9}{'CPU s':>9}")
    print(f"  {'baseline (' + baseline.name + ')':28}{base_wall:>9.2f}{base_cpu:>9.2f}")
    print(f"  {'this tree':28}{wall:>9.2f}{cpu:>9.2f}")
    print(f"  {'ratio (this / baseline)':28}{wall / base_wall:>9.2f}{cpu / base_cpu:>9.2f}")
    print(f"  same output: {'yes' if out == base_out else 'NO'}")

if __name__ == "__main__":
    main()
