"""`evio server init`: the server host's XMPP server, coturn and TLS set up for evio, once and idempotently.

The flow:

1. check the input (domain, address, ports, given certificate) before anything is written;
2. the TLS material in ``<state dir>/tls``: the CA and the server key, made once and never again; the
   server certificate, issued again (same key) only when it does not name the domain and address;
3. the plan: every file with its content, mode and group (pure: `plan_files`);
4. apply it: a file is written only if its content, mode or group differ; a file evio did not write
   is kept as ``<file>.evio-orig`` the first time; ``server.json`` last;
5. report what changed (or that nothing did), the ports to open and the services to restart.

``--print`` stops after step 1 and prints what to add to servers the operator already runs.
"""

from __future__ import annotations

import datetime
import grp
import ipaddress
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from evio.server import configs, tls
from evio.server.configs import DEFAULT_RELAY_PORTS, ProsodyPaths
from evio.server.settings import (
    DEFAULT_STATE_DIR,
    ServerSettings,
    ServerSettingsError,
    XmppKind,
    load_settings,
    save_settings,
    settings_path,
    write_private,
)
from evio.server.turn_admin import TurnAdmin

BACKUP_SUFFIX = ".evio-orig"
_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)\Z")


class InitError(Exception):
    """Bad input or a file that cannot be used: one line for the operator; nothing was written."""


@dataclass(frozen=True)
class InitOptions:
    domain: str
    address: str
    xmpp: XmppKind = "prosody"
    state_dir: Path = DEFAULT_STATE_DIR
    cert: Path | None = None  # a certificate (chain) and key for the domain, instead of the CA init makes
    key: Path | None = None
    ca: Path | None = None  # with cert: the CA members verify it with ("": the system's trust store)
    xmpp_port: int = 5222
    turn_port: int = 3478
    relay_ports: tuple[int, int] = DEFAULT_RELAY_PORTS
    # The packaged servers' files (Debian 12); tests point them into a temporary directory.
    prosody_config: Path = Path("/etc/prosody/prosody.cfg.lua")
    groups_file: Path = Path("/etc/prosody/evio-groups.txt")
    prosody_certs: Path = Path("/etc/prosody/certs")
    ejabberd_config: Path = Path("/etc/ejabberd/ejabberd.yml")
    ejabberdctl: str = "ejabberdctl"
    turn_config: Path = Path("/etc/turnserver.conf")
    turn_db: Path = Path("/var/lib/turn/turndb")
    systemd_dir: Path = Path("/etc/systemd/system")  # prosody's open-files limit goes in a drop-in here
    # What only tests change: where prosody keeps its data and logs, which addresses servers bind.
    prosody_paths: ProsodyPaths = ProsodyPaths()
    xmpp_interfaces: tuple[str, ...] = ()  # (): every address
    turn_listening_ips: tuple[str, ...] = ()
    run_as_root: bool = False

    @property
    def tls_dir(self) -> Path:
        return self.state_dir / "tls"

    @property
    def ejabberd_certfile(self) -> Path:
        return self.ejabberd_config.parent / f"evio-{self.domain}.pem"

    @property
    def prosody_limits(self) -> Path:
        return self.systemd_dir / "prosody.service.d" / "evio-limits.conf"

    @property
    def prosody_cert(self) -> Path:
        return self.prosody_certs / f"evio-{self.domain}.crt"

    @property
    def prosody_key(self) -> Path:
        return self.prosody_certs / f"evio-{self.domain}.key"


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    content: bytes
    mode: int
    group: str | None = None  # the service's group that must read it; None: root's
    replace: bool = True  # False: written only if absent (the groups file: membership lives there)


@dataclass
class InitReport:
    changed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: ServerSettings | None = None

    def lines(self) -> list[str]:
        out = [*(f"wrote {c}" for c in self.changed)] or ["nothing changed: the server host is set up already"]
        return [*out, *self.notes]


# ------------------------------------------------------------------------------------------ 1. input


