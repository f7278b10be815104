"""`evio lab`: a NATed multi-node deployment on this machine (root only).

    evio lab up --nodes N [--successors S] [--long-distance K] [--nat eim|symmetric|none|mixed]
                [--name NAME] [--rate MBIT] [--no-daemons]
    evio lab down [--name NAME]
    evio lab exec [--name NAME] NODE -- CMD...
    evio lab status [--name NAME] [--json]

More `lab` subcommands live in their own modules: list them in
LAB_COMMANDS; each has `register(lab_subparsers)` that adds its parser and sets
`handler`, and may use `add_name_option` and `attach` from here.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from types import FrameType
from typing import Any

from evio.cli.count_arguments import not_negative, positive
from evio.lab.ejabberd import XMPP_KINDS
from evio.lab.errors import LabError, LabNotFoundError
from evio.lab.lab import Lab, LabStatus, Progress
from evio.lab.netns import LinuxHost
from evio.lab.topology import DEFAULT_LAB_NAME, MAX_NODES, NAT_CHOICES

# Modules adding `evio lab <sub>` commands (later: tunnel, ping, iperf, topology).
LAB_COMMANDS: tuple[str, ...] = (
    "evio.cli.lab_node_cmd",
    "evio.cli.lab_demo_cmd",
    "evio.cli.lab_tunnel_cmd",
    "evio.cli.lab_signal_cmd",
    "evio.cli.lab_flannel_cmd",
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "lab",
        help="NATed multi-node lab in network namespaces (root)",
        description="A deployment on one machine: a public namespace with prosody and coturn, "
        "and one namespace per node behind its own NAT router.",
    )
    parser.set_defaults(handler=lambda args: _usage(parser))
    lab_sub = parser.add_subparsers(dest="lab_command", metavar="LAB_COMMAND")
    _register_up(lab_sub)
    _register_down(lab_sub)
    _register_exec(lab_sub)
    _register_status(lab_sub)
    for name in LAB_COMMANDS:
        importlib.import_module(name).register(lab_sub)


def add_name_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", default=DEFAULT_LAB_NAME, help=f"lab name, 1-5 of a-z 0-9 (default {DEFAULT_LAB_NAME})"
    )


def attach(args: argparse.Namespace) -> Lab:
    """The running lab named by --name (root checked)."""
    host = LinuxHost()
    host.check_ready()
    return Lab.attach(args.name, host=host)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def reports_lab_errors(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            status: int = handler(args)
        except LabError as exc:
            print(f"evio lab: {exc}", file=sys.stderr)
            return 1
        return status

    return run


# -- up ----------------------------------------------------------------------------------------


def _register_up(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser("up", help="create a lab and start its servers")
    add_name_option(p)
    p.add_argument("--nodes", "-n", type=int, required=True, help=f"number of nodes (1..{MAX_NODES})")
    p.add_argument("--nat", choices=NAT_CHOICES, default="eim",
                   help="NAT in front of every node; mixed cycles eim, symmetric, none (default eim)")
    p.add_argument("--rate", type=float, metavar="MBIT", help="limit every node's link to MBIT Mbit/s each way")
    p.add_argument("--overlay", default="ov1", help="overlay id in the node configs and server groups (default ov1)")
    p.add_argument("--domain", default="overlay.test", help="XMPP domain (default overlay.test)")
    p.add_argument("--plaintext", action="store_true", help="let XMPP clients log in without TLS (debugging only)")
    p.add_argument("--trust", action="store_true",
                   help="make an overlay CA and give each node a certificate for its id (config: trust), "
                   "so tunnels do not rely on the XMPP server for keys")  # fmt: skip
    p.add_argument("--successors", "-s", type=positive, default=2, help="successor links per node (default 2)")
    p.add_argument("--long-distance", "-k", type=not_negative, default=None,
                   help="long-distance links per node (default floor(log2(n)) of the overlay size)")
    p.add_argument("--switching", choices=("bounded-flood", "stp"), default="bounded-flood",
                   help="how every bridge switches: bounded-flood (the SDN controller, default) or stp "
                   "(Open vSwitch's RSTP and MAC learning over the same tunnels, no controller)")  # fmt: skip
    p.add_argument("--xmpp", choices=XMPP_KINDS, default="prosody",
                   help="the signaling server: prosody (default), ejabberd, or ejabberd-cluster (three nodes, "
                   "the members spread over them, each listing all three from its own)")  # fmt: skip
    p.add_argument("--no-daemons", action="store_true",
                   help="only the network and servers: no Open vSwitch and no evio daemon in the nodes")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="how long to wait for the daemons to be ready (default 30 + 2 per node)")
    p.set_defaults(handler=reports_lab_errors(_up))


def _up(args: argparse.Namespace) -> int:
    printer = ProgressPrinter()
    with sigterm_as_interrupt():
        lab = Lab.up(
            args.name,
            nodes=args.nodes,
            nat=args.nat,
            overlay=args.overlay,
            domain=args.domain,
            rate_mbit=args.rate,
            plaintext=args.plaintext,
            topology=topology_section(args),
            daemons=not args.no_daemons,
            daemon_timeout=args.timeout,
            trust=args.trust,
            switching=args.switching,
            xmpp=args.xmpp,
            progress=printer,
        )
    printer.finish()
    print(f"lab {lab.name} is up in {printer.elapsed:.2f} s")
    _print_status(Lab.status(lab.name))
    name = "" if lab.name == DEFAULT_LAB_NAME else f" --name {lab.name}"
    print(f"\nrun a command on a node: evio lab exec{name} 1 -- ip addr")
    if not args.no_daemons:
        print(f"links of every node: evio lab topology{name}\nping over the overlay: evio lab ping{name} 1 2")
    print(f"remove it: evio lab down{name}")
    return 0


def topology_section(args: argparse.Namespace) -> dict[str, Any]:
    topology: dict[str, Any] = {"successors": args.successors}
    if args.long_distance is not None:
        topology["long_distance"] = args.long_distance
    return topology


class ProgressPrinter:
    """Prints `up`'s progress to stderr: one updating line on a terminal, a line per finished step otherwise."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._open_line = False
        self.elapsed = 0.0

    def __call__(self, progress: Progress) -> None:
        self.elapsed = progress.elapsed
        text = f"  {progress.step:<13} {progress.done:>3}/{progress.total:<3} {progress.elapsed:6.2f} s"
        if self._tty:
            sys.stderr.write("\r" + text)
            self._open_line = progress.done < progress.total
            if not self._open_line:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif progress.done == progress.total:
            print(text, file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self._open_line:
            sys.stderr.write("\n")
            self._open_line = False


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A SIGTERM during `up` cleans up like Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- down --------------------------------------------------------------------------------------


def _register_down(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser(
        "down", help="remove a lab: processes, namespaces, links, files (also after a crash)"
    )
    add_name_option(p)
    p.set_defaults(handler=reports_lab_errors(_down))


def _down(args: argparse.Namespace) -> int:
    report = Lab.down(args.name)
    if report.removed_anything:
        print(
            f"lab {args.name} removed: {len(report.namespaces)} namespaces, {len(report.processes)} processes "
            f"in {report.seconds:.2f} s"
        )
    else:
        print(f"lab {args.name}: nothing to remove")
    return 0


# -- exec --------------------------------------------------------------------------------------


def _register_exec(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser(
        "exec", help="run a command in a node's namespace", usage="evio lab exec [--name NAME] NODE -- CMD..."
    )
    add_name_option(p)
    p.add_argument("node", metavar="NODE", help="node number or nodeN; also routerN or pub")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD", help="command and arguments")
    p.set_defaults(handler=reports_lab_errors(_exec))


def _exec(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("evio lab exec: give a command after --", file=sys.stderr)
        return 2
    netns = attach(args).netns(args.node)
    sys.stdout.flush()
    # Replace this process: the command gets the terminal, signals and exit status directly.
    os.execvp("ip", ["ip", "netns", "exec", netns, *cmd])


# -- status ------------------------------------------------------------------------------------


def _register_status(lab_sub: Any) -> None:
    p: argparse.ArgumentParser = lab_sub.add_parser("status", help="nodes, addresses, NAT kinds, processes")
    add_name_option(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=reports_lab_errors(_status))


def _status(args: argparse.Namespace) -> int:
    LinuxHost().check_ready()
    try:
        status = Lab.status(args.name)
    except LabNotFoundError:
        others = Lab.names()
        print(f"no lab {args.name!r}" + (f"; labs present: {', '.join(others)}" if others else ""), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(status), default=str, indent=2))
    else:
        _print_status(status)
    return 0 if status.healthy else 1


def _print_status(status: LabStatus) -> None:
    pub = status.public
    rate = f", links limited to {status.rate_mbit:g} Mbit/s" if status.rate_mbit else ""
    print(f"lab {status.name}: {status.phase}, {len(status.nodes)} nodes{rate}, files in {status.directory}")
    print(
        f"public  {pub.netns}  {pub.address} (+{pub.alt_address})  xmpp :{pub.xmpp_port} domain {pub.domain} "
        f"(room {pub.muc_room}, group {pub.roster_group})  stun/turn :{pub.stun_port}"
    )
    print(f"        CA {pub.ca_file}")
    if status.xmpp != "prosody":
        print(f"        xmpp: {status.xmpp} at {' '.join(status.xmpp_servers)} (each node lists them from its own)")
    for proc in status.processes:
        state = "running" if proc.running else "NOT RUNNING"
        print(f"process {proc.role:<8} pid {proc.pid:<7} {proc.netns or '-':<12} {state}")
    if status.missing_namespaces:
        print(f"MISSING namespaces: {' '.join(status.missing_namespaces)}")
    rows = [("node", "netns", "address", "nat", "router", "public", "jid", "config")]
    for n in status.nodes:
        rows.append(
            (n.name, n.netns, str(n.address), n.nat, n.router_netns, str(n.wan_address), n.jid, str(n.config_path))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
