"""`evio run --config FILE`: the daemon, in the foreground (systemd runs it as is).

SIGHUP (systemd's ExecReload) re-reads and validates the config and applies
it to the running node (evio.node.reload); an invalid config, or one whose
secrets other users could read (as at the start), is logged, with the JSON
path of every problem, and the running one stays.

Exit status: 0 after SIGTERM/SIGINT and a clean teardown; 1 the config is
invalid; 2 it cannot be read, or it or a secret file it names is accessible
by other users (evio.config.secrets); 3 a dependency is missing (not root, no
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
from pathlib import Path
from typing import Any

from evio.cli.config_file import EXIT_INVALID as EXIT_INVALID_CONFIG
from evio.cli.config_file import EXIT_UNREADABLE as EXIT_UNREADABLE_CONFIG
from evio.cli.config_file import load_or_report
from evio.config.loader import ConfigError
from evio.config.model import Config
from evio.deferred_modules import defer, gpg, installed_version, version_info

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
    from evio.config.secrets import secret_problems

    refused = secret_problems(Path(name), config)  # the same check as `evio config check`
    if refused:
        for reason in refused:
            print(f"evio run: {reason}", file=sys.stderr)
        return EXIT_UNREADABLE_CONFIG

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
        return _run(config, name, use_uvloop=not args.no_uvloop)
    except NodeConfigError as exc:
        print(f"evio run: {name}: {exc}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    except DependencyError as exc:
        log.error("%s", exc)
        print(f"evio run: {exc}", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY


def keep_out_unused_modules() -> None:
    """Make what the daemon never uses unimportable; called before the node's parts are imported."""
    # slixmpp colours its stanza logs with pygments when it can import it (4 MB resident); a daemon
    # logs to journald or a file, so it is made unimportable here, before slixmpp is loaded.
    sys.modules.setdefault("pygments", None)  # type: ignore[arg-type]
    # slixmpp resolves with aiodns (pycares, cffi: 0.7 MB) when it can import it, else with the loop's
    # getaddrinfo; the client always names the server's host and port, so no SRV lookup is lost.
    sys.modules.setdefault("aiodns", None)  # type: ignore[arg-type]
    # slixmpp looks up its version with importlib.metadata when imported (zipfile, csv, email's parser);
    # the version is read from its dist-info's name instead (evio.deferred_modules.installed_version).
    defer("slixmpp.version", {"__version__": (version := installed_version("slixmpp")),
                              "__version_info__": version_info(version)})  # fmt: skip
    # Imported whole for a function a daemon never calls: calendar by pyOpenSSL (an X509 store's time),
    # pprint by netaddr (its debugging output), and slixmpp's GPG wrapper (XEP-0027, which evio does not
    # register; slixmpp binds `GPG` at import): 0.3 MB traced, each run on its first use.
    defer("calendar")
    defer("pprint")
    defer("slixmpp.thirdparty.gnupg", {"GPG": gpg})


def _run(config: Config, config_name: str, use_uvloop: bool) -> int:
    keep_out_unused_modules()
    from evio.bridge.ovs_bridge import openvswitch_module_loaded
    from evio.bridge.ovs_paths import ovs_run_dir
    from evio.config.state_dir import FileStateDir, resolve_node_id
    from evio.node.control import socket_path
    from evio.node.errors import DependencyError
    from evio.node.node import Node
    from evio.node.plan import plan_node
    from evio.node.platform import SystemPlatform
    from evio.sdn.controller_socket import controller_socket_path
    from evio.tunnel.path.candidates import underlay_ipv6_addresses

    try:
        node_id = resolve_node_id(config, FileStateDir(config.node.state_dir))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"evio run: {problem}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    from evio.node.systemd import Notifier

    # The SDN controller's Unix socket, in a directory of OVS's rundir only root may write (issue 21 M1).
    controller_socket = controller_socket_path(ovs_run_dir(), Path(config.node.state_dir))
    kernel_module = openvswitch_module_loaded()
    try:
        plan = plan_node(config, node_id, controller_socket=controller_socket, kernel_module_loaded=kernel_module,
                         ipv6_addresses=underlay_ipv6_addresses)
    except (OSError, ValueError) as exc:  # a password file changed since the check (FileCheckError is a ValueError)
        print(f"evio run: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE_CONFIG
    for overlay in config.overlays.values():
        if any(turn.rest_secret for turn in overlay.nat_traversal.turn):
            log.warning(
                "overlay %s: this node holds the TURN server's REST secret, so anyone who takes it can mint "
                "TURN credentials for any user; prefer per-node static credentials (docs/reference.md: Secrets)", overlay.id,
            )
    platform = SystemPlatform(controller_socket, rng=random.SystemRandom())
    notifier = Notifier.from_environment()
    node = Node(plan, platform, control_socket=socket_path(config.node.state_dir), notifier=notifier)
    reloads: set[asyncio.Task[None]] = set()

    def on_sighup() -> None:
        task = asyncio.get_running_loop().create_task(
            reload_config(node, config_name, config, controller_socket, kernel_module), name="reload")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, node.stop)
        loop.add_signal_handler(signal.SIGHUP, on_sighup)
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


async def reload_config(
    node: Any, config_name: str, running: Config, controller_socket: Path, kernel_module: bool
) -> None:
    """SIGHUP: read and check the config again and apply it; on any problem log it and keep the running one."""
    from evio.config.loader import ConfigFileError, load_config
    from evio.config.state_dir import FileStateDir, resolve_node_id
    from evio.node.errors import NodeConfigError
    from evio.node.plan import plan_node
    from evio.node.reload import ReloadRefused
    from evio.tunnel.path.candidates import underlay_ipv6_addresses

    state_dir = running.node.state_dir
    log.info("reload: reading %s", config_name)
    try:
        config = await asyncio.to_thread(load_config, config_name)
    except ConfigFileError as exc:
        where = f"{config_name}:{exc.location}" if exc.location else config_name
        log.error("reload refused, the running config stays: %s: %s", where, exc.reason)
        return
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("reload refused, the running config stays: %s: %s", config_name, problem)
        return
    from evio.config.secrets import secret_problems

    refused = await asyncio.to_thread(secret_problems, Path(config_name), config)  # as at the start
    for reason in refused:
        log.error("reload refused, the running config stays: %s", reason)
    if refused:
        return
    try:
        if config.node.state_dir != state_dir:
            raise ReloadRefused(f"node.state_dir changed ({state_dir} -> {config.node.state_dir}); restart the daemon")
        node_id = resolve_node_id(config, FileStateDir(state_dir))
        plan = plan_node(config, node_id, controller_socket=controller_socket, kernel_module_loaded=kernel_module,
                         ipv6_addresses=underlay_ipv6_addresses)
        change = await node.reload(plan)
    except (ConfigError, NodeConfigError, ReloadRefused) as exc:
        log.error("reload refused, the running config stays: %s: %s", config_name, exc)
        return
    except Exception:
        log.exception("reload failed part-way; see the status for what runs")
        return
    if config.logging != running.logging:
        log.warning("reload: logging settings take effect at the next restart")
    log.info("reload done: %s", change.summary())
