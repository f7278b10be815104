"""Fuzz every parser and receive path that takes untrusted input; print a table.

    .venv/bin/python benchmarks/fuzz.py [--inputs N] [--target NAME ...] [--seed S]

For each target (see evio/testing/fuzz.py): inputs run, accepted, rejections by
reason, and unexpected exceptions, which must be 0: each is printed with the
first input that raised it and its traceback. Single process; exits 1 if any
target had an unexpected exception. The default is 10^6 inputs per target.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evio.testing.fuzz import TARGETS, Result, fuzz_targets, quiet_logging, run_target


def table(results: list[Result], reasons_shown: int) -> str:
    lines = [f"{'target':<12} {'inputs':>9} {'accepted':>9} {'rejected':>9} {'unexpected':>10} {'inputs/s':>9}  top rejections"]
    for r in results:
        rejected = sum(r.rejected.values())
        rate = r.inputs / r.seconds if r.seconds else 0.0
        top = ", ".join(f"{reason} {n}" for reason, n in r.rejected.most_common(reasons_shown))
        lines.append(f"{r.target:<12} {r.inputs:>9} {r.accepted:>9} {rejected:>9} {sum(r.unexpected.values()):>10} {rate:>9.0f}  {top}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target (default 10^6)")
    ap.add_argument("--target", action="append", choices=TARGETS, help="only these targets (default all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reasons", type=int, default=6, help="rejection reasons shown per target in the table")
    args = ap.parse_args(argv)
    quiet_logging()
    results = asyncio.run(_run(args.target or list(TARGETS), args.inputs, args.seed))
    print(table(results, args.reasons))
    print()
    for r in results:
        print(f"{r.target}: rejections by reason")
        for reason, n in r.rejected.most_common():
            print(f"  {n:>9}  {reason}")
    failed = False
    for r in results:
        for key, n in r.unexpected.items():
            failed = True
            data, trace = r.examples[key]
            print(f"\nUNEXPECTED in {r.target} ({n}x): {key}\n  first input: {data[:300]!r}\n{trace}")
    return 1 if failed else 0


async def _run(names: list[str], inputs: int, seed: int) -> list[Result]:
    results = []
    with fuzz_targets() as targets:
        for name in names:
            result = run_target(targets[name], inputs, seed)
            results.append(result)
            print(f"{name}: {result.inputs} inputs in {result.seconds:.1f} s, {sum(result.unexpected.values())} unexpected",
                  file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
