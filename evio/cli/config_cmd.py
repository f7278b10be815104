"""`evio config check FILE`, `evio config example` and `evio config address FILE`.

`address` prints this node's overlay address in each overlay (or one, `--overlay`;
`--ip` for the bare address, e.g. kubelet's --node-ip), with the node id the
daemon will use: node.id, else state_dir/node_id, made there now if absent,
so the daemon started later keeps it (docs/kubernetes.md).

Exit status of `check`: 0 valid; 1 invalid (every problem printed as
`FILE: $.path: reason`); 2 unreadable or not JSON (`FILE:LINE:COL: reason`),
or refused as `evio run` refuses it: the config file, a password file or a
private key it names accessible by other users (evio.config.secrets, the same
check `run` makes; one line per file, naming the fix).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from evio.cli.config_file import EXIT_INVALID, EXIT_UNREADABLE, load_or_report, problem_count
from evio.config import ConfigError, FileStateDir, resolve_node_id
from evio.config.model import Config, OverlayConfig
from evio.config.secrets import secret_problems
from evio.ids import format_node_id

EXIT_OK = 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("config", help="check a config file or print the example")
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION", required=True)

    check = actions.add_parser("check", help="validate FILE without starting anything; exit 1 if invalid")
    check.add_argument("file", metavar="FILE")
    check.set_defaults(handler=check_command)

    example = actions.add_parser("example", help="print the fully commented example config")
    example.set_defaults(handler=example_command)

    address = actions.add_parser("address", help="print this node's overlay address(es), as the daemon will set them")
    address.add_argument("file", metavar="FILE")
    address.add_argument("--overlay", metavar="ID", help="only this overlay")
    address.add_argument("--ip", action="store_true", help="the bare address, without prefix length or overlay id")
    address.set_defaults(handler=address_command)


def check_command(args: argparse.Namespace) -> int:
    name: str = args.file
    config = load_or_report(name)
    if isinstance(config, int):
        return config
    refused = secret_problems(Path(name), config)
    if refused:
        for reason in refused:
            print(reason, file=sys.stderr)
        print(f"{name}: refused: `evio run` would not start with it ({problem_count(len(refused)).split('(')[1]}",
              file=sys.stderr)
        return EXIT_UNREADABLE
    print("\n".join(summary(config)))
    return EXIT_OK


def address_command(args: argparse.Namespace) -> int:
    name: str = args.file
    config = load_or_report(name)
    if isinstance(config, int):
        return config
    overlays = list(config.overlays.values())
    if args.overlay is not None:
        overlays = [ov for ov in overlays if ov.id == args.overlay]
        if not overlays:
            print(f"{name}: no overlay {args.overlay!r} (overlays: {', '.join(config.overlays)})", file=sys.stderr)
            return EXIT_INVALID
    try:
        node_id = resolve_node_id(config, FileStateDir(config.node.state_dir))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{name}: {problem.path}: {problem.reason}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"{name}: state_dir {config.node.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    missing = False
    for overlay in overlays:
        address = overlay.bridge.address_for(node_id)
        missing |= address is None
        if args.ip:
            print(address.ip if address is not None else "")
        else:
            print(f"{overlay.id} {address if address is not None else 'none'}")
    return EXIT_INVALID if missing and args.ip else EXIT_OK


def example_command(args: argparse.Namespace) -> int:
    sys.stdout.write(example_text())
    return EXIT_OK


def example_text() -> str:
    return resources.files("evio.config").joinpath("example.jsonc").read_text(encoding="utf-8")


def summary(config: Config) -> list[str]:
    """A few lines saying what the config will do."""
    count = len(config.overlays)
    lines = [f"ok: {count} overlay{'s' if count != 1 else ''} ({', '.join(config.overlays)})"]
    node = config.node
    identity = format_node_id(node.id) if node.id is not None else f"generated on first start, kept in {node.state_dir}"
    lines.append(f"  node id: {identity}")
    log = config.logging
    lines.append(f"  logging: {log.level} to {log.file if log.destination == 'file' else log.destination}")
    for overlay in config.overlays.values():
        lines.extend(_overlay_summary(overlay))
    return lines


def _overlay_summary(overlay: OverlayConfig) -> list[str]:
    signal, nat, topology, bridge = overlay.signal, overlay.nat_traversal, overlay.topology, overlay.bridge
    credential = "password" if signal.password is not None else "password file" if signal.password_file else "client certificate"
    tls = "PLAINTEXT ALLOWED" if signal.insecure_plaintext else signal.tls
    k = "log2(n)" if topology.long_distance is None else str(topology.long_distance)
    on_demand = (
        f"on-demand up to {topology.on_demand.max_links} above {topology.on_demand.threshold_bytes_per_s:,.0f} B/s"
        if topology.on_demand.enabled and bridge.switching == "bounded-flood"
        else "on-demand off"
    )
    switching = ("Bounded Flood (SDN controller)" if bridge.switching == "bounded-flood"
                 else "STP (Open vSwitch RSTP and MAC learning, no controller)")
    return [
        f"  overlay {overlay.id}:",
        f"    signal: {signal.jid} via {signal.server}:{signal.port} ({tls}, {credential})",
        f"    bridge: {bridge.name} {bridge.address or (f'address from the node id in {bridge.address_pool}' if bridge.address_pool else 'no address')} mtu {bridge.effective_mtu}{'' if bridge.mtu else ' (the tunnels’)'} datapath {bridge.datapath}",
        f"    switching: {switching}",
        f"    topology: s={topology.successors} k={k} ({topology.log_form}), {on_demand}",
        f"    nat traversal: {len(nat.stun)} STUN, {len(nat.turn)} TURN; tunnel cipher {overlay.tunnel.cipher}",
        *([f"    policy: {len(overlay.policy)} rules (first match decides, no match allows)"] if overlay.policy else []),
    ]
