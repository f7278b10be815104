"""`evio lab signal-bench`: time XMPP signaling across a running lab.

    evio lab up --nodes 8 --nat mixed
    evio lab signal-bench [--name NAME] [--requests 200]

Starts a SignalClient in every node's namespace (behind its NAT, STARTTLS
verified against the lab CA), and reports the time to log in, the time until
every node knows every other, and the remote-action round trip. It logs in
with the nodes' own accounts and fixed resources, so it refuses to run while
evio daemons do (the server would swap sessions): `evio lab daemon stop N`,
or `evio lab up --no-daemons`.
"""

from __future__ import annotations

import argparse
from typing import Any

from evio.cli.lab_cmd import add_name_option, attach


def register(lab_sub: Any) -> None:
    parser: argparse.ArgumentParser = lab_sub.add_parser(
        "signal-bench",
        help="time signaling logins, discovery and remote-action round trips in a running lab",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_name_option(parser)
    parser.add_argument("--requests", type=int, default=200, help="echo requests to time (default 200)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evio.lab.errors import LabError
    from evio.lab.signal_bench import run_bench

    try:
        lab = attach(args)
        lab.require_no_daemons()  # the server would swap their sessions for ours
    except LabError as exc:
        print(f"evio lab signal-bench: {exc}")
        return 1
    if args.requests < 1:
        print("evio lab signal-bench: --requests must be at least 1")
        return 2
    if len(lab.nodes) < 2:
        print("evio lab signal-bench: the lab needs at least 2 nodes")
        return 2
    result = run_bench(lab, requests=args.requests)
    print("\n".join(result.lines()))
    return 0
