"""The `evio` command line.

Each subcommand lives in its own module here and exposes
``register(subparsers)``; it adds its parser and sets ``handler`` to a function
taking the parsed namespace and returning the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

# Subcommand modules, in the order they appear in --help.
_COMMANDS = ("evio.cli.run_cmd", "evio.cli.status_cmd", "evio.cli.netcheck_cmd", "evio.cli.attach_cmd", "evio.cli.join_cmd",
             "evio.cli.config_cmd", "evio.cli.server_cmd",
             "evio.cli.member_cmd", "evio.cli.pki_cmd", "evio.cli.sim_cmd", "evio.cli.lab_cmd")


# Commands whose parser is built alone, without importing the others: those a health check runs
# often, and the daemon, which would otherwise hold for its whole life what the lab, the simulator and
# the plots import (slixmpp with pygments among them, before `run` keeps pygments out): 5 MB resident.
_LIGHT = {"status": "evio.cli.status_cmd", "ping": "evio.cli.status_cmd", "run": "evio.cli.run_cmd",
          "attach": "evio.cli.attach_cmd", "detach": "evio.cli.attach_cmd"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from evio import __version__

    parser = argparse.ArgumentParser(
        prog="evio",
        description="Peer-to-peer layer-2 overlay VPN (Symphony ring, Bounded Flood over Open vSwitch).",
    )
    parser.add_argument("--version", action="version", version=f"evio {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (repeatable)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (only,) if only is not None else _COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in arguments if not a.startswith("-")), None)
    light = _LIGHT.get(first) if first is not None and "--help" not in arguments and "-h" not in arguments else None
    if light == "evio.cli.run_cmd":
        # The daemon, before its config is read: cryptography loads bcrypt (0.4 MB) for encrypted
        # OpenSSH keys, which evio never reads; without it, loading one says "Need bcrypt module".
        sys.modules.setdefault("bcrypt", None)  # type: ignore[arg-type]
        # cryptography loads OpenSSL's legacy provider (Blowfish, CAST5, IDEA, SEED, RC2, RC4) when
        # imported unless told not to; no key, certificate or DTLS suite of evio uses one
        # (docs/performance.md, "A fourth look: where an idle daemon's 58 MB go (issue 25)").
        os.environ.setdefault("CRYPTOGRAPHY_OPENSSL_NO_LEGACY", "1")
        # cryptography.x509 takes `parseaddr` from email.utils at import, for RFC822Name values made
        # from strings, which the daemon never makes: email.utils runs on its first call.
        from evio.deferred_modules import defer, defer_inspect_tools, parseaddr

        defer("email.utils", {"parseaddr": parseaddr})
        # inspect (asyncio, dataclasses) imports dis and ast for its source and bytecode tools, which a
        # daemon never runs: each runs on its first use beyond the names inspect reads of it when imported.
        defer_inspect_tools()
    parser = build_parser(light)
    args = parser.parse_args(arguments)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from evio.node.logs import SecretRedactor

    for handler in logging.getLogger().handlers:
        handler.addFilter(SecretRedactor())  # -vv logs raw XMPP stanzas: never their credentials
    try:
        status: int = args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `evio ... | head`: the reader left; say nothing more and silence the
        # interpreter's own flush of stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return status


if __name__ == "__main__":
    sys.exit(main())
