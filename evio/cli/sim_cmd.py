"""`evio sim`: build a Symphony overlay in-process, flood broadcasts, compare with the paper.

The overlay is built with the daemon's own decision code (Symphony selection,
adjacency diff, request acceptance); broadcasts go through the real
flooding-bound code. Figures are printed beside the paper's (section 5.6-5.7:
Table 1, Fig. 7, 3.41 hops at n = 128).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path
from typing import Any

from evio.cli.count_arguments import not_negative, positive
from evio.config.model import LogForm, default_long_distance
from evio.overlay.adjacency import LinkState, LinkType
from evio.plots.ring import MAX_DRAWN_NODES, PlotError, RingLink, RingPicture, draw_ring, merge_links
from evio.sim.overlay import OverlayParams, SimError, SymphonyOverlay, build_overlay
from evio.sim.stats import (
    DELIVERY_BUDGET,
    PAPER_MEAN_PATH,
    PAPER_TABLE_1,
    PAPER_TABLE_1_N,
    BroadcastStats,
    broadcast_stats,
    choose_roots,
    default_root_count,
    max_path_histogram,
    paper_fig7_estimate,
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "sim",
        help="simulate a Symphony overlay with Bounded Flood and compare with the paper",
        description=(
            "Build an n-node Symphony overlay in-process (the daemon's selection, diff and "
            "acceptance code), flood a broadcast from every node (or a sample, for large n) with "
            "the real flooding-bound code, and print exactly-once delivery, path lengths, "
            "Table 1 and Fig. 7 beside the paper's figures."
        ),
    )
    parser.add_argument("-n", "--nodes", type=positive, default=128, help="overlay size (default 128)")
    parser.add_argument(
        "-s", "--successors", type=positive, default=2, help="successor links per node (default 2)"
    )
    parser.add_argument(
        "-k", "--long-distance", type=not_negative, default=None,
        help="long-distance links per node (default floor(log2 n))",
    )
    parser.add_argument(
        "--log-form", choices=[f.value for f in LogForm], default=LogForm.LN.value,
        help="logarithm in eq. (1)/(2): ln as the paper writes it (default: shorter measured paths) "
        "or log10 as the original code",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument(
        "--failed", type=_fraction, default=0.0, metavar="FRACTION",
        help="fraction of nodes to stop after the overlay is built (0..1, default 0)",
    )
    parser.add_argument(
        "--roots", type=_roots, default=None, metavar="N|all",
        help=f"broadcast roots: a random sample of N nodes, or all (default: all while n*(n-1) <= "
        f"{DELIVERY_BUDGET}, else {DELIVERY_BUDGET}/n sampled)",
    )
    parser.add_argument("--rounds", type=positive, default=100, help="most link rounds to settle (default 100)")
    parser.add_argument(
        "--sweep", type=_sizes, default=None, metavar="N1,N2,...",
        help="print mean path length vs n (Fig. 7) for these sizes instead of one overlay",
    )
    parser.add_argument(
        "--svg", type=Path, default=None, metavar="FILE",
        help=f"draw the built overlay as the paper's Fig. 3 (FILE.svg or FILE.png; n <= {MAX_DRAWN_NODES})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    log_form = LogForm(args.log_form)
    if args.svg is not None and (args.sweep or args.nodes > MAX_DRAWN_NODES):
        raise SystemExit(f"evio sim: --svg draws one overlay of at most {MAX_DRAWN_NODES} nodes")
    try:
        if args.sweep:
            _sweep(args, log_form)
        else:
            _single(args, log_form)
    except SimError as exc:
        raise SystemExit(f"evio sim: {exc}") from None
    print(f"\nelapsed {time.perf_counter() - started:.2f} s")
    return 0


# -- one overlay ------------------------------------------------------------------------------


def _single(args: argparse.Namespace, log_form: LogForm) -> None:
    n = args.nodes
    rng = random.Random(args.seed)
    params = OverlayParams(args.successors, args.long_distance, log_form, args.rounds)
    k = default_long_distance(n) if args.long_distance is None else args.long_distance
    k_note = " (floor(log2 n))" if args.long_distance is None else ""
    print("evio sim: Symphony overlay + Bounded Flood, in-process")
    print(
        f"n={n}  s={args.successors}  k={k}{k_note}  log form={log_form.value}  seed={args.seed}"
        f"  failed={args.failed:.0%}"
    )

    t0 = time.perf_counter()
    built = build_overlay(n, params, rng)
    overlay = built.overlay
    seconds = time.perf_counter() - t0
    adjacency = overlay.adjacency(by_rank=True)  # the same floods, faster (node ids are not printed)
    print()
    print(_overlay_line(overlay, adjacency, built.settled, seconds))

    roots = choose_roots(adjacency, _root_count(args.roots, n), rng)
    t0 = time.perf_counter()
    stats = broadcast_stats(adjacency, roots, symmetric=True)
    print(_roots_line(len(roots), n, stats, time.perf_counter() - t0))
    _print_main_table(n, args.successors, k, stats)
    if len(roots) < n:
        print("  (maxima below are over the sampled roots only; use --roots all for the full table)")
    _print_table_1(n, stats)
    if args.svg is not None:
        title = f"evio sim: n={n}, s={args.successors}, k={k}, {log_form.value}, seed={args.seed}"
        try:
            draw_ring(ring_picture(overlay, title), args.svg)
        except PlotError as exc:
            raise SystemExit(f"evio sim: {exc}") from None
        print(f"\npicture    {args.svg}")

    if args.failed > 0:
        _print_failure(args, overlay, rng)


def ring_picture(overlay: SymphonyOverlay, title: str) -> RingPicture:
    """The simulated overlay as a ring picture; nodes named by their id's first hex digits."""
    ordered = sorted(overlay.members)
    names = {nid: f"{nid:032x}"[:6] for nid in ordered}
    if len(set(names.values())) < len(names):
        names = {nid: f"{nid:032x}" for nid in ordered}
    links = [
        RingLink(names[holder], names[peer], link.type.value, up=link.state is LinkState.UP)
        for holder, peer, link in overlay.held_links()
    ]
    return RingPicture(tuple(names[nid] for nid in ordered), merge_links(links), title)