def check_options(options: InitOptions) -> None:
    check_domain(options.domain)
    check_address(options.address)
    if options.xmpp not in ("prosody", "ejabberd"):
        raise InitError(f"--xmpp must be prosody or ejabberd, not {options.xmpp!r}")
    for name, port in (("XMPP", options.xmpp_port), ("TURN", options.turn_port), *(
            ("relay", p) for p in options.relay_ports)):  # fmt: skip
        if not 1 <= port <= 65535:
            raise InitError(f"{name} port {port} is not a port number (1-65535)")
    low, high = options.relay_ports
    if low > high:
        raise InitError(f"relay port range {low}-{high} is empty")
    if (options.cert is None) != (options.key is None):
        raise InitError("--cert and --key go together")
    if options.ca is not None and options.cert is None:
        raise InitError("--ca names the CA of a certificate given with --cert")
    if options.cert is not None and options.key is not None:
        _given_certificate(options, options.cert, options.key)


def check_domain(domain: str) -> None:
    labels = domain.split(".")
    if len(domain) > 253 or len(labels) < 2 or not all(_DNS_LABEL.match(label) for label in labels):
        raise InitError(
            f"domain {domain!r} is not a DNS name in lower case with at least two labels (overlay.example.net)"
        )
    if labels[-1].isdigit():
        raise InitError(
            f"domain {domain!r} is an address, not a name: pass the name as --domain, the address as --address"
        )


