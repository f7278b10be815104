"""An overlay's members as the server host keeps them: `evio member add|remove|list`.

Per overlay, under ``<state dir>/overlays/<overlay>/``:

    ca.crt, ca.key   the overlay CA (Ed25519): signs node certificates and join tokens
    members.json     {"version": 1, "pool": "10.254.0.0/16", "members": {name: {...}}}
    revoked.json     the CA-signed revocation list (`evio.signal.identity`), rewritten by every remove
    member-list.json the CA-signed member list (`evio.signal.member_list`), rewritten by every add and remove:
                     beside a node's CA, its overlay takes membership from it, not the roster (decision 0059)

Node certificates live `CERT_DAYS` (30) days; `renew_member` issues a new one
for the same node id (`evio member renew`). A removed member's node id goes
on the revocation list until its last certificate has expired, so the list
stays short; members verify it against their CA and pass it on among
themselves (issue 21, M2).

A member is one XMPP account (``<name>@<domain>``, random password) in the
roster group named after the overlay, one TURN account of its own, one overlay
address from the pool that no other member holds, and one node certificate
naming its node id. `add_member` makes all of these, or, if any step fails,
undoes the ones it made and leaves the registry as it was; `remove_member`
takes them away in the order that cuts the member off first (group, then
account). Every change holds ``<state dir>/.lock``, so two operators cannot
hand out one address twice.

The XMPP server and coturn are reached through the `Accounts` and
`RelayAccounts` interfaces (`evio.server.xmpp_admin`, `evio.server.turn_admin`
in production, fakes in unit tests).
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import json
import logging
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from evio.config.address_pool import pool_problem
from evio.ids import OVERLAY_ID
from evio.server import token as join_token
from evio.server.settings import ServerSettings, write_private
from evio.signal import member_list
from evio.signal.identity import (
    ELEMENT,
    MAX_REVOKED,
    NAMESPACE,
    IdentityDocument,
    IdentityError,
    RevocationList,
    encode,
    list_to_text,
    load_list,
    sign_list,
)
from evio.signal.member_list import MemberList
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca

log = logging.getLogger(__name__)

REGISTRY_VERSION = 1
DEFAULT_POOL = "10.254.0.0/16"
TOKEN_LIFETIME = datetime.timedelta(hours=24)
REVOCATION_FILE = "revoked.json"  # the node reads the same name beside its ca.crt (evio.node.plan)
MEMBER_LIST_FILE = "member-list.json"  # likewise (evio.node.plan.MEMBER_FILE)
# The members online that get a new member list whole (decision 0065): they flood it over the overlay for those
# the server's change misses; every other member gets the change alone.
LIST_SEEDS = 3
CERT_DAYS = 30  # short, so a revocation list entry is needed for at most this long (issue 21, M2)
LEGACY_CERT_DAYS = 365  # what members added before certificate expiry was recorded may still hold
CA_DAYS = 3650
_NAME = join_token.NODE_NAME


class MemberError(Exception):
    """A member command that cannot be done; the message is one line for the operator."""


class Accounts(Protocol):
    """The XMPP server's accounts and roster groups (prosody or ejabberd)."""

    def create_account(self, user: str, password: str) -> None: ...

    def delete_account(self, user: str) -> None: ...

    def add_to_group(self, user: str, group: str) -> None: ...

    def remove_from_group(self, user: str, group: str) -> None: ...

    def online_users(self) -> set[str]: ...


class RelayAccounts(Protocol):
    """coturn's long-term credentials."""

    def add_user(self, user: str, password: str) -> None: ...

    def remove_user(self, user: str) -> None: ...


@dataclass(frozen=True)
class Member:
    name: str
    node_id: int
    address: str  # "10.254.0.2/16"
    added: str  # ISO 8601, UTC
    cert_expires: str | None = None  # ISO 8601, UTC: when its newest certificate expires (None: not recorded)

    def to_json(self) -> dict[str, Any]:
        doc = {"node_id": f"{self.node_id:032x}", "address": self.address, "added": self.added}
        if self.cert_expires is not None:
            doc["cert_expires"] = self.cert_expires
        return doc

    def certificates_expire(self) -> datetime.datetime:
        """When every certificate ever issued to it has expired (an upper bound for old records)."""
        if self.cert_expires is not None:
            return _parse_time(self.cert_expires)
        return _parse_time(self.added) + datetime.timedelta(days=LEGACY_CERT_DAYS)