def _overlay_line(overlay: SymphonyOverlay, adjacency: dict[int, set[int]], settled: bool, seconds: float) -> str:
    held = overlay.held_counts()
    k = overlay.long_distance_count()
    wanted = k * len(overlay.members)
    degree = sum(len(peers) for peers in adjacency.values()) / max(1, len(overlay.members))
    state = f"stable after {overlay.rounds} rounds" if settled else f"still settling after {overlay.rounds} rounds"
    refused = ", ".join(f"{count} {reason.value}" for reason, count in sorted(overlay.rejections.items(), key=str))
    return (
        f"overlay    {state} ({seconds:.2f} s): {held[LinkType.SUCCESSOR]} successor links, "
        f"{held[LinkType.LONG_DISTANCE]} of {wanted} long-distance links placed, mean degree {degree:.1f}\n"
        f"           requests refused: {refused or 'none'}"
    )


def _roots_line(count: int, n: int, stats: BroadcastStats, seconds: float) -> str:
    if count >= n:
        which = f"every one of the {n} nodes"
    else:
        which = f"{count} randomly sampled nodes of {n} (--roots all for every node)"
    return f"broadcast  one from {which}: {stats.deliveries_expected} deliveries expected ({seconds:.2f} s)"


def _print_main_table(n: int, s: int, k: int, stats: BroadcastStats) -> None:
    paper_path = PAPER_MEAN_PATH.get(n)
    paper_note = f"{paper_path:.2f} (n={n}, s=2, k=log n)" if paper_path is not None else "-"
    print()
    print(f"  {'':34}{'measured':>10}   paper")
    print(f"  {'exactly-once delivery ratio':34}{stats.exactly_once_ratio:>10.4f}   1 (E1: no duplicates)")
    print(f"  {'  duplicated / missed':34}{f'{stats.duplicated} / {stats.missed}':>10}   0 / 0")
    print(f"  {'mean path length (hops)':34}{stats.mean_path_length:>10.2f}   {paper_note}")
    print(f"  {'Fig. 7: 1/2 log2 n':34}{'':>10}   {paper_fig7_estimate(n):.2f}")
    if n == PAPER_TABLE_1_N:
        print("  (measured here: --log-form log10, the original code's form, lands on the paper's figures;")
        print("   ln, the default, gives shorter paths)")


