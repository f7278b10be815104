"""`evio server init`: set up the server host (XMPP server, coturn, TLS) for evio's overlays.

    evio server init --domain overlay.example.net --address 203.0.113.7
    evio server init --domain overlay.example.net --address 203.0.113.7 --xmpp ejabberd
    evio server init --domain overlay.example.net --address 203.0.113.7 --print   # for servers you run already

Idempotent: a second run changes nothing and says so; the CA and keys are never made again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from evio.server.init import InitError, InitOptions, print_additions, run_init, split_ports
from evio.server.settings import DEFAULT_STATE_DIR

EXIT_OK = 0
EXIT_FAILED = 1

_D = InitOptions(domain="", address="")  # the defaults, shown in --help


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("server", help="set up the server host (XMPP server, coturn)")
    actions = parser.add_subparsers(dest="server_action", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="write the XMPP server's and coturn's configuration and the TLS certificate for evio",
        description="Write a complete prosody (or ejabberd) and coturn configuration for evio, make a TLS CA "
        "and a certificate for the XMPP domain (or use --cert/--key), and save the settings `evio member` "
        "uses. Idempotent. Files replaced are kept once as <file>.evio-orig.",
    )
    init.add_argument("--domain", required=True, help="the XMPP domain: members are NODE@DOMAIN")
    init.add_argument("--address", required=True, help="what members connect to: this host's IP address or DNS name")
    init.add_argument("--xmpp", choices=("prosody", "ejabberd"), default="prosody", help="the XMPP server (prosody)")
    init.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help=f"evio's server state ({DEFAULT_STATE_DIR})"
    )
    init.add_argument("--cert", type=Path, help="a certificate (chain, PEM) for the domain, instead of making one")
    init.add_argument("--key", type=Path, help="its private key (PEM)")
    init.add_argument("--ca", type=Path, help="with --cert: the CA members verify it with (default: their system's)")
    init.add_argument("--xmpp-port", type=int, default=_D.xmpp_port)
    init.add_argument("--turn-port", type=int, default=_D.turn_port)
    init.add_argument("--relay-ports", default="-".join(map(str, _D.relay_ports)), metavar="LOW-HIGH",
                      help="coturn's relay port range, udp (%(default)s)")  # fmt: skip
    files = init.add_argument_group("files (the Debian packages' own by default)")
    for option, default in (("--prosody-config", _D.prosody_config), ("--groups-file", _D.groups_file),
                            ("--prosody-certs", _D.prosody_certs), ("--ejabberd-config", _D.ejabberd_config),
                            ("--turn-config", _D.turn_config), ("--turn-db", _D.turn_db),
                            ("--systemd-dir", _D.systemd_dir)):  # fmt: skip
        files.add_argument(option, type=Path, default=default, help=f"(default {default})")
    init.add_argument("--print", action="store_true", dest="print_only",
                      help="write nothing; print what to add to an XMPP server and coturn you run already")  # fmt: skip
    init.set_defaults(handler=init_command)


def init_command(args: argparse.Namespace) -> int:
    try:
        options = InitOptions(
            domain=args.domain, address=args.address, xmpp=args.xmpp, state_dir=args.state_dir, cert=args.cert,
            key=args.key, ca=args.ca, xmpp_port=args.xmpp_port, turn_port=args.turn_port,
            relay_ports=split_ports(args.relay_ports), prosody_config=args.prosody_config,
            groups_file=args.groups_file, prosody_certs=args.prosody_certs, ejabberd_config=args.ejabberd_config,
            turn_config=args.turn_config, turn_db=args.turn_db, systemd_dir=args.systemd_dir,
        )  # fmt: skip
        lines = print_additions(options) if args.print_only else run_init(options).lines()
    except InitError as exc:
        print(f"evio server init: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"evio server init: {exc.filename or ''}: {exc.strerror or exc} (run as root?)", file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(lines))
    return EXIT_OK
