"""`evio status` and `evio ping`: clients of the running daemon's control socket, nothing else.

Exit status: 0 the daemon answered (for ping: at least one pong); 1 no daemon,
no access to its socket, or (ping) no answer from the peer; 2 the config
given with --config cannot be read or is invalid. `status --check` exits 0 only
when every overlay's signaling is connected and at least one of its links is
up, and 1 otherwise, with one line per problem on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evio.config.model import DEFAULT_STATE_DIR

EXIT_OK = 0
EXIT_NO_DAEMON = 1
EXIT_BAD_CONFIG = 2
EXIT_UNHEALTHY = 1  # status --check: the daemon answered, but an overlay is not working


def register(sub: Any) -> None:
    status = sub.add_parser(
        "status",
        help="the running daemon's overlays, signaling and links",
        description="Ask the running daemon (through its control socket) for its overlays, signaling and links.",
    )
    _socket_options(status)
    status.add_argument("--json", action="store_true", help="the status document as JSON (stable; see docs/reference.md)")
    status.add_argument("--check", action="store_true",
                        help="exit 1, with one line per problem on stderr, unless every overlay's signaling is "
                        "connected and at least one of its links is up")
    status.set_defaults(handler=status_command)

    ping = sub.add_parser(
        "ping",
        help="probe a peer through its tunnel",
        description="Send echo records to a peer through its tunnel (not ICMP) and print the path and round-trip "
        "time of each answer, as `tailscale ping` does.",
    )
    ping.add_argument("peer", metavar="PEER", help="node id (or a unique prefix), JID, or the JID's user part")
    _socket_options(ping)
    ping.add_argument("--overlay", metavar="ID", help="the overlay (needed only if the peer is in several)")
    ping.add_argument("-c", "--count", type=int, default=4, help="probes to send (default 4)")
    ping.add_argument("-i", "--interval", type=float, default=1.0, help="seconds between probes (default 1)")
    ping.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each answer (default 2)")
    ping.set_defaults(handler=ping_command)


def _socket_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--state-dir", metavar="DIR", type=Path,
                       help=f"the daemon's state directory (default {DEFAULT_STATE_DIR})")
    where.add_argument("--config", metavar="FILE", dest="config_file",
                       help="the daemon's config (its node.state_dir is used)")


def control_socket(args: argparse.Namespace, command: str) -> Path | None:
    """The control socket the options point at (None after printing why there is none)."""
    from evio.node.control_client import control_socket_for

    if args.state_dir is not None:
        return control_socket_for(args.state_dir)
    if args.config_file is not None:
        from evio.config.loader import ConfigError, ConfigFileError, load_config

        try:
            config = load_config(args.config_file)
        except ConfigFileError as exc:
            where = f"{args.config_file}:{exc.location}" if exc.location else args.config_file
            print(f"evio {command}: {where}: {exc.reason}", file=sys.stderr)
            return None
        except ConfigError as exc:
            print(f"evio {command}: {args.config_file}: invalid config ({exc.problems[0]})", file=sys.stderr)
            return None
        return control_socket_for(config.node.state_dir)
    return control_socket_for(DEFAULT_STATE_DIR)


def status_command(args: argparse.Namespace) -> int:
    from evio.node.control_client import ControlError, fetch_status

    path = control_socket(args, "status")
    if path is None:
        return EXIT_BAD_CONFIG
    try:
        status = fetch_status(path)
    except ControlError as exc:
        print(f"evio status: {exc}", file=sys.stderr)
        return EXIT_NO_DAEMON
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(render_status(status, now=time.time()))
    if args.check:
        problems = health_problems(status)
        for problem in problems:
            print(f"evio status: {problem}", file=sys.stderr)
        if problems:
            return EXIT_UNHEALTHY
    return EXIT_OK


def health_problems(status: Mapping[str, Any]) -> list[str]:
    """What keeps the node from being healthy: per overlay, signaling not connected, no link up."""
    overlays = status.get("overlays") or {}
    if not overlays:
        return ["no overlay is running"]
    problems = []
    for name, ov in sorted(overlays.items()):
        signal = ov.get("signal") or {}
        error = signal.get("last_error")
        if not signal.get("connected"):
            why = f" ({error.get('step')}: {error.get('message')})" if isinstance(error, dict) else ""
            problems.append(f"overlay {name}: signaling not connected{why}")
        elif isinstance(error, dict):  # connected, but e.g. not a member
            problems.append(f"overlay {name}: signaling {error.get('step')}: {error.get('message')}")
        if not sum((ov.get("link_counts") or {}).values()):
            problems.append(f"overlay {name}: no link up")
    return problems


def ping_command(args: argparse.Namespace) -> int:
    from evio.node.control_client import ControlError, fetch_status, find_peer, probe

    path = control_socket(args, "ping")
    if path is None:
        return EXIT_BAD_CONFIG
    if args.count < 1 or args.interval < 0 or not 0 < args.timeout <= 10:
        print("evio ping: --count >= 1, --interval >= 0 and 0 < --timeout <= 10", file=sys.stderr)
        return EXIT_BAD_CONFIG
    try:
        match = find_peer(fetch_status(path), args.peer, args.overlay)
    except ControlError as exc:
        print(f"evio ping: {exc}", file=sys.stderr)
        return EXIT_NO_DAEMON
    pongs = 0
    for sent in range(args.count):
        if sent:
            time.sleep(args.interval)
        try:
            answer = probe(path, match.overlay, match.peer, args.timeout)
        except ControlError as exc:
            print(f"evio ping: {exc}", file=sys.stderr)
            return EXIT_NO_DAEMON
        print(render_probe(answer), flush=True)
        if answer.get("result") == "no-link":
            return EXIT_NO_DAEMON
        pongs += answer.get("result") == "pong"
    return EXIT_OK if pongs else EXIT_NO_DAEMON


# -- rendering ---------------------------------------------------------------------------------


def render_probe(answer: Mapping[str, Any]) -> str:
    who = _peer_label(answer.get("peer_name"), str(answer.get("peer", "?")))
    result = answer.get("result")
    if result == "pong":
        return f"pong from {who} via {_path(answer)} in {_ms(answer.get('rtt_ms'))}"
    if result == "timeout":
        return f"no answer from {who} via {_path(answer)} within {answer.get('timeout')} s"
    online = "online" if answer.get("peer_online") else "not online in signaling"
    if answer.get("setting_up"):
        state = answer.get("tunnel_state") or answer.get("link_state") or "pending"
        return f"no link to {who} in {answer.get('overlay')} yet: one is being set up ({state}); the peer is {online}"
    return f"no link to {who} in {answer.get('overlay')}, and none is being set up; the peer is {online}"


def render_status(status: Mapping[str, Any], now: float) -> str:
    lines = [f"node {status.get('node_id')}  pid {status.get('pid')}  up {_duration(status.get('uptime'))}"]
    for name, ov in status.get("overlays", {}).items():
        counts = ov.get("link_counts", {})
        summary = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or "none"
        if ov.get("switching") == "stp":
            switch = "switching by STP" if ov.get("bridge_ready") else "bridge NOT made"
        else:
            switch = "switch connected" if ov.get("switch_connected") else "switch NOT connected"
        lines.append("")
        lines.append(f"overlay {name}  address {ov.get('address') or '-'}  bridge {ov.get('bridge')} "
                     f"({ov.get('datapath')}, {switch})")
        lines.append(f"  node id {ov.get('node_id')}")
        trust = ov.get("trust")
        if isinstance(trust, dict):
            lines.append("  " + _trust_line(trust))
        lines.append("  " + _signal_line(ov.get("signal", {}), now))
        error = ov.get("signal", {}).get("last_error")
        if isinstance(error, dict):
            lines.append(f"    last error ({error.get('step')}, {_ago(error.get('since'), now)}): {error.get('message')}")
        left_out = _left_out_line(ov.get("signal", {}))
        if left_out:
            lines.append(left_out)
        lines.append(f"  links up: {sum(counts.values())} ({summary}); members online: {len(ov.get('peers', {}))}")
        links = ov.get("links", [])
        if links:
            header = ("PEER", "NAME", "TYPE", "STATE", "PATH", "RTT", "AGE", "TX", "RX", "DROPS", "MTU")
            rows = [header] + [_link_row(link) for link in links]
            widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
            for row in rows:
                lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        attached = ov.get("attached_ports") or {}
        if attached:
            lines.append(f"  attached ports: {len(attached)}")
            table = [("PORT", "ORIGIN", "STATE", "MTU", "RX", "TX", "DROPPED")]
            table += [_attached_row(port, doc) for port, doc in sorted(attached.items())]
            widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
            for row in table:
                lines.append("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        policy = ov.get("policy") or []
        if policy:
            lines.append(f"  policy: {len(policy)} rules, first match decides, no match allows")
            for rule in policy:
                frb = f" ({rule.get('frb_packets')} in FRBs)" if rule.get("frb_packets") else ""
                verb = "dropped" if rule.get("action") == "drop" else "allowed"
                lines.append(f"    {rule.get('rule')}: {rule.get('action')} from {rule.get('in_port')}, "
                             f"{verb} {rule.get('packets')}{frb}")
    return "\n".join(lines)


def _attached_row(port: str, doc: Mapping[str, Any]) -> tuple[str, str, str, str, str, str, str]:
    rx, tx = doc.get("rx") or {}, doc.get("tx") or {}
    state = "on bridge" if doc.get("on_bridge") else f"NOT attached: {doc.get('error') or '?'}"
    dropped = f"{rx.get('dropped', 0)}/{tx.get('dropped', 0)}" if rx or tx else "-"
    return (port, str(doc.get("origin") or "-"), state, str(doc.get("mtu") or "-"),
            f"{_size(rx.get('bytes'))}/{rx.get('frames', 0)}f" if rx else "-",
            f"{_size(tx.get('bytes'))}/{tx.get('frames', 0)}f" if tx else "-", dropped)


def _trust_line(trust: Mapping[str, Any]) -> str:
    if trust.get("mode") == "ca":
        return (f"trust: overlay CA ({trust.get('issuer')}), certificate expires {trust.get('cert_expires')}"
                f" ({trust.get('cert_days_left')} days), {trust.get('revoked_nodes', 0)} node ids revoked")
    return f"trust: FINGERPRINT ONLY: {trust.get('risk', 'the XMPP server can stand in for members')}"


def _signal_line(signal: Mapping[str, Any], now: float) -> str:
    where = f"signaling {signal.get('jid')} via {signal.get('server')}"
    reconnects = signal.get("reconnects", 0)
    if not signal.get("connected"):
        return f"{where}: NOT connected ({reconnects} reconnects so far)"
    since = signal.get("connected_since")
    if isinstance(since, int | float):
        stamp = datetime.datetime.fromtimestamp(since, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{where}: connected since {stamp} ({_duration(now - since)}), {reconnects} reconnects"
    return f"{where}: connected, {reconnects} reconnects"


def _left_out_line(signal: Mapping[str, Any]) -> str | None:
    """Revocation lists that did not fit our presence (decision 0036, amended), once any was left out: still
    revoked everywhere, but carried only by the overlay's flood and the files beside the CAs."""
    total = signal.get("lists_left_out_total") or 0
    if not total:
        return None
    now_out = ", ".join(signal.get("lists_left_out") or ()) or "none now"
    return (f"    revocation lists left out of presence: {now_out} ({total} left out so far; they spread over the "
            "overlay and from the file beside the CA)")


