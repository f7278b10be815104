"""`evio pki ca` and `evio pki issue`: an overlay's trust anchor and its node certificates, made offline.

    evio pki ca --name "ov1 CA" --out /etc/evio/pki/ca            # ca.crt, ca.key (0600)
    evio pki issue --ca /etc/evio/pki/ca --overlay ov1 --node ID --out /etc/evio/pki/node1

The CA key stays with the overlay's admin; each node gets the CA certificate
and its own certificate and key (config: overlays.<id>.trust).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import sys
from pathlib import Path
from typing import Any

from cryptography import x509

from evio.ids import OVERLAY_ID, NodeIdError, parse_node_id
from evio.signal.overlay_addresses import address_uri
from evio.tunnel.path.overlay_ca import (
    issue_node_certificate,
    load_ca_key,
    make_overlay_ca,
    write_certificate,
    write_private_key,
)
from evio.tunnel.path.trust import node_uri

EXIT_OK = 0
EXIT_FAILED = 1
MAX_DAYS = 36500  # a hundred years: past that the dates overflow what a certificate holds


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("pki", help="make an overlay CA and issue node certificates (offline)")
    actions = parser.add_subparsers(dest="pki_action", metavar="ACTION", required=True)

    ca = actions.add_parser("ca", help="make an overlay CA: OUT/ca.crt and OUT/ca.key (Ed25519)")
    ca.add_argument("--name", required=True, help="the CA's common name")
    ca.add_argument("--out", required=True, type=Path, metavar="DIR")
    ca.add_argument("--days", type=int, default=3650)
    ca.add_argument("--force", action="store_true", help="overwrite existing files")
    ca.set_defaults(handler=ca_command)

    issue = actions.add_parser("issue", help="issue a node certificate: OUT/node.crt and OUT/node.key (ECDSA P-256)")
    issue.add_argument("--ca", required=True, type=Path, metavar="DIR", help="directory with ca.crt and ca.key")
    issue.add_argument("--overlay", required=True, action="append", help="overlay id the node may join (repeatable)")
    issue.add_argument("--node", required=True, help="the node id, 32 hex digits")
    issue.add_argument("--out", required=True, type=Path, metavar="DIR")
    issue.add_argument("--days", type=int, default=365)
    issue.add_argument("--address", action="append", default=[], metavar="OVERLAY=IP",
                       help="the node's own address in an overlay, certified so switches answer ARP and ND for it at "
                            "once (repeatable; decision 0062)")  # fmt: skip
    issue.add_argument("--force", action="store_true", help="overwrite existing files")
    issue.set_defaults(handler=issue_command)


def _refuse_overwrite(paths: list[Path], force: bool) -> bool:
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        print(f"evio pki: {', '.join(existing)} exists; pass --force to overwrite", file=sys.stderr)
        return True
    return False


def ca_command(args: argparse.Namespace) -> int:
    cert_path, key_path = args.out / "ca.crt", args.out / "ca.key"
    if not 0 < args.days <= MAX_DAYS:
        print(f"evio pki: --days must be 1 to {MAX_DAYS}", file=sys.stderr)
        return EXIT_FAILED
    if _refuse_overwrite([cert_path, key_path], args.force):
        return EXIT_FAILED
    args.out.mkdir(parents=True, exist_ok=True)
    key, cert = make_overlay_ca(args.name, datetime.datetime.now(datetime.UTC), args.days)
    write_private_key(key_path, key)
    write_certificate(cert_path, cert)
    print(f"{cert_path}: overlay CA {args.name!r}, valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"{key_path}: its key; keep it off the nodes")
    return EXIT_OK


def issue_command(args: argparse.Namespace) -> int:
    try:
        node_id = parse_node_id(args.node)
    except NodeIdError as exc:
        print(f"evio pki: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not 0 < args.days <= MAX_DAYS:
        print(f"evio pki: --days must be 1 to {MAX_DAYS}", file=sys.stderr)
        return EXIT_FAILED
    for overlay in args.overlay:
        if not OVERLAY_ID.fullmatch(overlay):
            print(f"evio pki: --overlay {overlay!r} is not an overlay id: 1 to 32 of A-Z a-z 0-9 _ -", file=sys.stderr)
            return EXIT_FAILED
    addresses: dict[str, list[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
    for text in args.address:
        overlay, _, ip = text.partition("=")
        try:
            address = ipaddress.ip_interface(ip).ip
        except ValueError:
            address = None
        # loopback too: a switch answers ARP for a certified address at once (0062)
        if (overlay not in args.overlay or address is None or address.is_multicast or address.is_unspecified
                or address.is_loopback):
            print(f"evio pki: --address {text!r}: expected OVERLAY=IP, an overlay given with --overlay and a unicast "
                  "address", file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        addresses.setdefault(overlay, []).append(address)
    cert_path, key_path = args.out / "node.crt", args.out / "node.key"
    if _refuse_overwrite([cert_path, key_path], args.force):
        return EXIT_FAILED
    try:
        ca_cert = x509.load_pem_x509_certificate((args.ca / "ca.crt").read_bytes())
        ca_key = load_ca_key(args.ca / "ca.key")
    except (OSError, ValueError) as exc:
        print(f"evio pki: cannot load the CA from {args.ca}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    key, cert = issue_node_certificate(ca_key, ca_cert, args.overlay, node_id, datetime.datetime.now(datetime.UTC), args.days,
                                       addresses=addresses)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    write_private_key(key_path, key)
    write_certificate(cert_path, cert)
    names = ", ".join([node_uri(o, node_id) for o in args.overlay]
                      + [address_uri(o, a) for o, found in addresses.items() for a in found])  # fmt: skip
    print(f"{cert_path}: {names}, valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"{key_path}: its key")
    return EXIT_OK
