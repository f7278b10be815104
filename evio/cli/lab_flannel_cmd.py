"""`evio lab flannel`: Flannel over an evio overlay behind mixed NATs, with real parts (root; the paper's E10).

    evio lab flannel [--nodes 3] [--nat mixed] [--seconds 3] [--rounds 3] [--keep]

Brings up a lab of full nodes, etcd on node 1's overlay address, flanneld
(scripts/build-go-tools) on every node and one pod per node attached by the
CNI bridge and host-local plugins as Flannel's CNI plugin would. With the
vxlan and then the host-gw backend bound to the evio bridge it checks ping
and TCP between the pods of every ordered pair of nodes, captures every NAT
router's WAN side meanwhile (only evio's encrypted UDP may be there), and
measures pod-to-pod TCP beside node-to-node TCP over the same overlay path.
Last, the negative control: vxlan bound to the node's LAN interface must not
connect any pods across the NATs. Prints a table; removes everything (also on
failure or Ctrl-C; --keep leaves the lab up). Exit 0 only if every check held.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from evio.cli.count_arguments import positive
from evio.cli.lab_cmd import ProgressPrinter, reports_lab_errors, sigterm_as_interrupt
from evio.cli.lab_node_cmd import wait_ring
from evio.lab import flannel_scenario
from evio.lab.flannel import check_tools
from evio.lab.lab import Lab
from evio.lab.netns import LinuxHost
from evio.lab.topology import NAT_CHOICES

DEFAULT_NAME = "flan"


def register(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser(
        "flannel", help="Flannel (vxlan, host-gw) over an overlay behind NATs: pods, captures, TCP figures",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
    )
    p.add_argument("--name", default=DEFAULT_NAME, help=f"lab name (default {DEFAULT_NAME})")
    p.add_argument("--nodes", "-n", type=int, default=3, help="number of nodes, at least 3 (default 3)")
    p.add_argument("--nat", choices=NAT_CHOICES, default="mixed", help="NAT kind of the nodes (default mixed)")
    p.add_argument("--seconds", type=positive, default=3, help="length of each iperf3 run (default 3)")
    p.add_argument("--rounds", type=positive, default=3,
                   help="alternated node/pod iperf3 runs per backend; medians are shown (default 3)")
    p.add_argument("--from", dest="src", type=int, default=1, help="TCP figures from this node (default 1)")
    p.add_argument("--to", dest="dst", type=int, default=2, help="TCP figures to this node (default 2)")
    p.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    p.set_defaults(handler=reports_lab_errors(flannel_command))


def flannel_command(args: argparse.Namespace) -> int:
    LinuxHost().check_ready()
    check_tools()
    if args.nodes < 3:
        raise SystemExit("evio lab flannel: at least 3 nodes (every NAT kind of --nat mixed)")
    printer = ProgressPrinter()
    started = time.monotonic()
    print(f"bringing up {args.nodes} nodes behind {args.nat} NAT ...", flush=True)
    with sigterm_as_interrupt():
        lab = Lab.up(args.name, nodes=args.nodes, nat=args.nat, daemons=True, progress=printer)
        try:
            printer.finish()
            _, closed = wait_ring(lab, 60.0 + 4.0 * args.nodes)
            print(f"lab {lab.name} up, ring {'closed' if closed else 'NOT closed'} after "
                  f"{time.monotonic() - started:.1f} s", flush=True)
            if not closed:
                return 1
            report = flannel_scenario.run(lab, src=args.src, dst=args.dst, seconds=args.seconds,
                                          rounds=args.rounds, log=lambda line: print(line, flush=True))
            print()
            print("\n".join(report.lines(lab)))
            problems = report.problems()
            print("\n" + ("every check held" if not problems else "FAILED:\n  " + "\n  ".join(problems)))
        finally:
            if args.keep:
                print(f"\nthe lab stays up: evio lab down --name {lab.name}")
            else:
                down = lab.close()
                print(f"\nlab {lab.name} removed in {down.seconds:.1f} s")
    return 0 if not problems else 1