def _print_table_1(n: int, stats: BroadcastStats) -> None:
    histogram = max_path_histogram(stats.max_path_by_node)
    nodes = sum(histogram.values())
    paper = PAPER_TABLE_1 if n == PAPER_TABLE_1_N else {}
    title = f"Table 1: each node's maximum path length (paper: n={PAPER_TABLE_1_N}"
    title += ")" if paper else f"; its rows do not apply to n={n})"
    print()
    print(title)
    print(f"  {'max hops':>8}  {'nodes':>6} {'cum %':>7}   | {'paper':>6} {'cum %':>7}")
    cumulative = 0
    for hops in sorted(set(histogram) | set(paper)):
        count = histogram.get(hops, 0)
        cumulative += count
        paper_count, paper_cum = paper.get(hops, (None, None))
        paper_cols = f"{paper_count:>6} {paper_cum:>6.1f}%" if paper_count is not None else f"{'-':>6} {'-':>7}"
        print(f"  {hops:>8}  {count:>6} {100 * cumulative / nodes:>6.1f}%   | {paper_cols}")
    at_most_9 = sum(c for h, c in histogram.items() if h <= 9)
    print(f"  nodes with max <= 9 hops: {100 * at_most_9 / nodes:.1f}%   (paper, n={PAPER_TABLE_1_N}: 74.2%)")


def _print_failure(args: argparse.Namespace, overlay: SymphonyOverlay, rng: random.Random) -> None:
    n = len(overlay.members)
    failed = set(rng.sample(sorted(overlay.members), round(args.failed * n)))
    survivors = overlay.members - failed
    print()
    print(f"failure    {len(failed)} of {n} nodes stop ({args.failed:.0%})")
    if len(survivors) < 2:
        print("           fewer than 2 nodes left: nothing to measure")
        return
    count = _root_count(args.roots, len(survivors))
    roots = choose_roots(survivors, count, rng)
    before = broadcast_stats(overlay.adjacency(), roots, survivors, symmetric=True)
    print(
        f"  before repair (their tunnels down, no relinking): exactly-once {before.exactly_once_ratio:.4f}, "
        f"missed {before.missed}, duplicated {before.duplicated}, mean path {before.mean_path_length:.2f}"
    )
    overlay.fail(failed)
    t0 = time.perf_counter()
    settled = overlay.stabilise()
    state = "stable" if settled else "still settling"
    seconds = time.perf_counter() - t0
    after = broadcast_stats(overlay.adjacency(), roots, symmetric=True)
    print(
        f"  after repair ({state}, {seconds:.2f} s): exactly-once {after.exactly_once_ratio:.4f}, "
        f"missed {after.missed}, duplicated {after.duplicated}, mean path {after.mean_path_length:.2f}"
    )


# -- Fig. 7 sweep -----------------------------------------------------------------------------


def _sweep(args: argparse.Namespace, log_form: LogForm) -> None:
    k_text = "floor(log2 n)" if args.long_distance is None else str(args.long_distance)
    print("evio sim: Fig. 7, mean path length vs n")
    print(f"s={args.successors}  k={k_text}  log form={log_form.value}  seed={args.seed}")
    print()
    print(
        f"  {'n':>6} {'k':>3} {'measured':>9} {'1/2 log2 n':>11} {'paper':>6} {'exactly-once':>13} "
        f"{'roots':>6} {'seconds':>8}"
    )
    for n in args.sweep:
        t0 = time.perf_counter()
        rng = random.Random(args.seed)
        params = OverlayParams(args.successors, args.long_distance, log_form, args.rounds)
        built = build_overlay(n, params, rng)
        adjacency = built.overlay.adjacency(by_rank=True)
        roots = choose_roots(adjacency, _root_count(args.roots, n), rng)
        stats = broadcast_stats(adjacency, roots, symmetric=True)
        paper = PAPER_MEAN_PATH.get(n)
        paper_text = f"{paper:.2f}" if paper is not None else "-"
        settled = "" if built.settled else "  (still settling)"
        print(
            f"  {n:>6} {built.overlay.long_distance_count():>3} {stats.mean_path_length:>9.2f} "
            f"{paper_fig7_estimate(n):>11.2f} {paper_text:>6} {stats.exactly_once_ratio:>13.4f} "
            f"{len(roots):>6} {time.perf_counter() - t0:>8.2f}{settled}"
        )
    print("  (paper: Fig. 7 plots ~1/2 log2 n for n = 8, 32, 64, 128; its text gives 3.41 at n = 128)")


# -- argument types ---------------------------------------------------------------------------


def _root_count(requested: int | None, n: int) -> int | None:
    """None means every node."""
    if requested == 0:  # --roots all
        return None
    if requested is not None:
        return requested
    return default_root_count(n)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _roots(text: str) -> int:
    """A positive count, or 'all' (returned as 0)."""
    if text == "all":
        return 0
    return positive(text)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes, got {text!r}") from None
    if not sizes or any(size < 2 for size in sizes):
        raise argparse.ArgumentTypeError("every size must be >= 2")
    return sizes
