#!/usr/bin/env python3
"""Signaling benchmark on a fresh lab (root): logins, discovery, remote-action round trips.

    .venv/bin/python benchmarks/signal_bench.py [--nodes 8] [--nat mixed] [--requests 200]

Brings up its own lab (name "evsb"), runs evio.lab.signal_bench.run_bench, and
removes the lab again. On a running lab use `evio lab signal-bench` instead.
"""

from __future__ import annotations

import argparse
import logging
import sys

from evio.lab.lab import Lab
from evio.lab.signal_bench import run_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--nat", default="mixed")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--name", default="evsb", help="lab name (default evsb)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    with Lab.up(args.name, nodes=args.nodes, nat=args.nat) as lab:
        result = run_bench(lab, requests=args.requests)
    print("\n".join(result.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
