#!/usr/bin/env python3
"""The floor of the RTT a tunnel adds on this machine: the least any userspace TAP-to-UDP design pays, beside evio and fastd.

    sudo PYTHONPATH=.:DIR .venv/bin/python benchmarks/rtt_floor.py [--rounds 20] [--pings 200] [--interval 10]
                                                                   [--pin CPU] [--rows forwarder,evio,...]

(DIR: where `scripts/build-native --into DIR` put the current native data path; the benchmark says whether
the evio it runs has the bound rings of decision 0077.)

The veth topology of benchmarks/peers_bench.py (two namespaces, one veth, MTU 1500, the underlay
10.201.0.1 <-> .2), with six tunnels up side by side, each with an overlay subnet of its own (MTU 1400):

1. veth: the bare underlay, the baseline every other row is less;
2. forwarder: a TAP and a UDP socket, one thread per end blocking in epoll, one read and one write per
   wake-up, no crypto (benchmarks/rtt_floor_forwarder.rs, built here with cargo);
3. forwarder-aead: the same, each frame sealed and opened with AES-256-GCM (the native data path's own
   native/src/gcm.rs, compiled into the forwarder);
4. forwarder-evio: the same sealing with the native passes' system calls (a vnet header, the TAP read
   until EAGAIN, sendmmsg, recvmmsg, writev): what a Rust thread per tunnel running them would pay;
5. evio-rings: evio's native passes, the rings bound as decision 0077 binds them, called from a plain
   Python thread blocking in epoll, no uvloop (benchmarks/rtt_floor_rings.py): what the passes cost
   without the event loop, an upper bound of the same passes run from a Rust thread per tunnel;
6. evio: `evio.lab.tunnel_endpoint`, native data path, AES-256-GCM, as peers_bench runs it;
7. fastd: `mode tap`, salsa2012+umac, as peers_bench runs it.

Paired and alternating: each round pings every row in turn (the order reversed on even rounds), --pings
pings --interval ms apart, and takes each row's median ping. The RTT a row adds is, per round, its median
less the bare veth's in the same round; the table gives the median over the rounds, with the load average
of the rounds beside it, the ratio to fastd, and evio's median less the row's, paired per round (what evio
would shed by being that row). A median of medians, because on a shared machine one late ping moves a
mean, and a stalled round moves a mean of rounds.

Figures and what they decided: docs/performance.md, "The floor of a tunnel's added RTT on this machine
(issue 25, deliverable 5)". A benchmark, not a test: it asserts nothing. Root only; the namespaces and
every process in them are removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers_bench import (  # noqa: E402
    Tunnel,
    address_device,
    device_with,
    ensure_installed,
    spawn,
    start_evio,
    start_fastd,
    wait_device,
    wait_reachable,
)

from evio.lab.tunnel_testbed import VethTestbed, ping_times, unique_prefix  # noqa: E402

FORWARDER_SOURCE = Path(__file__).resolve().parent / "rtt_floor_forwarder.rs"
RINGS_END = Path(__file__).resolve().parent / "rtt_floor_rings.py"
PORTS = {"forwarder": 10010, "forwarder-aead": 10011, "forwarder-evio": 10013, "evio-rings": 10012}
ROWS = ["forwarder", "forwarder-aead", "forwarder-evio", "evio-rings", "evio", "fastd"]
"""Every tunnel, in the order brought up (each with the subnet 10.200.N, N from 1)."""


def build_forwarder(build_dir: Path) -> Path:
    """The forwarder binary, built (or brought up to date) in `build_dir` from the crates native/ pins."""
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "Cargo.toml").write_text(
        '[package]\nname = "evio-rtt-floor-forwarder"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n'
        f'[[bin]]\nname = "forwarder"\npath = "{FORWARDER_SOURCE}"\n\n'
        '[dependencies]\naes = "0.8"\nlibc = "0.2"\n\n'
        '[profile.release]\nopt-level = 3\n\n[workspace]\n'
    )
    # native/'s lock pins the same versions of aes and libc (and what aes pulls in) the data path is built with.
    shutil.copy(REPO / "native" / "Cargo.lock", build_dir / "Cargo.lock")
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    argv = [cargo, "build", "--release", "--quiet", "--manifest-path", str(build_dir / "Cargo.toml")]
    env = {**os.environ, "CARGO_TARGET_DIR": str(build_dir / "target")}
    done = subprocess.run([*argv, "--offline"], env=env, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:  # a crate not in cargo's cache yet: fetch it from crates.io
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"cargo build of the forwarder failed: {done.stderr[-2000:]}")
    return build_dir / "target" / "release" / "forwarder"


def start_ends(tb: VethTestbed, t: Tunnel, d: Path, program: list[str], tag: str, sealed: bool,
               extra: tuple[str, ...] = ()) -> None:  # fmt: skip
    """`program TAP LOCAL REMOTE [KEY] [extra]` at each end (the forwarder, the rings), the same key at both."""
    ends = {"a": tb.a, "b": tb.b}
    port = PORTS[t.name]
    key = [secrets.token_hex(32)] if sealed else []
    for end, other in (("a", "b"), ("b", "a")):
        device = f"{tb.prefix}{tag}{end}"
        argv = [*program, device, f"{ends[end].address}:{port}", f"{ends[other].address}:{port}", *key, *extra]
        t.processes.append(spawn(ends[end].netns, argv, d / f"{end}.log"))
        wait_device(ends[end].netns, device)
        address_device(ends[end].netns, device, t.address(end))
    t.device_a = f"{tb.prefix}{tag}a"


@dataclass
class Row:
    """One row's rounds: the median ping of each (ms; NaN when none was answered), the pings answered, the
    load average after it."""

    medians: list[float] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)


def measure_round(tb: VethTestbed, order: list[str], tunnels: dict[str, Tunnel], rows: dict[str, Row],
                  args: argparse.Namespace) -> None:
    for name in order:
        address = tb.b.address if name == "veth" else tunnels[name].address("b")
        times = ping_times(tb.a.netns, address, args.pings, args.interval / 1000)
        row = rows.setdefault(name, Row())
        row.answered.append(len(times))
        row.loads.append(os.getloadavg()[0])
        row.medians.append(statistics.median(times) if times else math.nan)


def added_us(rows: dict[str, Row], name: str) -> list[float]:
    """Per round: the row's median ping less the bare veth's in the same round, in microseconds."""
    pairs = zip(rows[name].medians, rows["veth"].medians, strict=True)
    return [(own - veth) * 1000 for own, veth in pairs if not (math.isnan(own) or math.isnan(veth))]


def print_table(rows: dict[str, Row], args: argparse.Namespace) -> None:
    veth = rows["veth"]
    medians = [m for m in veth.medians if not math.isnan(m)] or [math.nan]
    print(f"\n{len(veth.medians)} rounds of {args.pings} pings {args.interval:g} ms apart through each; "
          f"bare veth: median ping {statistics.median(medians) * 1000:.1f} us "
          f"(rounds {min(medians) * 1000:.1f}-{max(medians) * 1000:.1f})\n")  # fmt: skip
    fastd = statistics.median(added_us(rows, "fastd")) if "fastd" in rows else None
    # What evio would shed by being that row: paired per round, so a round's stall on the machine cancels.
    evio_less = "evio less this row, per round: median, us"
    print(f"| row | RTT added: median of the rounds, us | rounds' quartiles, us | / fastd | {evio_less} | "
          "pings answered | load average |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in [n for n in rows if n != "veth"]:
        added = added_us(rows, name)
        if not added:
            print(f"| {name} | - | - | - | - | 0 | - |")
            continue
        median = statistics.median(added)
        quartiles = statistics.quantiles(added, n=4) if len(added) > 1 else [median, median, median]
        ratio = f"{median / fastd:.2f}x" if fastd else "-"
        less = "-"
        if "evio" in rows and name != "evio":
            pairs = zip(rows["evio"].medians, rows[name].medians, strict=True)
            paired = [(e - o) * 1000 for e, o in pairs if not (math.isnan(e) or math.isnan(o))]
            less = f"{statistics.median(paired):.1f}" if paired else "-"
        row = rows[name]
        print(f"| {name} | {median:.1f} | {quartiles[0]:.1f}-{quartiles[2]:.1f} | {ratio} | {less} | "
              f"{sum(row.answered)} of {len(row.answered) * args.pings} | {min(row.loads):.2f}-{max(row.loads):.2f} |")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds over every row, alternating the order (default 20)")
    ap.add_argument("--pings", type=int, default=200, help="pings through each row per round (default 200)")
    ap.add_argument("--interval", type=float, default=10.0, help="ms between pings (default 10)")
    ap.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "evio-rtt-floor",
                    help="where cargo builds the forwarder (default /tmp/evio-rtt-floor)")
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="run every tunnel end and the pings on this one CPU (the wake-ups without a cross-CPU IPI)")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated tunnels (default {','.join(ROWS)})")
    args = ap.parse_args()
    wanted = [r for r in args.rows.split(",") if r]
    if unknown := [r for r in wanted if r not in ROWS]:
        ap.error(f"unknown rows {unknown}; known: {ROWS}")
    if args.rounds < 1 or args.pings < 1 or args.interval <= 0:
        ap.error("--rounds and --pings must be at least 1, --interval above 0")
    if os.geteuid() != 0:
        print("rtt_floor: needs root (network namespaces, TAP devices)", file=sys.stderr)
        return 2
    if "fastd" in wanted and (reason := ensure_installed("fastd")) is not None:
        print(f"fastd: skipped: {reason}", flush=True)
        wanted.remove("fastd")
    binary = build_forwarder(args.build_dir) if any(r.startswith("forwarder") for r in wanted) else None
    if args.pin is not None:
        # After the build; every process started from here on (ip netns exec, the ends, ping) inherits it.
        os.sched_setaffinity(0, {args.pin})

    from evio.tunnel.datapath import native

    print(f"evio: native data path {'available' if native.available() else 'NOT available (the Python one runs)'}, "
          f"rings bound by the event loop (0077): {native.bound()}", flush=True)
    pinned = f"; every end and ping on CPU {args.pin}" if args.pin is not None else ""
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores shared with everything else){pinned}", flush=True)
    tunnels: dict[str, Tunnel] = {}
    rows: dict[str, Row] = {}
    with VethTestbed(unique_prefix("evf")) as tb, tempfile.TemporaryDirectory(prefix="evio-rtt-floor-") as tmp:
        try:
            for subnet, name in enumerate(ROWS, start=1):
                if name not in wanted:
                    continue
                tunnel = Tunnel(name, subnet)
                tunnels[name] = tunnel
                workdir = Path(tmp) / name
                workdir.mkdir()
                if name.startswith("forwarder"):
                    assert binary is not None
                    sealed, evio = name != "forwarder", name == "forwarder-evio"
                    tag = {"forwarder": "fp", "forwarder-aead": "fs", "forwarder-evio": "fe"}[name]
                    start_ends(tb, tunnel, workdir, [str(binary)], tag, sealed, ("--like-evio",) if evio else ())
                elif name == "evio-rings":
                    start_ends(tb, tunnel, workdir, [sys.executable, str(RINGS_END)], "fr", sealed=True)
                elif name == "evio":
                    start_evio(tb, tunnel, workdir)
                else:
                    start_fastd(tb, tunnel, workdir)
                if not wait_reachable(tb.a.netns, tunnel.address("b")):
                    logs = " | ".join(p.read_text(errors="replace")[-200:] for p in workdir.glob("*.log"))
                    raise RuntimeError(f"{name}: no answer over the tunnel in 45 s ({logs.strip()})")
                tunnel.device_a = device_with(tb.a.netns, tunnel.address("a")) or tunnel.device_a
                print(f"{name}: up ({tunnel.address('a')} <-> {tunnel.address('b')}, {tunnel.device_a})", flush=True)
            # A warm-up round, not counted: first pings meet cold ARP caches and fresh processes.
            measure_round(tb, ["veth", *tunnels], tunnels, {}, argparse.Namespace(pings=20, interval=args.interval))
            order = ["veth", *tunnels]
            for round_no in range(1, args.rounds + 1):
                measure_round(tb, order if round_no % 2 else order[::-1], tunnels, rows, args)
                veth = rows["veth"].medians[-1]
                cells = ", ".join(f"{n} {(rows[n].medians[-1] - veth) * 1000:.0f}" for n in tunnels)
                print(f"  round {round_no}: veth {veth * 1000:.0f} us; added, us: {cells} "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            for tunnel in tunnels.values():
                tunnel.stop()
            for log in sorted(Path(tmp).glob("evio-rings/*.log")):
                lines = log.read_text(errors="replace").strip().splitlines()
                print(f"evio-rings {log.stem}: {lines[-1] if lines else 'no output'}")
    print_table(rows, args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
