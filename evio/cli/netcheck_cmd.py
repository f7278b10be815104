"""`evio netcheck`: what this node's network lets it reach, asked of the servers its config names.

Runs with or without the daemon (its sockets are its own). Exit status: 0 the node reaches what it
needs; 1 it does not (XMPP unreachable or its certificate not valid for the domain, no STUN answer
at all, a TURN server refusing, or none allocating); 2 the config cannot be read or is invalid.

`--server`, on the server host: whether the settings `evio server init` wrote are in effect (exit 1 when
one is not; 2 when init's server.json cannot be read).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path
from typing import Any

from evio.cli.config_file import load_or_report
from evio.server.join import config_path
from evio.server.settings import DEFAULT_STATE_DIR

EXIT_BAD_CONFIG = 2
MAX_TIMEOUT = 60.0


def register(sub: Any) -> None:
    default = config_path()
    parser: argparse.ArgumentParser = sub.add_parser(
        "netcheck",
        help="check this node's network: NAT, UDP, STUN, TURN, XMPP, path MTU",
        description="Ask every STUN, TURN and XMPP server in the config, concurrently and each under a "
        "deadline: IPv4 and IPv6 reachability, the NAT's mapping behaviour, whether UDP is blocked, each "
        "server's round trip, TURN allocation over UDP, TCP and TLS, the XMPP certificate, the path MTU.",
    )
    parser.add_argument("--config", "-c", default=str(default), metavar="FILE",
                        help=f"the node's config (default {default})")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    parser.add_argument("--timeout", type=_timeout, default=3.0, metavar="S",
                        help="seconds each server gets to answer (default 3)")  # fmt: skip
    parser.add_argument("--server", action="store_true",
                        help="on the server host: check the settings `evio server init` wrote (backlog, caches, "
                        "shapers, open files, somaxconn, coturn's relay limits)")  # fmt: skip
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR",
                        help=f"with --server: evio's server state ({DEFAULT_STATE_DIR})")  # fmt: skip
    parser.set_defaults(handler=netcheck_command)


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_TIMEOUT:g} seconds, not {text}")
    return value


def netcheck_command(args: argparse.Namespace) -> int:
    if args.server:
        return server_check_command(args)
    config = load_or_report(args.config, "evio netcheck: ")
    if isinstance(config, int):
        return EXIT_BAD_CONFIG
    from evio.netcheck.check import run_netcheck
    from evio.netcheck.findings import render_text, to_json

    report = asyncio.run(run_netcheck(config, args.timeout))
    print(to_json(report) if args.json else render_text(report))
    return report.exit_status


def server_check_command(args: argparse.Namespace) -> int:
    from evio.netcheck import server
    from evio.server.configs import DENIED_PEER_RANGES
    from evio.server.members import MemberError, Registry
    from evio.server.settings import ServerSettingsError, load_settings

    try:
        settings = load_settings(args.state_dir)
        registry = Registry(args.state_dir)
        members = sum(len(r.members) for o in registry.overlays() if (r := registry.load(o)) is not None)
    except (ServerSettingsError, MemberError) as exc:
        print(f"evio netcheck: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    target = server.ServerTarget(
        xmpp=settings.xmpp, xmpp_port=settings.xmpp_port, prosody_config=settings.prosody_config,
        ejabberd_config=settings.ejabberd_config, turn_config=settings.turn_config,
        denied_peer_ranges=DENIED_PEER_RANGES, members=members,
    )  # fmt: skip
    report = server.check_server(target, server.ProcReader())
    print(server.to_json(report) if args.json else server.render_text(report))
    return report.exit_status
