"""Stage 3 of checking the configuration: rules the JSON Schema cannot express.

Credentials (exactly one way to log in, readable password and key files, certificates
that match their keys), files and directories that must exist, unique bridge names and
attached interfaces, addresses and pools that do not overlap, the bridge MTU, and the
L2 policy's names and fields that need others. Each check tolerates a document that
failed the schema: wrong-typed parts are skipped (the schema reports them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.config.address_pool import pool_problem
from evio.config.model import (
    ETH_TYPE_NAMES,
    IP_PROTO_NAMES,
    MAX_INTERFACE_NAME,
    InterfaceAddress,
    bridge_mtu_problem,
    default_bridge_name,
    reserved_tap_name,
    split_host_port,
)
from evio.config.problems import Problem, json_path
from evio.config.secrets import MAX_CONFIG_BYTES, MAX_SECRET_BYTES, FileCheckError, read_password_file, read_regular

_CREDENTIALS = ("password", "password_file", "client_cert")
_TURN_CREDENTIALS = ("password", "password_file", "rest_secret")


def resolve_path(base_dir: Path, text: str) -> Path:
    """A path of the config: `~` expanded, relative ones taken from `base_dir`."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


def _file_problem(path: Path, limit: int = MAX_CONFIG_BYTES) -> str | None:
    """Why `path` is not a readable regular file of at most `limit` bytes, or None when it is."""
    try:
        read_regular(path, limit)
    except FileNotFoundError:
        return f"{path}: no such file"
    except IsADirectoryError:
        return f"{path}: is a directory, not a file"
    except FileCheckError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    except ValueError:  # a NUL in the name: no file can have it
        return f"{str(path)!r}: not a usable path (NUL character)"
    return None


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _signal_problems(signal: Mapping[str, Any], at: tuple[str | int, ...], base_dir: Path) -> Iterator[Problem]:
    given = [key for key in _CREDENTIALS if key in signal]
    if len(given) != 1:
        found = f"got {', '.join(given)}" if given else "got none"
        yield Problem(json_path(at), f"needs exactly one of password, password_file, client_cert ({found})")

    if signal.get("servers") == []:
        yield Problem(json_path((*at, "servers")), "needs at least one host:port (or leave it out for server and port)")
    if "servers" in signal:
        for key in ("server", "port"):
            if key in signal:
                yield Problem(json_path((*at, key)), "give servers (host:port each) or server and port, not both")

    if signal.get("insecure_plaintext") is True and signal.get("tls", "starttls") != "starttls":
        yield Problem(json_path((*at, "insecure_plaintext")), 'only allowed with tls "starttls" (the default), not with direct TLS')

    if signal.get("insecure_plaintext") is True and "client_cert" in signal:
        yield Problem(json_path((*at, "insecure_plaintext")), "a client certificate login needs TLS")

    if (ca_text := _text(signal.get("ca_file"))) is not None:
        ca_file = resolve_path(base_dir, ca_text)
        reason = _file_problem(ca_file)
        if reason is None:
            try:
                ssl.create_default_context(cafile=str(ca_file))
            except (ssl.SSLError, ValueError) as exc:
                reason = f"{ca_file}: not a PEM CA certificate file ({exc})"
        if reason:
            yield Problem(json_path((*at, "ca_file")), reason)

    password_text = _text(signal.get("password_file"))
    if password_text is not None and (reason := _password_file_problem(resolve_path(base_dir, password_text))):
        yield Problem(json_path((*at, "password_file")), reason)

    yield from _client_cert_problems(signal, at, base_dir)


def _password_file_problem(path: Path) -> str | None:
    """Why the password cannot be read from `path` (its first line), or None."""
    reason = _file_problem(path, MAX_SECRET_BYTES)
    if reason is None:
        try:
            if not read_password_file(path):
                reason = f"{path}: first line is empty"
        except UnicodeDecodeError:
            reason = f"{path}: not UTF-8 text"
    return reason


