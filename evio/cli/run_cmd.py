"""`evio run --config FILE`: the daemon, in the foreground (systemd runs it as is).

Exit status: 0 after SIGTERM/SIGINT and a clean teardown; 1 the config is
invalid; 2 it cannot be read; 3 a dependency is missing (not root, no
ovs-vsctl, OVSDB unreachable, os-ken missing, no journald module); 4 the node
failed while starting or running.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import sys
from typing import Any

from evio.cli.config_file import EXIT_INVALID as EXIT_INVALID_CONFIG
from evio.cli.config_file import load_or_report
from evio.config.loader import ConfigError
from evio.config.model import Config

EXIT_OK = 0
EXIT_MISSING_DEPENDENCY = 3
EXIT_FAILED = 4

log = logging.getLogger("evio.run")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the node daemon (root)",
        description="Run the evio daemon for every overlay in the config, in the foreground, until SIGTERM/SIGINT.",
    )
    parser.add_argument("--config", "-c", required=True, metavar="FILE", help="daemon config (see `evio config example`)")
    parser.add_argument("--no-uvloop", action="store_true", help="use asyncio's own event loop")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    name: str = args.config
    config = load_or_report(name, "evio run: ", f"invalid config; check it with `evio config check {name}`")
    if isinstance(config, int):
        return config

    from evio.node.errors import DependencyError, NodeConfigError
    from evio.node.logs import configure_logging
    from evio.node.preflight import LinuxProbe, preflight

    missing = preflight(LinuxProbe())
    if missing:
        for dependency in missing:
            print(f"evio run: {dependency}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    try:
        configure_logging(config.logging, args.verbose)
    except DependencyError as exc:
        print(f"evio run: {exc}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    except OSError as exc:
        print(f"evio run: cannot open the log: {exc}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    try:
        return _run(config, use_uvloop=not args.no_uvloop)
    except NodeConfigError as exc:
        print(f"evio run: {name}: {exc}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    except DependencyError as exc:
        log.error("%s", exc)
        print(f"evio run: {exc}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY


def _run(config: Config, use_uvloop: bool) -> int:
    from evio.bridge.ovs_bridge import openvswitch_module_loaded
    from evio.config.state_dir import FileStateDir, resolve_node_id
    from evio.node.control import socket_path
    from evio.node.errors import DependencyError
    from evio.node.node import Node
    from evio.node.plan import plan_node
    from evio.node.platform import SystemPlatform
    from evio.node.sdn import free_tcp_port

    try:
        node_id = resolve_node_id(config, FileStateDir(config.node.state_dir))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"evio run: {problem}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    controller_port = free_tcp_port()
    plan = plan_node(config, node_id, controller_port=controller_port, kernel_module_loaded=openvswitch_module_loaded())
    platform = SystemPlatform(controller_port, rng=random.SystemRandom())
    node = Node(plan, platform, control_socket=socket_path(config.node.state_dir))

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, node.stop)
        try:
            fatal = await node.run()
        except DependencyError:
            raise  # reported by run_command with its own exit status
        except Exception as exc:
            log.exception("node failed")
            print(f"evio run: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if fatal is not None:
            print(f"evio run: stopped: {fatal}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK

    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            log.info("uvloop not installed; using asyncio's event loop")
        else:
            return uvloop.run(main())
    return asyncio.run(main())

