"""`evio attach` and `evio detach`: put a host interface on a running overlay's bridge, or take it off.

Clients of the daemon's control socket, like `evio status`. The daemon checks
the interface (it exists, is in no other bridge, is not the uplink) and
answers with one line saying why when it refuses; nothing is changed then.
The config's `attach` list does the same at start and on reload; a port
attached here stays until `evio detach` or the daemon stops.

Exit status: 0 done; 1 refused, or no daemon to ask; 2 bad --config.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evio.cli.status_cmd import EXIT_BAD_CONFIG, EXIT_NO_DAEMON, EXIT_OK, _socket_options, control_socket

ATTACH_TIMEOUT = 35.0  # the daemon answers within its own 30 s request timeout


def register(sub: Any) -> None:
    for name, verb, text in (
        ("attach", attach_command, "put a host interface (a veth, a VM's tap, a NIC) on an overlay's bridge"),
        ("detach", detach_command, "take an attached interface off an overlay's bridge"),
    ):
        parser = sub.add_parser(name, help=text, description=f"Ask the running daemon to {text}.")
        parser.add_argument("overlay", metavar="OVERLAY", help="the overlay id (as in the config)")
        parser.add_argument("interface", metavar="IFACE", help="the host interface")
        _socket_options(parser)
        parser.set_defaults(handler=verb)


def attach_command(args: argparse.Namespace) -> int:
    status, answer = _ask(args, "attach")
    if answer is not None:
        mtu = f", MTU {answer['mtu']}" if answer.get("mtu") else ""
        print(f"{args.interface} attached to overlay {args.overlay}{mtu}")
    return status


def detach_command(args: argparse.Namespace) -> int:
    status, answer = _ask(args, "detach")
    if answer is not None:
        print(f"{args.interface} detached from overlay {args.overlay}")
    return status


def _ask(args: argparse.Namespace, request: str) -> tuple[int, dict[str, Any] | None]:
    """(exit status, the daemon's answer or None after printing why there is none)."""
    from evio.node.control_client import ControlError, query

    path = control_socket(args, request)
    if path is None:
        return EXIT_BAD_CONFIG, None
    try:
        return EXIT_OK, query(path, request, ATTACH_TIMEOUT, {"overlay": args.overlay, "interface": args.interface})
    except ControlError as exc:
        print(f"evio {request}: {exc}", file=sys.stderr)
        return EXIT_NO_DAEMON, None