def check_address(address: str) -> None:
    try:
        ipaddress.ip_address(address)
        return
    except ValueError:
        pass
    labels = address.split(".")
    if len(address) > 253 or not all(_DNS_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise InitError(f"address {address!r} is neither an IP address nor a DNS name")


def _given_certificate(options: InitOptions, cert_path: Path, key_path: Path) -> tuple[bytes, bytes]:
    try:
        cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
        certs = x509.load_pem_x509_certificates(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (OSError, ValueError) as exc:
        raise InitError(f"--cert/--key: cannot use {cert_path}, {key_path}: {exc}") from None
    if certs[0].public_key() != key.public_key():
        raise InitError(f"--key {key_path} is not the key of --cert {cert_path}")
    names = _dns_names(certs[0])
    if options.domain not in names:
        raise InitError(f"--cert {cert_path} names {', '.join(sorted(names)) or 'no DNS name'}, not {options.domain}")
    return cert_pem, key_pem


def _dns_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return set(san.get_values_for_type(x509.DNSName))


# ------------------------------------------------------------------------------------------ 2. TLS


@dataclass(frozen=True)
class TlsMaterial:
    cert_pem: bytes  # the server certificate (chain)
    key_pem: bytes
    ca_path: str  # what members verify the server with; "" for the system's trust store
    made: tuple[str, ...] = ()  # what was created or issued this run


def tls_material(options: InitOptions, now: datetime.datetime) -> TlsMaterial:
    """Made once in the state dir; the server certificate issued again only if it no longer fits."""
    if options.cert is not None and options.key is not None:
        cert_pem, key_pem = _given_certificate(options, options.cert, options.key)
        return TlsMaterial(cert_pem, key_pem, str(options.ca) if options.ca is not None else "")
    d = options.tls_dir
    made: list[str] = []
    ca_key_path, ca_path, key_path, cert_path = d / "ca.key", d / "ca.crt", d / "server.key", d / "server.crt"
    if ca_key_path.exists() and ca_path.exists():
        ca_key = tls.load_key(ca_key_path.read_bytes())
        ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
    else:
        ca_key, ca_cert = tls.make_ca(options.domain, now)
        write_private(ca_key_path, tls.key_pem(ca_key))
        write_private(ca_path, tls.certificate_pem(ca_cert), 0o644)
        made += [str(ca_path), str(ca_key_path)]
    if key_path.exists():
        key = tls.load_key(key_path.read_bytes())
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        write_private(key_path, tls.key_pem(key))
        made.append(str(key_path))
    if not cert_path.exists() or not _fits(x509.load_pem_x509_certificate(cert_path.read_bytes()), options, key):
        _, cert = tls.issue_server_certificate(ca_key, ca_cert, options.domain, options.address, now, key=key)
        write_private(cert_path, tls.certificate_pem(cert), 0o644)
        made.append(str(cert_path))
    return TlsMaterial(cert_path.read_bytes(), key_path.read_bytes(), str(ca_path), tuple(made))


def _fits(cert: x509.Certificate, options: InitOptions, key: ec.EllipticCurvePrivateKey) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    wanted = tls.subject_alt_names(options.domain, options.address)
    return cert.public_key() == key.public_key() and all(name in san for name in wanted)


# ------------------------------------------------------------------------------------------ 3. plan


def plan_files(options: InitOptions, material: TlsMaterial) -> list[PlannedFile]:
    o = options
    files: list[PlannedFile] = []
    if o.xmpp == "prosody":
        files += [
            PlannedFile(o.prosody_cert, material.cert_pem, 0o644, "prosody"),
            PlannedFile(o.prosody_key, material.key_pem, 0o640, "prosody"),
            PlannedFile(o.groups_file, b"", 0o640, "prosody", replace=False),
            PlannedFile(o.prosody_limits, configs.prosody_unit_limits().encode(), 0o644),
            PlannedFile(o.prosody_config, configs.prosody_config(
                domain=o.domain, cert=str(o.prosody_cert), key=str(o.prosody_key), groups_file=str(o.groups_file),
                port=o.xmpp_port, interfaces=o.xmpp_interfaces, paths=o.prosody_paths, run_as_root=o.run_as_root,
            ).encode(), 0o640, "prosody"),
        ]  # fmt: skip
    else:
        files += [
            PlannedFile(o.ejabberd_certfile, material.cert_pem + material.key_pem, 0o640, "ejabberd"),
            PlannedFile(o.ejabberd_config, configs.ejabberd_config(
                domain=o.domain, certfile=str(o.ejabberd_certfile), port=o.xmpp_port,
                ip=o.xmpp_interfaces[0] if o.xmpp_interfaces else "::",
            ).encode(), 0o640, "ejabberd"),
        ]  # fmt: skip
    files.append(PlannedFile(o.turn_config, configs.coturn_config(
        realm=o.domain, userdb=str(o.turn_db), port=o.turn_port, relay_ports=o.relay_ports,
        listening_ips=o.turn_listening_ips,
    ).encode(), 0o640, "turnserver"))  # fmt: skip
    return files


def settings_for(options: InitOptions, material: TlsMaterial) -> ServerSettings:
    o = options
    return ServerSettings(
        domain=o.domain, xmpp=o.xmpp, address=o.address, xmpp_port=o.xmpp_port, turn_port=o.turn_port,
        prosody_config=str(o.prosody_config), groups_file=str(o.groups_file), ejabberdctl=o.ejabberdctl,
        ejabberd_config=str(o.ejabberd_config), turn_config=str(o.turn_config), turn_db=str(o.turn_db),
        relay_min_port=o.relay_ports[0], relay_max_port=o.relay_ports[1], xmpp_tls_ca=material.ca_path,
        ejabberd_multicast=configs.ejabberd_multicast_service(o.domain) if o.xmpp == "ejabberd" else "",
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ 4. apply


def run_init(options: InitOptions, now: datetime.datetime | None = None) -> InitReport:
    check_options(options)
    _check_previous(options)
    _private_directory(options.state_dir)
    material = tls_material(options, now or datetime.datetime.now(datetime.UTC))
    report = InitReport(changed=list(material.made))
    for planned in plan_files(options, material):
        if apply_file(planned):
            report.changed.append(str(planned.path))
    if not options.turn_db.exists():
        TurnAdmin(options.turn_db, options.domain).ensure_database()
        report.changed.append(str(options.turn_db))
    settings = settings_for(options, material)
    try:
        previous = load_settings(options.state_dir)
    except ServerSettingsError:
        previous = None
    if previous != settings:
        save_settings(options.state_dir, settings)
        report.changed.append(str(settings_path(options.state_dir)))
    report.settings = settings
    report.notes = next_steps(settings, restart=bool(report.changed))
    return report


def _check_previous(options: InitOptions) -> None:
    """A second init with another domain or server would strand the members made for the first."""
    try:
        previous = load_settings(options.state_dir)
    except ServerSettingsError:
        return
    if (previous.domain, previous.xmpp) != (options.domain, options.xmpp):
        raise InitError(f"{settings_path(options.state_dir)} is for {previous.domain} on {previous.xmpp}; "
                        f"this host serves that (use another --state-dir for another server)")  # fmt: skip


def _private_directory(path: Path) -> None:
    """The state directory holds the CA key: root's alone, whoever made it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        path.chmod(0o700)


def apply_file(planned: PlannedFile) -> bool:
    """Write `planned` if it differs (content, mode, group); back up a file evio did not write. True if written.

    Groups are set only when running as root (a test in a temporary directory runs as anyone).
    """
    as_root = os.geteuid() == 0
    gid = _gid(planned.group) if as_root else os.getegid()
    path = planned.path
    try:
        current = path.read_bytes()
        stat: os.stat_result | None = path.stat()
    except FileNotFoundError:
        current, stat = None, None
    if current is not None and not planned.replace:
        return False
    if stat is not None and current == planned.content and (stat.st_mode & 0o777, stat.st_gid) == (planned.mode, gid):
        return False
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if current is not None and not backup.exists() and not _written_by_evio(current):
        shutil.copy2(path, backup)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created with the final mode and root's group, then handed to the service's group: never wider.
    write_private(path, planned.content, planned.mode)
    if as_root:
        os.chown(path, 0, gid)
    return True


def _written_by_evio(content: bytes) -> bool:
    return b"written by `evio server init`" in content[:400]


def _gid(group: str | None) -> int:
    if group is None:
        return 0
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return 0  # the package is not installed here: root's until it is (init runs again after)


# ------------------------------------------------------------------------------------------ 5. report


def next_steps(settings: ServerSettings, *, restart: bool) -> list[str]:
    xmpp_service = "prosody" if settings.xmpp == "prosody" else "ejabberd"
    lines = [
        "",
        f"ports to open: {settings.xmpp_port}/tcp (XMPP), {settings.turn_port}/udp and {settings.turn_port}/tcp "
        f"(STUN/TURN), {settings.relay_min_port}-{settings.relay_max_port}/udp (TURN relays)",
    ]
    if restart:
        lines += ["restart the services to apply:",
                  *(["  systemctl daemon-reload"] if settings.xmpp == "prosody" else []),
                  f"  systemctl enable {xmpp_service} coturn",
                  f"  systemctl restart {xmpp_service} coturn"]  # fmt: skip
    lines.append("then add members: evio member add NODE --overlay OVERLAY")
    return lines


def print_additions(options: InitOptions) -> list[str]:
    """`--print`: what servers the operator already runs need; nothing is written."""
    check_options(options)
    o = options
    cert = str(o.cert) if o.cert else "/path/to/server.crt"
    key = str(o.key) if o.key else "/path/to/server.key"
    out = [
        f"# A certificate for {o.domain} is needed"
        + ("." if o.cert else " (pass --cert/--key, or run without --print to have one made)."),
        "",
    ]
    if o.xmpp == "prosody":
        out += [f"# {o.prosody_config}", configs.prosody_additions(domain=o.domain, cert=cert, key=key,
                                                                   groups_file=str(o.groups_file))]  # fmt: skip
        out += [f"# and create {o.groups_file} (empty; `evio member add` fills it), readable by prosody", ""]
        out += [f"# {o.prosody_limits}", configs.prosody_unit_limits()]
    else:
        out += [
            f"# {o.ejabberd_config}",
            configs.ejabberd_additions(domain=o.domain, certfile=f"{cert} (with {key} appended)"),
        ]
    turn = configs.coturn_config(realm=o.domain, userdb=str(o.turn_db), port=o.turn_port, relay_ports=o.relay_ports)
    turn_lines = [line for line in turn.splitlines() if "evio server init" not in line]
    out += [f"# {o.turn_config}: these lines (and no static-auth-secret / use-auth-secret)", *turn_lines]
    ca = str(o.ca) if o.ca else ("" if o.cert else str(o.tls_dir / "ca.crt"))
    settings = settings_for(o, TlsMaterial(b"", b"", ca))
    out += [f"# {settings_path(o.state_dir)} (root's, mode 0600): what `evio member` reads"
            + (f"; put the CA that verifies the certificate at {ca}" if ca else ""),
            json.dumps(asdict(settings), indent=2)]  # fmt: skip
    out += next_steps(settings, restart=True)
    return out


def split_ports(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise InitError(f"relay ports {text!r}: expected LOW-HIGH, e.g. 49152-65535") from None
