"""What `evio server init` decided about the server host, kept in ``<state dir>/server.json``.

`evio member add` reads it to know which XMPP server to administer, where
its files are, and what to put into a join token (the address members connect
to, the ports, the TLS CA that verifies the XMPP server). Everything under the
state directory is root's, mode 0700: it holds the overlays' CA keys.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

DEFAULT_STATE_DIR = Path("/etc/evio-server")
SETTINGS_VERSION = 1

XmppKind = Literal["prosody", "ejabberd"]


class ServerSettingsError(Exception):
    """server.json is missing, unreadable or invalid: the message says which and what to run."""


@dataclass(frozen=True)
class ServerSettings:
    domain: str  # the XMPP domain; members' JIDs are <node>@<domain>
    xmpp: XmppKind
    address: str  # what members connect to for XMPP, STUN and TURN: an IP address or a DNS name
    xmpp_port: int = 5222
    turn_port: int = 3478
    turn_realm: str = ""  # coturn's realm; "" means the domain
    # Files the server commands administer (absolute paths; defaults are the Debian packages' own).
    prosody_config: str = "/etc/prosody/prosody.cfg.lua"
    groups_file: str = "/etc/prosody/evio-groups.txt"
    ejabberdctl: str = "ejabberdctl"  # the command, split like a shell would (tests add --config-dir, --node)
    ejabberd_config: str = "/etc/ejabberd/ejabberd.yml"
    # The XEP-0033 multicast service `evio server init` enables (mod_multicast, for the server's own JID): a
    # message to every member online is then a few ejabberdctl calls, not one per member (decision 0065, amended).
    # "" (a server.json from before it): one call per member.
    ejabberd_multicast: str = ""
    turn_config: str = "/etc/turnserver.conf"
    turn_db: str = "/var/lib/turn/turndb"
    relay_min_port: int = 49152  # coturn's relay range (udp): members' firewalls need not know it, the server's does
    relay_max_port: int = 65535
    # Verifies the XMPP server's certificate; copied into tokens. "" (a certificate given to init without
    # its CA): members use their system's trust store.
    xmpp_tls_ca: str = "/etc/evio-server/tls/ca.crt"
    version: int = field(default=SETTINGS_VERSION)

    @property
    def realm(self) -> str:
        return self.turn_realm or self.domain


def settings_path(state_dir: Path) -> Path:
    return state_dir / "server.json"


def load_settings(state_dir: Path) -> ServerSettings:
    path = settings_path(state_dir)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ServerSettingsError(f"{path} does not exist: run `evio server init` on this host first") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ServerSettingsError(f"{path}: cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise ServerSettingsError(f"{path}: not a JSON object")
    known = {f.name for f in fields(ServerSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ServerSettingsError(f"{path}: unknown keys {', '.join(unknown)} (written by a newer evio?)")
    if raw.get("version") != SETTINGS_VERSION:
        raise ServerSettingsError(f"{path}: version {raw.get('version')!r}, this evio reads {SETTINGS_VERSION}")
    try:
        return ServerSettings(**raw)
    except TypeError as exc:
        raise ServerSettingsError(f"{path}: {exc}") from None


def save_settings(state_dir: Path, settings: ServerSettings) -> None:
    write_private(settings_path(state_dir), json.dumps(asdict(settings), indent=2) + "\n")


def write_private(path: Path, text: str | bytes, mode: int = 0o600) -> None:
    """Write atomically (a temporary file renamed over), created with `mode` from the start.

    The temporary file is a new one of a random name (O_EXCL): in a shared directory nobody can have placed
    a link or a file of theirs where it is written (review of issue 21)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = text.encode() if isinstance(text, str) else text
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            tmp.unlink(missing_ok=True)
            raise
        # `path` is a mount point (a file bind-mounted into a container): it cannot be replaced, only
        # rewritten in place, which is not atomic but is all such a file allows.
        os.unlink(tmp)
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def as_dict(settings: ServerSettings) -> dict[str, Any]:
    return asdict(settings)
