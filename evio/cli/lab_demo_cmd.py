"""`evio lab demo`: a whole overlay on this machine, shown and removed in one command (root).

    evio lab demo [--nodes 8] [--nat mixed] [--successors 2] [--long-distance K] [--keep]

Brings up a lab of full nodes (prosody, coturn, and per node a NAT router,
Open vSwitch and an evio daemon), waits until successor links close the ring,
prints every node's links by type and an all-pairs ping summary over the
overlay addresses, and removes the lab again (also on failure or Ctrl-C;
--keep leaves it up). Exit 0 only if the ring closed and every pair answered.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from evio.cli.count_arguments import not_negative, positive
from evio.cli.lab_cmd import (
    ProgressPrinter,
    reports_lab_errors,
    sigterm_as_interrupt,
    topology_section,
)
from evio.cli.lab_node_cmd import all_pairs_ping, print_topology, wait_ring
from evio.lab.lab import Lab
from evio.lab.netns import LinuxHost
from evio.lab.topology import MAX_NODES, NAT_CHOICES

DEFAULT_NAME = "demo"


def register(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser(
        "demo", help="bring up an overlay of full nodes, show its ring and an all-pairs ping, remove it",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
    )
    p.add_argument("--name", default=DEFAULT_NAME, help=f"lab name (default {DEFAULT_NAME})")
    p.add_argument("--nodes", "-n", type=int, default=8, help=f"number of nodes, 2..{MAX_NODES} (default 8)")
    p.add_argument("--nat", choices=NAT_CHOICES, default="mixed", help="NAT kind of the nodes (default mixed)")
    p.add_argument("--successors", "-s", type=positive, default=2, help="successor links per node (default 2)")
    p.add_argument("--long-distance", "-k", type=not_negative, default=None,
                   help="long-distance links per node (default floor(log2(n)))")
    p.add_argument("--ring-timeout", type=float, default=None, metavar="SECONDS",
                   help="how long to wait for the ring (default 60 + 4 per node)")
    p.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    p.set_defaults(handler=reports_lab_errors(demo_command))


def demo_command(args: argparse.Namespace) -> int:
    LinuxHost().check_ready()
    topology = topology_section(args)
    printer = ProgressPrinter()
    started = time.monotonic()
    print(f"bringing up {args.nodes} nodes behind {args.nat} NAT (s={args.successors}, "
          f"k={'log2(n)' if args.long_distance is None else args.long_distance}) ...", flush=True)
    with sigterm_as_interrupt():
        lab = Lab.up(args.name, nodes=args.nodes, nat=args.nat, topology=topology, daemons=True, progress=printer)
        try:
            printer.finish()
            print(f"lab {lab.name} up in {time.monotonic() - started:.1f} s; waiting for the ring ...", flush=True)
            ring_started = time.monotonic()
            topo, closed = wait_ring(lab, args.ring_timeout or 60.0 + 4.0 * args.nodes)
            print(f"ring {'closed' if closed else 'NOT closed'} after {time.monotonic() - ring_started:.1f} s\n")
            print_topology(lab, topo)
            summary = all_pairs_ping(lab, count=1)
            print()
            print(summary.text())
        finally:
            if args.keep:
                print(f"\nthe lab stays up: evio lab down --name {lab.name}")
            else:
                report = lab.close()
                print(f"\nlab {lab.name} removed in {report.seconds:.1f} s")
    return 0 if closed and not summary.failed else 1
