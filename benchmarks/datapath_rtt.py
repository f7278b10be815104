#!/usr/bin/env python3
"""What one ping costs inside the data path: a frame and its answer through two ends in one event loop.

    .venv/bin/python benchmarks/datapath_rtt.py [--datapath native] [--pings 2000] [--loop uvloop]

Two data paths joined over loopback UDP (evio.testing.datapath_pair, the unit tests' pair: TAPs are
socketpairs), on uvloop as in the daemon. A frame written into A's TAP comes out of B's, is written
back into B's TAP at once and timed when it comes out of A's: two send passes (TAP read, seal,
sendmmsg) and two receive passes (recvmmsg, open, TAP write) per ping, plus the event loop's dispatch
of each readable fd and the pair's Python wire between the sockets (two more dispatches). No process
or thread boundary is crossed: this is the data path's own share of the RTT a tunnel adds, against
which the wake-ups of separate processes (benchmarks/peers_bench.py's "RTT added") can be told apart.

It prints the median and 90th percentile RTT and, per ping, the time in each receive and send pass
(timed around the pass). ``--interval MS`` waits that long between pings (as ``ping -i`` does), so
each ping meets a thread that slept and caches others used: the cold cost of a pass, against the
hot one of back-to-back pings. ``--loop asyncio`` runs the pair on asyncio's own loop instead (what
`evio run --no-uvloop` runs), for the loop's share. No root, no namespaces; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evio.testing.datapath_pair import close, frame, make_pair  # noqa: E402
from evio.tunnel.datapath.fd_datapath import FdDatapath  # noqa: E402


def timed_passes(dp: FdDatapath, into: dict[str, list[int]]) -> None:
    """Wrap the end's two readers (installed with add_reader) so each pass's duration is kept."""
    loop = asyncio.get_running_loop()
    sock_reader, tap_reader = dp._readers()

    def wrap(name: str, reader: object) -> object:
        def run() -> None:
            t0 = time.perf_counter_ns()
            reader()  # type: ignore[operator]
            into[name].append(time.perf_counter_ns() - t0)
        return run

    loop.remove_reader(dp._sock_fd)
    loop.add_reader(dp._sock_fd, wrap("receive", sock_reader))
    loop.remove_reader(dp._tap_fd)
    loop.add_reader(dp._tap_fd, wrap("send", tap_reader))


async def run(datapath: str, pings: int, size: int, interval: float = 0.0) -> None:
    pair = await make_pair(datapath)
    loop = asyncio.get_running_loop()
    passes: dict[str, list[int]] = {"receive": [], "send": []}
    for end in (pair.a, pair.b):
        timed_passes(end.datapath, passes)
    a_test, b_test = pair.a.tap._test_end, pair.b.tap._test_end
    rtts: list[int] = []
    done = asyncio.Event()
    sent_at = [0]

    def at_b() -> None:
        for f in pair.b.tap.frames():
            b_test.send(f)  # the host's answer, at once

    def at_a() -> None:
        if pair.a.tap.frames():
            rtts.append(time.perf_counter_ns() - sent_at[0])
            if len(rtts) >= pings:
                done.set()
                return
            if interval:
                loop.call_later(interval, send)
            else:
                loop.call_soon(send)

    def send() -> None:
        sent_at[0] = time.perf_counter_ns()
        a_test.send(payload)

    payload = frame(0, size)
    loop.add_reader(b_test.fileno(), at_b)
    loop.add_reader(a_test.fileno(), at_a)
    send()
    await asyncio.wait_for(done.wait(), timeout=120 + pings * interval)
    loop.remove_reader(b_test.fileno())
    loop.remove_reader(a_test.fileno())
    close(pair)
    rtts = rtts[len(rtts) // 10:]  # the first tenth warms up
    us = sorted(r / 1000 for r in rtts)
    gap = f", {interval * 1000:g} ms apart" if interval else ", back to back"
    print(f"{datapath}: {len(us)} pings of {size} bytes{gap}: RTT median {statistics.median(us):.1f} us, "
          f"90th percentile {us[int(0.9 * len(us))]:.1f} us")
    for name, values in passes.items():
        tail = sorted(v / 1000 for v in values[len(values) // 10:])
        print(f"  {name} pass: median {statistics.median(tail):.1f} us, 90th percentile "
              f"{tail[int(0.9 * len(tail))]:.1f} us ({len(values)} passes, 2 per ping)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datapath", choices=["native", "python"], default="native")
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--size", type=int, default=98, help="frame bytes (default 98: a 56-byte ping)")
    ap.add_argument("--interval", type=float, default=0.0, help="ms between pings (default 0: back to back)")
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help="the event loop (default uvloop, the daemon's)")
    args = ap.parse_args()
    pings = run(args.datapath, args.pings, args.size, args.interval / 1000)
    if args.loop == "asyncio":
        asyncio.run(pings)
        return 0
    import uvloop

    uvloop.run(pings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