def _ago(since: Any, now: float) -> str:
    """"since 2026-11-27 14:02:11 UTC, 5m02s ago"."""
    if not isinstance(since, int | float):
        return "since ?"
    stamp = datetime.datetime.fromtimestamp(since, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"since {stamp}, {_duration(max(now - since, 0))} ago"


def _link_row(link: Mapping[str, Any]) -> tuple[str, ...]:
    drops = link.get("drops") or {}
    tx, rx = link.get("tx", {}), link.get("rx", {})
    return (
        str(link.get("peer", ""))[:12],
        _peer_label(link.get("peer_name"), "-", short=True),
        str(link.get("type") or "-"),
        str(link.get("state") or "-"),
        _path(link) if link.get("path") else "-",
        _ms(link.get("rtt_ms")),
        _duration(link.get("age")),
        f"{_size(tx.get('bytes'))}/{tx.get('frames', 0)}f",
        f"{_size(rx.get('bytes'))}/{rx.get('frames', 0)}f",
        ",".join(f"{reason}={n}" for reason, n in sorted(drops.items())) or "0",
        _link_mtu(link),
    )


def _link_mtu(link: Mapping[str, Any]) -> str:
    """"1428 path 1280 probed": the TAP's MTU, then the path's and how it was found (evio.tunnel.pmtu)."""
    mtu = str(link.get("mtu") or "-")
    source, path = link.get("mtu_source"), link.get("path_mtu")
    if source == "probed" and path:
        return f"{mtu} path {path} probed"
    return f"{mtu} {source}" if source else mtu


def _path(doc: Mapping[str, Any]) -> str:
    """"direct host->srflx 198.51.100.3:40001", "relay relay->relay ..." or "relay/tcp relay->srflx ..."."""
    kind = doc.get("path") or "?"
    if doc.get("transport") not in (None, "udp"):
        kind += f"/{doc['transport']}"
    relay = doc.get("relay")
    if isinstance(relay, dict) and relay.get("standby") == "ready":
        kind += "+standby"  # a checked relayed path on a second TURN server (decision 0057)
    local, remote = doc.get("local_candidate"), doc.get("remote_candidate")
    address = doc.get("remote_address")
    candidates = f" {local or '?'}->{remote or '?'}" if local or remote else ""
    return f"{kind}{candidates}" + (f" {address}" if address else "")


def _peer_label(name: Any, fallback: str, short: bool = False) -> str:
    if not isinstance(name, str) or not name:
        return fallback
    return name.partition("@")[0] if short else name


def _ms(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:.2f}ms" if value < 10 else f"{value:.0f}ms"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _size(count: Any) -> str:
    if not isinstance(count, int):
        return "0B"
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1000
    return f"{value:.1f}TB"
