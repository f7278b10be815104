"""The servers' configuration files, as text: prosody, ejabberd, coturn and the prosody groups file.

Pure functions of their parameters (no file system, no clock): `evio server
init` writes what they return, `--print` shows it, and the tests start real
servers from it with every path pointed into a temporary directory.

What they settle, and why:

* XMPP: client connections only (c2s on 5222 with STARTTLS required), no
  federation, no in-band registration (accounts are made by `evio member add`),
  one shared roster group per overlay (prosody mod_groups from a groups file,
  ejabberd mod_shared_roster): the group is the membership (see
  `evio.signal.client`). Listen backlogs and caches are sized for hundreds of
  members logging in at once (issue 24: ejabberd's packaged listener keeps 5
  pending connections, prosody's 128).
* coturn: long-term credentials (a TURN account per member in coturn's sqlite
  userdb, written by `evio.server.turn_admin`), and relays only to public
  addresses: a TURN server on an operator's host must not become a way into
  that host's loopback or LAN (`denied-peer-ip`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Peers a relay must never reach: this host itself, "this network", the operator's private networks
# (RFC 1918, CGNAT RFC 6598), link-local, multicast, broadcast; for IPv6 loopback, ULA, link-local,
# multicast and the IPv4-mapped range (which would reach the same IPv4 addresses).
DENIED_PEER_RANGES = (
    "0.0.0.0-0.255.255.255",
    "10.0.0.0-10.255.255.255",
    "100.64.0.0-100.127.255.255",
    "127.0.0.0-127.255.255.255",
    "169.254.0.0-169.254.255.255",
    "172.16.0.0-172.31.255.255",
    "192.168.0.0-192.168.255.255",
    "224.0.0.0-239.255.255.255",
    "240.0.0.0-255.255.255.255",
    # Not "::" (unspecified, never a peer anyway): coturn reads a range starting at an unspecified
    # address as "any address" and then refuses every peer (seen: 403 Forbidden IP for all).
    "::1",
    "::ffff:0.0.0.0-::ffff:255.255.255.255",
    "fc00::-fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "fe80::-febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "ff00::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
)

DEFAULT_RELAY_PORTS = (49152, 65535)  # coturn's own default range


@dataclass(frozen=True)
class ProsodyPaths:
    """Where the packaged prosody keeps things (Debian 12's defaults); tests point them elsewhere."""

    data_path: str = "/var/lib/prosody"
    pidfile: str = "/run/prosody/prosody.pid"
    log_dir: str = "/var/log/prosody"
    admin_socket: str = ""  # "" is prosody's default, <data_path>/prosody.sock


# mod_limits: what one member may send; the packaged config's 10 kb/s would hold a member's burst of offers
# (a few KB each, several at once when it links) for seconds, and a flooding member is still held to this.
PROSODY_LIMITS = (
    "-- A member's reads: room for bursts of offers, a flooding member held to this (packaged: 10 kb/s).",
    'limits = { c2s = { rate = "256kb/s"; burst = "2s" } }',
)


# prosody keeps one descriptor per member session (and a few of its own); Debian's unit sets no limit, so
# systemd's soft 1,024 applies and a login storm of 1,000 members fails accepts with "too many open files".
PROSODY_OPEN_FILES = 65536


def prosody_unit_limits() -> str:
    """A systemd drop-in for prosody.service: an open-files limit above any member count evio sizes for."""
    return "\n".join([
        "# written by `evio server init`: prosody holds a descriptor per member session (docs/operations.md).",
        "[Service]",
        f"LimitNOFILE={PROSODY_OPEN_FILES}",
        "",
    ])  # fmt: skip


def lua_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def prosody_config(
    *,
    domain: str,
    cert: str,
    key: str,
    groups_file: str,
    port: int = 5222,
    interfaces: tuple[str, ...] = (),  # () is prosody's default: every IPv4 and IPv6 address
    paths: ProsodyPaths = ProsodyPaths(),
    run_as_root: bool = False,
) -> str:
    """A complete prosody.cfg.lua (prosody 0.12) serving evio's overlays on `domain`."""
    modules = ("roster", "saslauth", "tls", "disco", "ping", "posix", "groups", "admin_shell", "limits", "register")
    lines = [
        f"-- prosody for the evio overlays on {domain}: written by `evio server init`.",
        "-- Members log in with the accounts `evio member add` creates; the shared roster group named",
        "-- after an overlay is its membership. Edit with care: `evio server init` rewrites this file.",
        "",
        *(["run_as_root = true  -- tests only"] if run_as_root else []),
        f"pidfile = {lua_string(paths.pidfile)}",
        f"data_path = {lua_string(paths.data_path)}",
        "log = {",
        f"    info = {lua_string(paths.log_dir + '/prosody.log')};",
        f"    error = {lua_string(paths.log_dir + '/prosody.err')};",
        "}",
        "",
        "-- Client connections only: STARTTLS on the c2s port, no direct TLS port, no federation.",
        *(["interfaces = { " + "; ".join(lua_string(i) for i in interfaces) + " }"] if interfaces else []),
        f"c2s_ports = {{ {port} }}",
        "c2s_direct_tls_ports = {}",
        "s2s_ports = {}",
        'modules_disabled = { "s2s" }',
        "c2s_require_encryption = true",
        "allow_unencrypted_plain_auth = false",
        'authentication = "internal_hashed"  -- stores salted SCRAM hashes, never the passwords',
        "allow_registration = false  -- accounts come from `evio member add` only",
        "",
        "-- Hundreds of members may log in at once after a server restart: a deep listen backlog;",
        "-- Nagle off, as signaling is small request/response stanzas (Nagle adds about 40 ms).",
        "network_settings = { tcp_backlog = 1024; nagle = false }",
        *PROSODY_LIMITS,
        "",
        "-- groups: the shared roster, one group per overlay, from the file `evio member add|remove` edits",
        "--   (it pushes each change to the online members at once through the admin shell).",
        "-- admin_shell: `prosodyctl shell`, on a unix socket only root and prosody can open.",
        "-- register: a logged-in member changes its own password (XEP-0077), as `evio join` does with",
        "--   the join token's; with allow_registration = false it makes no account.",
        "modules_enabled = { " + "; ".join(lua_string(m) for m in modules) + " }",
        f"groups_file = {lua_string(groups_file)}",
        *([f"admin_socket = {lua_string(paths.admin_socket)}"] if paths.admin_socket else []),
        "",
        "-- The certificate `evio server init` made (or was given) for the domain; members verify it",
        "-- with the CA their join token carries.",
        f"ssl = {{ certificate = {lua_string(cert)}; key = {lua_string(key)} }}",
        "",
        f"VirtualHost {lua_string(domain)}",
        "",
    ]
    return "\n".join(lines)


def prosody_additions(*, domain: str, cert: str, key: str, groups_file: str) -> str:
    """What an existing prosody needs for evio (`evio server init --print`)."""
    return "\n".join([
        "-- Global section: add these modules to modules_enabled, and these settings.",
        'modules_enabled = { ...; "groups"; "admin_shell"; "ping"; "register" }  -- keep your own modules',
        f"groups_file = {lua_string(groups_file)}",
        "c2s_require_encryption = true",
        "allow_registration = false",
        "network_settings = { tcp_backlog = 1024; nagle = false }",
        *PROSODY_LIMITS,
        "",
        f"VirtualHost {lua_string(domain)}",
        f"    ssl = {{ certificate = {lua_string(cert)}; key = {lua_string(key)} }}",
        "",
    ])  # fmt: skip


@dataclass(frozen=True)
class EjabberdPaths:
    """Where the packaged ejabberd keeps things that the config names; tests point them elsewhere."""

    log_dir: str = "/var/log/ejabberd"


def ejabberd_config(
    *,
    domain: str,
    certfile: str,
    port: int = 5222,
    ip: str = "::",
    paths: EjabberdPaths = EjabberdPaths(),
) -> str:
    """A complete ejabberd.yml (ejabberd 23.01) serving evio's overlays on `domain`."""
    return "\n".join([
        f"# ejabberd for the evio overlays on {domain}: written by `evio server init`.",
        "# Members log in with the accounts `evio member add` creates; the shared roster group named",
        "# after an overlay is its membership. Edit with care: `evio server init` rewrites this file.",
        "",
        "hosts:",
        f"  - {_yaml_string(domain)}",
        "loglevel: info",
        "auth_password_format: scram  # store salted hashes, never the passwords",
        "log_rotate_count: 0",
        "",
        "# The certificate and key `evio server init` made (or was given), in one PEM file.",
        "certfiles:",
        f"  - {_yaml_string(certfile)}",
        "c2s_protocol_options:",
        "  - no_sslv3",
        "  - no_tlsv1",
        "  - no_tlsv1_1",
        "  - cipher_server_preference",
        "  - no_compression",
        "",
        "# Client connections only: STARTTLS required, no direct TLS, no federation listener.",
        "# The listen backlog: the packaged listener keeps 5 pending connections (issue 24), too few for",
        "# hundreds of members logging in again after a restart.",
        "listen:",
        f"  - port: {port}",
        f"    ip: {_yaml_string(ip)}",
        "    module: ejabberd_c2s",
        "    backlog: 1024",
        "    max_stanza_size: 262144",
        "    shaper: c2s_shaper",
        "    access: c2s",
        "    starttls_required: true",
        "s2s_access: none",
        "",
        "# Caches sized for hundreds of members: rosters, shared roster groups and accounts are read",
        "# for every login and presence broadcast (the default keeps 1000 entries).",
        "cache_size: 10000",
        "cache_life_time: 3600",
        "max_fsm_queue: 20000",
        "",
        "acl:",
        "  loopback:",
        "    ip:",
        "      - 127.0.0.0/8",
        "      - ::1/128",
        "  # The server's own JID (no user part): what `evio member` sends as, through ejabberdctl.",
        "  evio_server_host:",
        '    user_regexp: "^$"',
        "access_rules:",
        "  c2s:",
        "    allow: all",
        "  evio_multicast:",
        "    allow: evio_server_host",
        "",
        "# Signaling is bursty (a login answers every member's presence): a per-connection rate a few",
        "# hundred members' worth of presence does not stall.",
        "shaper:",
        "  evio_fast: 1000000",
        "shaper_rules:",
        "  max_user_sessions: 10",
        "  c2s_shaper: evio_fast",
        "",
        "# ejabberdctl (what `evio member add|remove` runs) may run every command; nothing else may.",
        "api_permissions:",
        "  console commands:",
        "    from:",
        "      - ejabberd_ctl",
        "    who: all",
        '    what: "*"',
        "",
        "# roster and shared_roster: the membership; admin_extra: the srg_* and kick commands.",
        "# No mod_stream_mgmt: a vanished member would stay present (resumable) for minutes.",
        "modules:",
        "  mod_admin_extra: {}",
        "  mod_disco: {}",
        "  mod_ping: {}",
        "  mod_roster:",
        "    versioning: false",
        "  mod_shared_roster: {}",
        *_EJABBERD_REGISTER,
        *_EJABBERD_MULTICAST,
        "",
    ])  # fmt: skip


def ejabberd_multicast_service(domain: str) -> str:
    """The JID of the multicast service below (mod_multicast's default, ``multicast.@HOST@``)."""
    return f"multicast.{domain}"


# XEP-0077 for a logged-in member to change its own password, as `evio join` does with the join token's (decision
# 0083); `access: none` makes no account in-band (the accounts come from `evio member add`).
_EJABBERD_REGISTER = (
    "  # A member changes its own password (`evio join`, decision 0083); no account is made in-band.",
    "  mod_register:",
    "    access: none",
)


# XEP-0033 for the server host alone: `evio member add|remove` hands a change to every member online in one
# ejabberdctl call (an Erlang start, about a second each), not one call per member (decision 0065, amended).
_EJABBERD_MULTICAST = (
    "  # One message to many members, for the server's own JID only (`evio member`, decision 0065, amended).",
    "  mod_multicast:",
    "    access: evio_multicast",
    "    limits:",
    "      local:",
    "        message: infinite",
    "        presence: 0",
)


def ejabberd_additions(*, domain: str, certfile: str) -> str:
    """What an existing ejabberd needs for evio (`evio server init --print`)."""
    return "\n".join([
        "# hosts: add the domain; certfiles: add the PEM file; on the ejabberd_c2s listener:",
        f"#   hosts: [{_yaml_string(domain)}]   certfiles: [{_yaml_string(certfile)}]",
        "#   listen: - port: 5222, module: ejabberd_c2s, starttls_required: true, backlog: 1024",
        "cache_size: 10000",
        "acl:",
        "  evio_server_host:",
        '    user_regexp: "^$"',
        "access_rules:",
        "  evio_multicast:",
        "    allow: evio_server_host",
        "modules:",
        "  mod_admin_extra: {}",
        "  mod_shared_roster: {}",
        *_EJABBERD_REGISTER,
        *_EJABBERD_MULTICAST,
        "",
    ])  # fmt: skip


def _yaml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def coturn_config(
    *,
    realm: str,
    userdb: str,
    port: int = 3478,
    relay_ports: tuple[int, int] = DEFAULT_RELAY_PORTS,
    listening_ips: Iterable[str] = (),
    external_ip: str = "",
    extra: Iterable[str] = (),
) -> str:
    """A complete turnserver.conf (coturn 4.6) for evio's members: STUN, and TURN with long-term credentials.

    Relays are UDP only: evio never asks for a TCP relay (RFC 6062), and one would be an open TCP proxy from this
    host for any member (review21k K5). The server's own public address is not a denied peer: two members relayed
    by this server reach each other through it (one relay's peer is the other's relayed address, on this host).
    So a relay reaches this host's public ports as anyone on the internet does; the comment in the file says so."""
    listening = list(listening_ips)
    return "\n".join([
        f"# coturn for the evio overlays of realm {realm}: written by `evio server init`.",
        "# STUN for every member, TURN relays for members behind NATs that block a direct path.",
        "# Edit with care: `evio server init` rewrites this file.",
        "",
        f"listening-port={port}",
        *(f"listening-ip={ip}" for ip in listening),
        *([f"external-ip={external_ip}"] if external_ip else []),
        "# Relay ports: open this range (udp) in the firewall.",
        f"min-port={relay_ports[0]}",
        f"max-port={relay_ports[1]}",
        "",
        "# Long-term credentials: one TURN account per member, in coturn's sqlite database",
        "# (`evio member add` adds, `evio member remove` deletes; `turnadmin -l` lists).",
        "lt-cred-mech",
        f"realm={realm}",
        f"userdb={userdb}",
        "fingerprint",
        "",
        "# No TLS/DTLS listener: evio's tunnels are DTLS end to end already.",
        "no-tls",
        "no-dtls",
        "no-cli",
        "no-multicast-peers",
        "no-software-attribute",
        "",
        "# Relays are UDP only: evio never asks for a TCP relay, and one would be an open TCP proxy from here.",
        "no-tcp-relay",
        "",
        "# A relay must not reach the operator's private networks or this host's loopback. This host's public",
        "# address stays a peer (two members relayed here reach each other through it): keep its other services",
        "# on loopback or behind the firewall, as for anyone on the internet.",
        *(f"denied-peer-ip={r}" for r in DENIED_PEER_RANGES),
        "",
        "syslog",
        "simple-log",
        *extra,
        "",
    ])  # fmt: skip


def groups_text(groups: Mapping[str, Iterable[str]]) -> str:
    """prosody mod_groups file: ``[group]`` then one JID a line."""
    return "".join(f"[{name}]\n" + "".join(f"{jid}\n" for jid in members) for name, members in groups.items())


def parse_groups(text: str) -> dict[str, list[str]]:
    """The groups and their JIDs (names after ``=`` dropped); JIDs before any ``[group]`` are ignored."""
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1].strip(), [])
        elif current is not None:
            jid = line.split("=", 1)[0].strip()
            if jid and jid not in current:
                current.append(jid)
    return groups
