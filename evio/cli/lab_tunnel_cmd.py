"""`evio lab tunnel A B`: bring one tunnel up between two nodes of a running lab.

    evio lab up --nodes 2 --nat eim
    evio lab tunnel 1 2 [--name NAME] [--relay fallback|never|only] [--duration SECONDS]

Prints the path kind (direct or relay), the candidate types and the setup time
on both nodes, pings through the tunnel, and keeps it up until Ctrl-C (or for
--duration seconds; 0 closes it at once). The TAPs carry the nodes' overlay
addresses, so `evio lab exec 1 -- ping <node 2's overlay address>` works
meanwhile. The tunnel is standalone: it refuses to run while either node's
evio daemon does (`evio lab daemon stop N`, or `evio lab up --no-daemons`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evio.cli.lab_cmd import add_name_option, attach


def register(lab_sub: Any) -> None:
    parser: argparse.ArgumentParser = lab_sub.add_parser(
        "tunnel",
        help="bring one tunnel up between two lab nodes and report path and setup time",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_name_option(parser)
    parser.add_argument("a", help="node that sends the offer: 1, node1 or n1")
    parser.add_argument("b", help="node that answers")
    parser.add_argument("--relay", choices=["fallback", "never", "only"], default="fallback", help="TURN relay policy")
    parser.add_argument("--duration", type=float, help="close after this many seconds (default: until Ctrl-C)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evio.lab.errors import LabError
    from evio.lab.tunnel_tool import open_lab_tunnel, parse_node
    from evio.tunnel.path.ice import RelayPolicy

    try:
        lab = attach(args)
        a, b = parse_node(args.a), parse_node(args.b)
        if a == b:
            raise ValueError("a tunnel needs two different nodes")
        lab.node(a), lab.node(b)
        lab.require_no_daemons([a, b])  # their daemons hold the TAP names and overlay addresses it would take
    except (LabError, ValueError, KeyError, IndexError) as exc:
        print(f"evio lab tunnel: {exc}", file=sys.stderr)
        return 2
    try:
        tunnel, result = open_lab_tunnel(lab, a, b, RelayPolicy(args.relay))
    except (RuntimeError, TimeoutError, EOFError) as exc:
        print(f"evio lab tunnel: {exc}", file=sys.stderr)
        return 1
    try:
        print("\n".join(result.lines()), flush=True)
        if args.duration != 0:
            print("  up; Ctrl-C closes it" if args.duration is None else f"  up for {args.duration:g} s", flush=True)
            reason = tunnel.wait_down(args.duration)
            if reason:
                print(f"  down: {reason}")
    except KeyboardInterrupt:
        pass
    finally:
        tunnel.close()
    print("  closed")
    return 0 if result.ping_received == result.ping_sent else 1