@dataclass
class Overlay:
    overlay: str
    pool: str
    members: dict[str, Member]


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise MemberError(
            f"{name!r} is not a member name: 1 to 32 of a-z 0-9 _ -, starting with a letter or digit"
            " (it becomes the XMPP account and the TURN user)"
        )


def check_overlay(overlay: str) -> None:
    if not OVERLAY_ID.fullmatch(overlay):
        raise MemberError(f"{overlay!r} is not an overlay id: 1 to 32 of A-Z a-z 0-9 _ -")


class Registry:
    """The member files under a state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def overlay_dir(self, overlay: str) -> Path:
        return self.state_dir / "overlays" / overlay

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.state_dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def overlays(self) -> list[str]:
        root = self.state_dir / "overlays"
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if (p / "members.json").is_file())

    def load(self, overlay: str) -> Overlay | None:
        path = self.overlay_dir(overlay) / "members.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:
            raise MemberError(f"{path}: cannot read: {exc}") from None
        if not isinstance(raw, dict) or raw.get("version") != REGISTRY_VERSION:
            raise MemberError(f"{path}: not a version {REGISTRY_VERSION} member registry")
        try:
            members = {
                name: Member(name, int(m["node_id"], 16), str(m["address"]), str(m["added"]),
                             str(m["cert_expires"]) if "cert_expires" in m else None)
                for name, m in raw["members"].items()
            }
            return Overlay(overlay, str(raw["pool"]), members)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MemberError(f"{path}: damaged member registry ({exc!r})") from None

    def save(self, record: Overlay) -> None:
        document = {
            "version": REGISTRY_VERSION,
            "pool": record.pool,
            "members": {name: m.to_json() for name, m in sorted(record.members.items())},
        }
        write_private(self.overlay_dir(record.overlay) / "members.json", json.dumps(document, indent=2) + "\n")

    def ca(self, overlay: str) -> tuple[ed25519.Ed25519PrivateKey, x509.Certificate]:
        directory = self.overlay_dir(overlay)
        try:
            key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
            cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
        except (OSError, ValueError) as exc:
            raise MemberError(f"cannot load overlay {overlay}'s CA from {directory}: {exc}") from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise MemberError(f"{directory / 'ca.key'}: not an Ed25519 key")
        return key, cert

    def create_overlay(self, overlay: str, pool: str, now: datetime.datetime) -> Overlay:
        directory = self.overlay_dir(overlay)
        key, cert = make_overlay_ca(f"evio overlay {overlay} CA", now, CA_DAYS)
        write_private(directory / "ca.key", key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))  # fmt: skip
        write_private(directory / "ca.crt", cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
        record = Overlay(overlay, pool, {})
        self.save(record)
        return record

    def find(self, name: str) -> tuple[str, Member] | None:
        for overlay in self.overlays():
            record = self.load(overlay)
            if record is not None and name in record.members:
                return overlay, record.members[name]
        return None


def free_address(record: Overlay) -> str:
    """The lowest host address of the pool that no member holds."""
    pool = ipaddress.ip_network(record.pool)
    taken = {ipaddress.ip_interface(m.address).ip for m in record.members.values()}
    for host in pool.hosts():
        if host not in taken:
            return f"{host}/{pool.prefixlen}"
    raise MemberError(f"overlay {record.overlay}'s pool {record.pool} is full ({len(taken)} members)")


def new_node_id(record: Overlay) -> int:
    taken = {m.node_id for m in record.members.values()}
    while True:
        node_id = secrets.randbits(128)
        if node_id not in taken:
            return node_id


@dataclass(frozen=True)
class Added:
    member: Member
    token: str
    ca_fingerprint: str
    created_overlay: bool
    expires: datetime.datetime


def add_member(
    registry: Registry, settings: ServerSettings, accounts: Accounts, relay: RelayAccounts,
    overlay: str, name: str, now: datetime.datetime, pool: str | None = None,
    token_lifetime: datetime.timedelta = TOKEN_LIFETIME,
) -> Added:  # fmt: skip
    """Make `name` a member of `overlay` (creating the overlay on first use) and its join token."""
    check_overlay(overlay)
    check_name(name)
    if pool is not None and (problem := pool_problem(pool)) is not None:
        raise MemberError(f"--pool: {problem}")
    with registry.locked():
        existing = registry.find(name)
        if existing is not None:
            raise MemberError(
                f"{name} is already a member of overlay {existing[0]} (names are per server):"
                f" `evio member remove {name} --overlay {existing[0]}` first, or pick another name"
            )
        previous = read_member_list(registry, overlay)  # a damaged one refused before anything changes
        record = registry.load(overlay)
        created = record is None
        if record is None:
            record = registry.create_overlay(overlay, pool or DEFAULT_POOL, now)
        elif pool is not None and pool != record.pool:
            raise MemberError(f"overlay {overlay} already has the pool {record.pool}; leave --pool out")
        ca_key, ca_cert = registry.ca(overlay)
        node_id = new_node_id(record)
        address = free_address(record)
        # The certificate names the member's address too: its ARP answered at once everywhere (decision 0062).
        node_key, node_cert = issue_node_certificate(ca_key, ca_cert, [overlay], node_id, now, CERT_DAYS,
                                                     addresses={overlay: [ipaddress.ip_interface(address).ip]})  # fmt: skip
        member = Member(name, node_id, address, _time_text(now), _time_text(node_cert.not_valid_after_utc))
        xmpp_password, turn_password = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        xmpp_ca = _read_ca(settings)  # before any account exists: nothing to undo if it is missing
        undo: list[Any] = []
        try:
            accounts.create_account(name, xmpp_password)
            undo.append(lambda: accounts.delete_account(name))
            relay.add_user(name, turn_password)
            undo.append(lambda: relay.remove_user(name))
            record.members[name] = member
            registry.save(record)
            undo.append(lambda: _forget(registry, overlay, name))
            listed = write_member_list(registry, record, settings.domain, now, previous)
            # Last: from here on the running members see the new one (a live roster push).
            accounts.add_to_group(name, overlay)
        except Exception:
            for step in reversed(undo):
                try:
                    step()
                except Exception:  # noqa: BLE001 - undoing as much as possible; the first error is what counts
                    pass
            raise
        expires = now + token_lifetime
        server = settings.address
        token = join_token.JoinToken(
            overlay=overlay, node_name=name, node_id=member.node_id, address=member.address,
            xmpp_server=server, xmpp_port=settings.xmpp_port, jid=f"{name}@{settings.domain}",
            xmpp_password=xmpp_password, xmpp_ca_pem=xmpp_ca,
            stun=(_host_port(server, settings.turn_port),), turn_server=_host_port(server, settings.turn_port),
            turn_username=name, turn_password=turn_password,
            ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM).decode(), member_list=member_list.to_text(listed),
            cert_pem=node_cert.public_bytes(serialization.Encoding.PEM).decode(),
            key_pem=node_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ).decode(),
            expires=expires,
        )  # fmt: skip
        encoded = join_token.encode(token, ca_key)
        deliver_member_list(accounts, listed, previous)
        return Added(member, encoded, join_token.ca_fingerprint(token.ca_pem), created, expires)


def _forget(registry: Registry, overlay: str, name: str) -> None:
    record = registry.load(overlay)
    if record is not None and record.members.pop(name, None) is not None:
        registry.save(record)


def remove_member(
    registry: Registry, accounts: Accounts, relay: RelayAccounts, overlay: str, name: str,
    now: datetime.datetime | None = None, domain: str | None = None,
) -> Member:  # fmt: skip
    """Cut `name` off `overlay`: out of the group (live), account and TURN user deleted, address freed, and its
    node id on a new revocation list signed by the overlay CA (``revoked.json``); with the XMPP `domain`, the
    member list (``member-list.json``) written again without it."""
    check_overlay(overlay)
    check_name(name)
    now = now or datetime.datetime.now(datetime.UTC)
    with registry.locked():
        record, member = _member_of(registry, overlay, name)
        previous = read_member_list(registry, overlay) if domain is not None else None  # refused before any change
        # The list first: if signing fails nothing is cut yet, and once written it holds whatever follows.
        listed = revoke(registry, overlay, {member.node_id: member.certificates_expire()}, now)
        # Handed on at once: members whose membership is the CA's member list (decision 0059) ignore the group
        # change below, and the account's deletion takes seconds on ejabberd (an ejabberdctl call a step).
        deliver = getattr(accounts, "deliver", None)  # the XMPP server carries the list to the online members
        if deliver is not None:
            try:
                # The removed member last: it is about to lose its account anyway.
                others = [n for n in record.members if n != name]
                deliver(overlay, NAMESPACE, ELEMENT, encode(IdentityDocument((), (listed,))), members=[*others, name])
            except Exception as exc:  # noqa: BLE001 - members also read revoked.json, and pass it on
                log.warning("overlay %s: revocation list written but not delivered: %s", overlay, exc)
        accounts.remove_from_group(name, overlay)
        accounts.delete_account(name)
        relay.remove_user(name)
        del record.members[name]
        registry.save(record)
        if domain is not None:
            deliver_member_list(accounts, write_member_list(registry, record, domain, now, previous), previous)
        return member


def deliver_member_list(accounts: Accounts, listed: MemberList, previous: MemberList | None = None) -> None:
    """Hand the new list to the members online (the XMPP server carries it; decisions 0063, 0065). Best effort:
    the members that miss it get it over the overlay from one that has it, and a restarted node from its file.

    With the `previous` list, the first `LIST_SEEDS` members online get the whole list and flood it over the
    overlay; every other gets only the change (about 250 bytes), which it applies to the list it holds: a
    change costs the server O(members) small messages, not O(members) lists (70 KB each at 1,000 members)."""
    deliver = getattr(accounts, "deliver", None)
    if deliver is None:
        return
    whole = json.dumps(listed.to_json())
    text, seeds = whole, 0
    if previous is not None and previous.serial == listed.serial - 1:
        change = member_list.change_to_text(member_list.change_between(previous, listed))
        if len(change) <= member_list.MAX_CHANGE_BYTES and len(change) < len(whole):
            text, seeds = change, LIST_SEEDS
    try:
        users = [account.split("@", 1)[0] for account in listed.members.values()]
        deliver(listed.overlay, member_list.NAMESPACE, member_list.ELEMENT, text, members=users, seeds=seeds,
                seed_text=whole)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the member is added; the overlay carries the list too
        log.warning("overlay %s: member list serial=%d written but not delivered: %s", listed.overlay,
                    listed.serial, exc)  # fmt: skip


def read_member_list(registry: Registry, overlay: str) -> MemberList | None:
    """The member list last written for `overlay` (``member-list.json``), or None when there is none yet.

    MemberError, as `load_revocations`, when the file is there but cannot be read: the next list's serial comes
    from it, and nodes adopt only a higher serial than the one they hold, so a list written from serial 1 again
    would be ignored by every node, silently (review21q Q4). Read before anything changes."""
    path = registry.overlay_dir(overlay) / MEMBER_LIST_FILE
    try:
        listed = member_list.load(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, IdentityError) as exc:
        raise MemberError(f"{path}: cannot read the member list: {exc} (nothing changed: put the file right; the "
                          "next list's serial must be above the one the nodes hold)") from None  # fmt: skip
    if listed.overlay != overlay:
        raise MemberError(f"{path}: a member list for overlay {listed.overlay}, not {overlay} (nothing changed)")
    return listed


def write_member_list(
    registry: Registry, record: Overlay, domain: str, now: datetime.datetime, previous: MemberList | None
) -> MemberList:
    """The overlay's members as the CA signs them for nodes (``member-list.json``, 0644: it is public), its serial
    one above `previous` (`read_member_list`, read before the change)."""
    path = registry.overlay_dir(record.overlay) / MEMBER_LIST_FILE
    serial = previous.serial + 1 if previous is not None else 1
    ca_key, _ = registry.ca(record.overlay)
    listed = member_list.sign_members(ca_key, record.overlay, serial, int(now.timestamp()),
                                      {m.node_id: f"{m.name}@{domain}" for m in record.members.values()})  # fmt: skip
    write_private(path, member_list.to_text(listed), mode=0o644)
    return listed


def revocation_path(registry: Registry, overlay: str) -> Path:
    return registry.overlay_dir(overlay) / REVOCATION_FILE


def load_revocations(registry: Registry, overlay: str) -> RevocationList | None:
    path = revocation_path(registry, overlay)
    try:
        return load_list(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, IdentityError) as exc:
        raise MemberError(f"{path}: cannot read the revocation list: {exc}") from None


def revoke(
    registry: Registry, overlay: str, node_ids: dict[int, datetime.datetime], now: datetime.datetime
) -> RevocationList:
    """A new revocation list with `node_ids` added (each until its certificates expire), expired entries dropped,
    its serial one above the last; signed by the overlay CA and written to ``revoked.json`` (0644: it is public)."""
    ca_key, _ = registry.ca(overlay)
    previous = load_revocations(registry, overlay)
    stamp = int(now.timestamp())
    entries = {n: u for n, u in (previous.revoked.items() if previous else ()) if u > stamp}
    entries.update({n: int(until.timestamp()) for n, until in node_ids.items()})
    if len(entries) > MAX_REVOKED:
        raise MemberError(f"overlay {overlay}: {len(entries)} node ids revoked within a certificate lifetime, more than"
                          f" the list may carry ({MAX_REVOKED})")  # fmt: skip
    serial = previous.serial + 1 if previous else 1
    listed = sign_list(ca_key, overlay, serial, stamp, entries)
    write_private(revocation_path(registry, overlay), list_to_text(listed), mode=0o644)
    return listed


@dataclass(frozen=True)
class Renewed:
    member: Member
    key_pem: str
    cert_pem: str
    expires: datetime.datetime


def renew_member(registry: Registry, overlay: str, name: str, now: datetime.datetime, days: int = CERT_DAYS) -> Renewed:
    """A new node key and certificate for `name`'s node id (the old one stays valid until it expires)."""
    check_overlay(overlay)
    check_name(name)
    if not 1 <= days <= LEGACY_CERT_DAYS:
        raise MemberError(f"--days {days}: between 1 and {LEGACY_CERT_DAYS}")
    with registry.locked():
        record, member = _member_of(registry, overlay, name)
        ca_key, ca_cert = registry.ca(overlay)
        key, cert = issue_node_certificate(ca_key, ca_cert, [overlay], member.node_id, now, days,
                                           addresses={overlay: [ipaddress.ip_interface(member.address).ip]})  # fmt: skip
        expires = cert.not_valid_after_utc
        # The record keeps the latest expiry of any certificate issued: what a revocation must outlast.
        latest = max(expires, member.certificates_expire())
        renewed = Member(member.name, member.node_id, member.address, member.added, _time_text(latest))
        record.members[name] = renewed
        registry.save(record)
    return Renewed(renewed, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()).decode(),
                   cert.public_bytes(serialization.Encoding.PEM).decode(), expires)  # fmt: skip


def _time_text(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Listed:
    overlay: str
    pool: str
    member: Member
    online: bool


def list_members(registry: Registry, accounts: Accounts | None, overlay: str | None = None) -> list[Listed]:
    online = accounts.online_users() if accounts is not None else set()
    overlays = [overlay] if overlay is not None else registry.overlays()
    rows = []
    for ov in overlays:
        record = registry.load(ov)
        if record is None:
            raise MemberError(f"no overlay {ov} on this server")
        for name in sorted(record.members):
            rows.append(Listed(ov, record.pool, record.members[name], name in online))
    return rows


def _read_ca(settings: ServerSettings) -> str:
    try:
        return Path(settings.xmpp_tls_ca).read_text()
    except OSError as exc:
        raise MemberError(
            f"cannot read the XMPP server's TLS CA {settings.xmpp_tls_ca} ({exc.strerror}): run `evio server init`"
        ) from None


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _member_of(registry: Registry, overlay: str, name: str) -> tuple[Overlay, Member]:
    record = registry.load(overlay)
    if record is None:
        raise MemberError(f"no overlay {overlay} on this server (evio member list shows them)")
    member = record.members.get(name)
    if member is None:
        raise MemberError(f"{name} is not a member of overlay {overlay}")
    return record, member