def _client_cert_problems(signal: Mapping[str, Any], at: tuple[str | int, ...], base_dir: Path) -> Iterator[Problem]:
    cert_text, key_text = _text(signal.get("client_cert")), _text(signal.get("client_key"))
    files_ok = True
    for key, text in (("client_cert", cert_text), ("client_key", key_text)):
        limit = MAX_SECRET_BYTES if key == "client_key" else MAX_CONFIG_BYTES
        if text is not None and (reason := _file_problem(resolve_path(base_dir, text), limit)):
            files_ok = False
            yield Problem(json_path((*at, key)), reason)
    if cert_text is None or key_text is None or not files_ok:
        return
    cert_file, key_file = resolve_path(base_dir, cert_text), resolve_path(base_dir, key_text)
    if b"ENCRYPTED" in read_regular(key_file, MAX_SECRET_BYTES):
        yield Problem(json_path((*at, "client_key")), f"{key_file}: encrypted private keys are not supported")
        return
    try:
        # The password callback stops OpenSSL from prompting on the terminal.
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password=lambda: b"")
    except ssl.SSLError as exc:
        yield Problem(json_path((*at, "client_key")), f"{key_file} with {cert_file}: not a PEM certificate and matching key ({exc.reason or exc})")


def _trust_problems(trust: Mapping[str, Any], at: tuple[str | int, ...], base_dir: Path) -> Iterator[Problem]:
    """Readable PEM files: CA certificate(s) marked as CA, and this node's EC key matching its certificate.

    Whether the certificate names this node is checked when the node starts
    (evio.node.plan), since the node id may be generated then.
    """
    paths = {key: resolve_path(base_dir, text) for key in ("ca_file", "cert_file", "key_file") if (text := _text(trust.get(key)))}
    unreadable = False
    for key, path in paths.items():
        if reason := _file_problem(path):
            unreadable = True
            yield Problem(json_path((*at, key)), reason)
    if unreadable or len(paths) != 3:
        return
    try:
        authorities = x509.load_pem_x509_certificates(paths["ca_file"].read_bytes())
        if not all(_is_ca_certificate(ca) for ca in authorities):
            raise ValueError("a certificate in it is not a CA (basicConstraints ca=true)")
    except ValueError as exc:
        yield Problem(json_path((*at, "ca_file")), f"{paths['ca_file']}: not PEM CA certificates ({exc})")
    try:
        cert = x509.load_pem_x509_certificate(paths["cert_file"].read_bytes())
    except ValueError as exc:
        yield Problem(json_path((*at, "cert_file")), f"{paths['cert_file']}: not a PEM certificate ({exc})")
        return
    try:
        private_key = serialization.load_pem_private_key(paths["key_file"].read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        yield Problem(json_path((*at, "key_file")), f"{paths['key_file']}: not an unencrypted PEM private key ({exc})")
        return
    if not isinstance(private_key, ec.EllipticCurvePrivateKey):
        yield Problem(json_path((*at, "key_file")), f"{paths['key_file']}: not an EC key (tunnels use ECDSA cipher suites)")
    elif private_key.public_key() != cert.public_key():
        yield Problem(json_path((*at, "key_file")), f"{paths['key_file']}: not the key of {paths['cert_file']}")


def _is_ca_certificate(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _deny_problems(deny: Any, at: tuple[str | int, ...]) -> Iterator[Problem]:
    """Each entry a network (``10.0.0.0/8``, ``fd00::/8``, an address alone for one host), no host bits set."""
    for index, text in enumerate(deny if isinstance(deny, list) else []):
        if not isinstance(text, str):
            continue  # the schema's to report
        try:
            ipaddress.ip_network(text)
        except ValueError as exc:
            yield Problem(json_path((*at, index)), f"not a network: {exc}")


def _turn_problems(turn: Any, at: tuple[str | int, ...], base_dir: Path) -> Iterator[Problem]:
    for index, server in enumerate(turn if isinstance(turn, list) else []):
        server = _dict(server)
        given = [key for key in _TURN_CREDENTIALS if key in server]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            yield Problem(json_path((*at, index)), "needs exactly one of password, password_file (each with username), "
                          f"rest_secret ({found})")
        elif "username" in server and given == ["rest_secret"]:
            yield Problem(json_path((*at, index, "username")), "not used with rest_secret (REST credentials make their "
                          "own usernames); leave it out, or use password or password_file instead of rest_secret")
        password_text = _text(server.get("password_file"))
        if password_text is not None and (reason := _password_file_problem(resolve_path(base_dir, password_text))):
            yield Problem(json_path((*at, index, "password_file")), reason)


def _address_problems(text: str, at: tuple[str | int, ...]) -> Iterator[Problem]:
    try:
        address: InterfaceAddress = ipaddress.ip_interface(text)
    except ValueError as exc:
        yield Problem(json_path(at), f"{json.dumps(text)} is not an address with prefix length: {exc}")
        return
    ip, network = address.ip, address.network
    # /31, /32 (and /127, /128) have no network or broadcast address to avoid.
    point_to_point = network.num_addresses <= 2
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback:
        yield Problem(json_path(at), f"{ip} is not a unicast host address")
    elif not point_to_point and ip == network.network_address:
        yield Problem(json_path(at), f"{ip} is the network address of {network}, not a host address")
    elif not point_to_point and isinstance(network, ipaddress.IPv4Network) and ip == network.broadcast_address:
        yield Problem(json_path(at), f"{ip} is the broadcast address of {network}, not a host address")


def _mtu_problems(bridge: Mapping[str, Any], at: tuple[str | int, ...]) -> Iterator[Problem]:
    mtu = bridge.get("mtu")
    if isinstance(mtu, bool) or not isinstance(mtu, int | float) or mtu != int(mtu):
        return  # none, or the schema's to report
    ipv6 = False
    for key, parse in (("address", ipaddress.ip_interface), ("address_pool", ipaddress.ip_network)):
        text = _text(bridge.get(key))
        with contextlib.suppress(ValueError):  # a bad one is reported as such
            ipv6 |= text is not None and parse(text).version == 6
    if (why := bridge_mtu_problem(int(mtu), ipv6)) is not None:
        yield Problem(json_path((*at, "mtu")), why)


def _bridge_problems(overlays: Mapping[str, Any]) -> Iterator[Problem]:
    owner_of_name: dict[str, str] = {}
    networks: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for overlay_id, overlay in overlays.items():
        bridge = _dict(_dict(overlay).get("bridge"))
        at = ("overlays", overlay_id, "bridge")
        yield from _mtu_problems(bridge, at)
        name = _text(bridge.get("name"))
        if name is None and "name" not in bridge:
            name = default_bridge_name(overlay_id)
            if len(name) > MAX_INTERFACE_NAME:
                yield Problem(json_path((*at, "name")), f"required: the default name {name!r} is longer than {MAX_INTERFACE_NAME} characters")
                name = None
        if name is not None:
            if name in owner_of_name:
                yield Problem(json_path((*at, "name")), f"bridge {name!r} is already used by overlay {owner_of_name[name]!r}")
            else:
                owner_of_name[name] = overlay_id
        address_text = _text(bridge.get("address"))
        pool_text = _text(bridge.get("address_pool"))
        key = "address"
        if address_text is not None and pool_text is not None:
            yield Problem(json_path((*at, "address_pool")), "set address or address_pool, not both")
            continue
        if pool_text is not None:
            key = "address_pool"
            reason = pool_problem(pool_text)
            if reason is not None:
                yield Problem(json_path((*at, key)), reason)
                continue
            network = ipaddress.ip_network(pool_text)
        elif address_text is None:
            continue
        else:
            problems = list(_address_problems(address_text, (*at, "address")))
            yield from problems
            if problems:
                continue
            network = ipaddress.ip_interface(address_text).network
        for other_id, other in networks:
            if network.version == other.version and network.overlaps(other):
                yield Problem(json_path((*at, key)), f"{network} overlaps {other} of overlay {other_id!r}")
        networks.append((overlay_id, network))


def _logging_problems(logging_section: Mapping[str, Any], base_dir: Path) -> Iterator[Problem]:
    file_text = _text(logging_section.get("file"))
    if file_text is None:
        return
    if logging_section.get("destination", "stderr") != "file":
        yield Problem(json_path(("logging", "file")), 'only allowed with destination "file"')
    else:
        directory = resolve_path(base_dir, file_text).parent
        why = _stat_problem(directory)
        if why is not None:
            yield Problem(json_path(("logging", "file")), why)
        elif not directory.is_dir():
            yield Problem(json_path(("logging", "file")), f"directory {directory} does not exist")


def _metrics_problems(metrics: Mapping[str, Any]) -> Iterator[Problem]:
    listen = _text(metrics.get("listen"))
    if listen is None:
        return
    try:
        host, _ = split_host_port(listen)
        ipaddress.ip_address(host)
    except ValueError:
        yield Problem(json_path(("metrics", "listen")), f"must be an IP address and port to listen on, got {listen!r}")


def _node_problems(node: Mapping[str, Any], base_dir: Path) -> Iterator[Problem]:
    state_text = _text(node.get("state_dir"))
    if state_text is not None:
        state_dir = resolve_path(base_dir, state_text)
        why = _stat_problem(state_dir)
        if why is not None:
            yield Problem(json_path(("node", "state_dir")), why)
        elif state_dir.exists() and not state_dir.is_dir():
            yield Problem(json_path(("node", "state_dir")), f"{state_dir} exists and is not a directory")


def _stat_problem(path: Path) -> str | None:
    """Why `path` cannot even be looked up (a name too long, a loop); None when it can, existing or not.

    Path.exists() and is_dir() raise for these instead of answering False."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    except ValueError:  # a NUL in the name: no file can have it
        return f"{str(path)!r}: not a usable path (NUL character)"
    return None


def semantic_problems(document: Any, base_dir: Path) -> list[Problem]:
    """Rules beyond the schema. Tolerates a document that failed the schema: wrong-typed parts are skipped."""
    root = _dict(document)
    problems = list(_node_problems(_dict(root.get("node")), base_dir))
    problems.extend(_logging_problems(_dict(root.get("logging")), base_dir))
    problems.extend(_metrics_problems(_dict(root.get("metrics"))))
    overlays = _dict(root.get("overlays"))
    for overlay_id, overlay in overlays.items():
        overlay = _dict(overlay)
        at = ("overlays", overlay_id)
        if isinstance(overlay.get("signal"), dict):
            problems.extend(_signal_problems(overlay["signal"], (*at, "signal"), base_dir))
        problems.extend(_turn_problems(_dict(overlay.get("nat_traversal")).get("turn"), (*at, "nat_traversal", "turn"),
                                       base_dir))
        problems.extend(_deny_problems(_dict(overlay.get("nat_traversal")).get("deny_candidates"),
                                       (*at, "nat_traversal", "deny_candidates")))
        if _dict(overlay.get("nat_traversal")).get("underlay_families") == []:
            problems.append(Problem(json_path((*at, "nat_traversal", "underlay_families")),
                                    'names no family: give "ipv4", "ipv6" or both (leave it out for both)'))
        if isinstance(overlay.get("trust"), dict):
            problems.extend(_trust_problems(overlay["trust"], (*at, "trust"), base_dir))
        problems.extend(_switching_problems(overlay, at))
        problems.extend(_policy_problems(overlay.get("policy"), (*at, "policy")))
        problems.extend(_router_address_problems(overlay, at))
    problems.extend(_bridge_problems(overlays))
    problems.extend(_attach_problems(overlays))
    return problems


def _attach_problems(overlays: Mapping[str, Any]) -> Iterator[Problem]:
    """An attached interface belongs to one overlay, is no bridge of evio's and no name of its tunnel TAPs."""
    bridges = {_text(_dict(_dict(o).get("bridge")).get("name")) or default_bridge_name(i): i for i, o in overlays.items()}
    owner: dict[str, str] = {}
    for overlay_id, overlay in overlays.items():
        attach = _dict(overlay).get("attach")
        for index, name in enumerate(attach if isinstance(attach, list) else []):
            if not isinstance(name, str):
                continue  # the schema's to report
            at = json_path(("overlays", overlay_id, "attach", index))
            if name in bridges:
                yield Problem(at, f"{name!r} is the bridge of overlay {bridges[name]!r}, not a host interface")
            elif reserved_tap_name(name):
                yield Problem(at, f"{name!r} starts like evio's tunnel TAPs (evt..., ev<digit>...); rename the interface")
            elif name in owner:
                yield Problem(at, f"{name!r} is already attached to overlay {owner[name]!r}")
            else:
                owner[name] = overlay_id


MAX_ROUTER_ADDRESSES = 4  # a router's link-local addresses bound at once (evio.sdn.router_addresses.MAX_PER_ROUTER)


def _router_address_problems(overlay: Mapping[str, Any], at: tuple[str | int, ...]) -> Iterator[Problem]:
    """A named router's addresses (decision 0068, review21p): link-local ones (no kernel takes an RA from another
    source), each one router's, and the router named in `ipv6_routers`."""
    routers = {r.lower() for r in overlay.get("ipv6_routers") or () if isinstance(r, str)}
    seen: dict[ipaddress.IPv6Address, str] = {}
    for router, addresses in _dict(overlay.get("ipv6_router_addresses")).items():
        here = (*at, "ipv6_router_addresses", router)
        if router.lower() not in routers:
            yield Problem(json_path(here), "names a router that ipv6_routers does not name")
        if isinstance(addresses, list) and not 0 < len(addresses) <= MAX_ROUTER_ADDRESSES:
            yield Problem(json_path(here), f"give 1 to {MAX_ROUTER_ADDRESSES} addresses (or leave the router out)")
        for index, text in enumerate(addresses if isinstance(addresses, list) else []):
            if not isinstance(text, str):
                continue  # the schema's to report
            try:
                address = ipaddress.IPv6Address(text)
            except ValueError:
                yield Problem(json_path((*here, index)), f"{text!r} is not an IPv6 address")
                continue
            if not address.is_link_local:
                yield Problem(json_path((*here, index)), f"{text!r} is not link-local (fe80::/10): a kernel takes "
                              "router advertisements only from a link-local source")
            elif seen.setdefault(address, router) != router:
                yield Problem(json_path((*here, index)), f"{text!r} is already router {seen[address]}'s")


def _switching_problems(overlay: Mapping[str, Any], at: tuple[str | int, ...]) -> Iterator[Problem]:
    """On-demand links and the L2 policy need the SDN controller, which an stp bridge does not have."""
    if _dict(overlay.get("bridge")).get("switching") != "stp":
        return
    if overlay.get("policy"):
        yield Problem(json_path((*at, "policy")), 'an L2 policy needs "switching": "bounded-flood" (its SDN controller '
                      'installs the rules); with "stp" leave it out')
    on_demand = _dict(_dict(overlay.get("topology")).get("on_demand"))
    if on_demand.get("enabled") is True:
        yield Problem(json_path((*at, "topology", "on_demand", "enabled")),
                      'on-demand links need "switching": "bounded-flood" (its SDN controller measures the flows '
                      'that ask for them); with "stp" leave it out or set false')


MAX_POLICY_RULES = 1000  # each is a flow or a few per port on the bridge; a longer list is a mistake


def _policy_problems(rules: Any, at: tuple[str | int, ...]) -> Iterator[Problem]:
    """What the schema cannot say of a policy: names of types and protocols, and fields that need others."""
    if not isinstance(rules, list):
        return
    if len(rules) > MAX_POLICY_RULES:
        yield Problem(json_path(at), f"{len(rules)} rules; at most {MAX_POLICY_RULES}")
    names: dict[str, int] = {}
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        here = (*at, index)
        name = rule.get("name")
        if isinstance(name, str):
            if name in names:
                yield Problem(json_path((*here, "name")), f"{name!r} names rule {names[name]} too")
            names.setdefault(name, index)
        for key, known in (("eth_type", ETH_TYPE_NAMES), ("ip_proto", IP_PROTO_NAMES)):
            value = rule.get(key)
            if isinstance(value, str) and value not in known:
                yield Problem(json_path((*here, key)),
                              f"{json.dumps(value)} is not a number or one of {', '.join(known)}")
        eth_type = policy_number(rule.get("eth_type"), ETH_TYPE_NAMES)
        ip_proto = policy_number(rule.get("ip_proto"), IP_PROTO_NAMES)
        if "ip_proto" in rule and eth_type is not None and eth_type not in (ETH_TYPE_NAMES["ipv4"], ETH_TYPE_NAMES["ipv6"]):
            yield Problem(json_path((*here, "ip_proto")), "needs an IP eth_type (ipv4 or ipv6), or none for both")
        for key in ("src_port", "dst_port"):
            if key in rule and ip_proto not in (IP_PROTO_NAMES["tcp"], IP_PROTO_NAMES["udp"]):
                yield Problem(json_path((*here, key)), 'needs "ip_proto": "tcp" or "udp"')


def policy_number(value: Any, names: Mapping[str, int]) -> int | None:
    """A policy's eth_type or ip_proto as a number, by name or as given; None when neither."""
    if isinstance(value, str):
        return names.get(value)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
