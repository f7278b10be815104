"""Liveness tick scheduling (not a test): a timer per tunnel against the shared tick grid.

    .venv/bin/python benchmarks/tick_bench.py [--tunnels 8,16,32] [--seconds 20]

For each tunnel count, one uvloop event loop runs that many supervisor-like
loops ticking every 0.375 s (the default up tunnel's `keepalive / 4`), each
started at a random phase as tunnels come up at different times, and nothing
else: first the way `Tunnel._supervise` waited before (`asyncio.wait_for` on
its wake event, a timer and a task per tunnel and tick), then on the shared
grid (`evio.tunnel.liveness_ticks`). Printed: CPU of the process as a % of one core
and its context switches per second (each a wake-up of the loop), the grid's
beside the baseline's from the same run, and their ratio. Only the scheduling
is measured; the work each tick does (counters, keepalives) is the same both
ways.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evio.tunnel.liveness_ticks import tick_grid

INTERVAL = 0.375

Ticker = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def timer_per_tunnel(stop: asyncio.Event) -> None:
    await asyncio.sleep(random.random() * INTERVAL)
    wake = asyncio.Event()
    while not stop.is_set():
        try:
            await asyncio.wait_for(wake.wait(), INTERVAL)
        except TimeoutError:
            pass
        wake.clear()


async def shared_grid(stop: asyncio.Event) -> None:
    await asyncio.sleep(random.random() * INTERVAL)
    while not stop.is_set():
        await tick_grid().wait(INTERVAL)


async def measure(ticker: Ticker, tunnels: int, seconds: float) -> tuple[float, float]:
    """CPU % of a core and context switches per second while `tunnels` loops tick."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(ticker(stop)) for _ in range(tunnels)]
    await asyncio.sleep(INTERVAL)  # every loop past its random start
    before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    await asyncio.sleep(seconds)
    after, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time() - cpu
    stop.set()
    await asyncio.gather(*tasks)
    switches = after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw
    return 100 * cpu / seconds, switches / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tunnels", default="8,16,32", help="tunnel counts, comma-separated (default 8,16,32)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds measured per row (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    print(f"load average {os.getloadavg()[0]:.1f}; ticks every {INTERVAL} s per tunnel")
    print(f"{'tunnels':>7} {'timer each: CPU %':>18} {'wake/s':>7} {'grid: CPU %':>12} {'wake/s':>7}"
          f" {'CPU ratio':>10} {'wake ratio':>11}")  # fmt: skip
    for tunnels in (int(x) for x in args.tunnels.split(",")):
        base_cpu, base_wake = uvloop.run(measure(timer_per_tunnel, tunnels, args.seconds))
        grid_cpu, grid_wake = uvloop.run(measure(shared_grid, tunnels, args.seconds))
        print(f"{tunnels:>7} {base_cpu:>18.3f} {base_wake:>7.1f} {grid_cpu:>12.3f} {grid_wake:>7.1f}"
              f" {grid_cpu / base_cpu if base_cpu else 0:>10.2f} {grid_wake / base_wake if base_wake else 0:>11.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
