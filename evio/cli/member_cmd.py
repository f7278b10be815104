"""`evio member add|remove|list`: an overlay's members, on the server host (after `evio server init`).

    TOKEN=$(evio member add node1 --overlay ov1)     # the token alone on stdout, the rest on stderr
    evio member remove node1 --overlay ov1
    evio member list [--overlay ov1] [--json]
    evio member renew node1 --overlay ov1 --out DIR   # a new node.crt and node.key (30 days) for node1

`add` creates the overlay on first use (its CA and address pool), then the
member's XMPP account, TURN account, address and certificate, and prints its
join token; the running members see the new one at once. `remove` cuts the
member off the running overlay, deletes its accounts and signs a new revocation
list (``revoked.json`` in the overlay's directory) that members verify against
their CA and pass on to each other. `renew` issues a new certificate for a
member's node id, to be copied into the node's ``/etc/evio/<overlay>/``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

from evio.server.members import (
    CERT_DAYS,
    TOKEN_LIFETIME,
    MemberError,
    Registry,
    add_member,
    list_members,
    remove_member,
    renew_member,
    revocation_path,
)
from evio.server.settings import DEFAULT_STATE_DIR, ServerSettingsError, load_settings, write_private

EXIT_OK = 0
EXIT_FAILED = 1
_DURATION = re.compile(r"^(\d+)([smhd])\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "member", help="add, remove and list an overlay's members (server host)"
    )
    actions = parser.add_subparsers(dest="member_action", metavar="ACTION", required=True)

    add = actions.add_parser("add", help="make NODE a member of an overlay and print its join token")
    add.add_argument("name", metavar="NODE", help="the member's name (its XMPP account and TURN user)")
    add.add_argument("--overlay", required=True, metavar="ID")
    add.add_argument(
        "--pool", metavar="CIDR", help="the overlay's address pool, when it is new (default 10.254.0.0/16)"
    )
    add.add_argument("--expires", default="24h", metavar="DURATION", help="token lifetime: 30m, 24h, 7d (default 24h)")
    add.add_argument("--token-file", type=Path, metavar="FILE", help="write the token to FILE (0600) instead of stdout")
    add.set_defaults(handler=add_command)

    remove = actions.add_parser("remove", help="cut NODE off an overlay and delete its accounts")
    remove.add_argument("name", metavar="NODE")
    remove.add_argument("--overlay", required=True, metavar="ID")
    remove.set_defaults(handler=remove_command)

    renew = actions.add_parser("renew", help="a new node certificate and key for NODE (certificates live 30 days)")
    renew.add_argument("name", metavar="NODE")
    renew.add_argument("--overlay", required=True, metavar="ID")
    renew.add_argument("--days", type=int, default=CERT_DAYS, metavar="N", help=f"validity (default {CERT_DAYS})")
    renew.add_argument("--out", type=Path, required=True, metavar="DIR", help="where node.crt and node.key go")
    renew.set_defaults(handler=renew_command)

    listing = actions.add_parser("list", help="the members, their addresses, online or not")
    listing.add_argument("--overlay", metavar="ID")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=list_command)

    for action in (add, remove, renew, listing):
        action.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR",
                            help=f"where evio server init keeps its state (default {DEFAULT_STATE_DIR})")  # fmt: skip


def _fail(message: str) -> int:
    print(f"evio member: {message}", file=sys.stderr)
    return EXIT_FAILED


def _services(state_dir: Path) -> tuple[Any, Any, Any]:
    from evio.server.turn_admin import turn_admin
    from evio.server.xmpp_admin import xmpp_admin

    settings = load_settings(state_dir)
    return settings, xmpp_admin(settings), turn_admin(settings)


def parse_duration(text: str) -> datetime.timedelta:
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise MemberError(f"--expires {text!r}: a positive number with s, m, h or d (e.g. 24h)")
    return datetime.timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def add_command(args: argparse.Namespace) -> int:
    from evio.server.commands import ServerAdminError

    try:
        lifetime = parse_duration(args.expires) if args.expires else TOKEN_LIFETIME
        settings, accounts, relay = _services(args.state_dir)
        added = add_member(Registry(args.state_dir), settings, accounts, relay, args.overlay, args.name,
                           datetime.datetime.now(datetime.UTC), args.pool, lifetime)  # fmt: skip
    except (MemberError, ServerSettingsError, ServerAdminError) as exc:
        return _fail(str(exc))
    m = added.member
    out = sys.stderr
    if added.created_overlay:
        print(f"overlay {args.overlay}: created, CA {added.ca_fingerprint}", file=out)
    print(f"member {m.name}: node id {m.node_id:032x}, address {m.address}, XMPP {m.name}@{settings.domain},"
          f" TURN user {m.name}", file=out)  # fmt: skip
    print(f"join token valid until {added.expires:%Y-%m-%d %H:%M} UTC; it holds the member's secrets: pass it on"
          " privately", file=out)  # fmt: skip
    if args.token_file is not None:
        write_private(args.token_file, added.token + "\n")
        print(f"token written to {args.token_file}; on the node, as root: evio join --token-file FILE", file=out)
    else:
        print("on the node, as root: evio join TOKEN", file=out)
        print(added.token)
    print(f"(evio join --ca-fingerprint {added.ca_fingerprint} checks the token came from this server)", file=out)
    return EXIT_OK


def remove_command(args: argparse.Namespace) -> int:
    from evio.server.commands import ServerAdminError

    try:
        settings, accounts, relay = _services(args.state_dir)
        member = remove_member(Registry(args.state_dir), accounts, relay, args.overlay, args.name,
                               domain=settings.domain)  # fmt: skip
    except (MemberError, ServerSettingsError, ServerAdminError) as exc:
        return _fail(str(exc))
    print(f"member {member.name} removed from overlay {args.overlay} (address {member.address} is free again);"
          " the running members cut it off now")  # fmt: skip
    print(f"node id {member.node_id:032x} is on the CA-signed revocation list"
          f" {revocation_path(Registry(args.state_dir), args.overlay)}; members pass it on to each other")  # fmt: skip
    return EXIT_OK


def renew_command(args: argparse.Namespace) -> int:
    try:
        renewed = renew_member(Registry(args.state_dir), args.overlay, args.name,
                               datetime.datetime.now(datetime.UTC), args.days)  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(args.out / "node.key", renewed.key_pem)
        write_private(args.out / "node.crt", renewed.cert_pem, mode=0o644)
    except (MemberError, OSError) as exc:
        return _fail(str(exc))
    print(f"member {args.name}: new certificate for node id {renewed.member.node_id:032x}, valid until"
          f" {renewed.expires:%Y-%m-%d %H:%M} UTC, in {args.out}/node.crt and node.key (0600)")  # fmt: skip
    print(f"on the node, as root: copy both into /etc/evio/{args.overlay}/ and `systemctl restart evio`")
    return EXIT_OK


def list_command(args: argparse.Namespace) -> int:
    from evio.server.commands import ServerAdminError

    try:
        _, accounts, _ = _services(args.state_dir)
        rows = list_members(Registry(args.state_dir), accounts, args.overlay)
    except (MemberError, ServerSettingsError, ServerAdminError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps([{"overlay": r.overlay, "name": r.member.name, "node_id": f"{r.member.node_id:032x}",
                           "address": r.member.address, "online": r.online, "added": r.member.added}
                          for r in rows], indent=2))  # fmt: skip
        return EXIT_OK
    if not rows:
        print("no members" + (f" in overlay {args.overlay}" if args.overlay else ""))
        return EXIT_OK
    print(f"{'OVERLAY':<12} {'NODE':<20} {'ADDRESS':<20} {'ONLINE':<7} {'NODE ID':<32} ADDED")
    for r in rows:
        m = r.member
        print(
            f"{r.overlay:<12} {m.name:<20} {m.address:<20} {'yes' if r.online else 'no':<7} {m.node_id:032x} {m.added}"
        )
    return EXIT_OK
