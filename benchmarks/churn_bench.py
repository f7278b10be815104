"""E8 at the paper's size and the fault series, longer than CI runs them (root).

    .venv/bin/python benchmarks/churn_bench.py                 # n = 32, 180 s of churn
    .venv/bin/python benchmarks/churn_bench.py --nodes 16 --seconds 60 --seed 3

Runs tests/lab/test_churn.py with EVIO_SCENARIO_NODES, EVIO_CHURN_SECONDS and
EVIO_CHURN_SEED set, and prints its figures as a table: streams broken, the
longest stream stall and ping loss under churn (paper: no iperf failure or
timeout), then each fault's recovery time beside its target. CI runs the same
scenarios with n = 16 and 40 s of churn.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=180.0, help="how long nodes leave and join")
    parser.add_argument("--seed", default="8", help="which nodes churn, and when they leave or join")
    parser.add_argument("-k", dest="select", default="", help="pytest -k expression (e.g. e8, daemon)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evio-churn-") as tmp:
        results = Path(tmp) / "figures.jsonl"
        env = {**os.environ, "EVIO_SCENARIO_NODES": str(args.nodes), "EVIO_CHURN_SECONDS": str(args.seconds),
               "EVIO_CHURN_SEED": args.seed, "EVIO_SCENARIO_RESULTS": str(results)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "tests/lab/test_churn.py")]
        if args.select:
            command += ["-k", args.select]
        status = subprocess.run(command, cwd=REPO, env=env, check=False).returncode
        figures = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    print(f"\nE8 and faults: n={args.nodes}, {args.seconds:g} s of churn, seed {args.seed}")
    print(f"{'scenario':<9}{'quantity':<62}{'measured':>12}  target / paper")
    for f in figures:
        value = f"{f['measured']:.2f}" if isinstance(f["measured"], float) else str(f["measured"])
        print(f"{f['scenario']:<9}{f['quantity']:<62}{value + ' ' + f['unit']:>12}  {f['target'] or f['paper'] or '-'}")
        if f["note"]:
            print(f"{'':<9}  {f['note']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
