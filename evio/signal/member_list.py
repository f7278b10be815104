"""The overlay CA's member list: who belongs to an overlay, and which node id each account holds (0059).

Pure: text and a trust anchor in, a verified list or the reason out. Past a few hundred members the
XMPP server no longer says who is a member (no shared roster group, decision 0052): the overlay CA
does, with this list, which the server host signs and serves like the revocation list::

    {"overlay": O, "serial": S, "issued": T, "members": [[N, "account@domain"], ...], "sig": B64}

N is the node id (32 hex digits) the member's certificate names, the account its bare JID. A node
keeps the highest-serial list that verifies against its CA. A member's claim in its presence is
then accepted only when it is proven (`evio.signal.identity`) *and* the list pairs that account with
that node id, so the XMPP server can neither add a member nor move one's id. Revocation still goes by
the revocation list (a removed member's certificate outlives an older member list a node may hold).

A change (decision 0065) is what the server host sends most members instead of the whole list: the
entries added and the node ids removed since the list of serial `base`, with the new list's own serial,
time and CA signature::

    {"overlay": O, "serial": S, "issued": T, "base": S0, "add": [[N, "account@domain"], ...],
     "remove": [N, ...], "sig": B64}

A node holding list `base` makes the new list from it (`apply_change`) and verifies the CA's signature
over that whole list (`refusal`), exactly as if the list itself had come: a change cannot say anything
the CA did not sign. One add or removal is about 250 bytes, whatever the size of the overlay.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evio.signal import identity
from evio.signal.identity import CaKey, IdentityError, TrustAnchor

# The server host hands a new list to the members online in a message of its own (decision 0063):
# <members xmlns="urn:x-evio:members:1">the list's JSON</members>, from the server's domain only.
NAMESPACE = "urn:x-evio:members:1"
ELEMENT = "members"
MAX_MEMBERS = 65536
MAX_TEXT_BYTES = 8 * 1024 * 1024
MAX_CHANGE_BYTES = 4096  # a change's text: about 30 entries; a larger change goes as the whole list
_CONTEXT = b"evio-members/1\x00"
_ACCOUNT_RE = re.compile(r"[^@/\s\"']{1,256}@[^@/\s\"']{1,256}")


@dataclass(frozen=True)
class MemberList:
    overlay: str
    serial: int
    issued: int  # Unix seconds
    members: Mapping[int, str] = field(default_factory=dict)  # node id -> account (bare JID)
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        return _CONTEXT + json.dumps(self._body(), sort_keys=True, separators=(",", ":")).encode()

    def accounts(self) -> dict[str, int]:
        """account -> its node id."""
        return {account: node_id for node_id, account in self.members.items()}

    def to_json(self) -> dict[str, Any]:
        return {**self._body(), "sig": base64.b64encode(self.signature).decode()}

    def _body(self) -> dict[str, Any]:
        return {"overlay": self.overlay, "serial": self.serial, "issued": self.issued,
                "members": [[f"{n:032x}", a] for n, a in sorted(self.members.items())]}  # fmt: skip


def sign_members(ca_key: CaKey, overlay: str, serial: int, issued: int, members: Mapping[int, str]) -> MemberList:
    unsigned = MemberList(overlay, serial, issued, dict(members))
    return MemberList(overlay, serial, issued, dict(members), identity.ca_sign(ca_key, unsigned.signed_bytes()))


def refusal(anchor: TrustAnchor, members: MemberList) -> str | None:
    """Why `members` is not the overlay CA's list for the anchor's overlay; None when it is."""
    if members.overlay != anchor.overlay:
        return f"a member list for overlay {members.overlay}, not {anchor.overlay}"
    return identity.ca_signature_refusal(anchor, members.signed_bytes(), members.signature)


def to_text(members: MemberList) -> str:
    """The list as a JSON file (the server host writes it beside the overlay CA: `member-list.json`)."""
    return json.dumps(members.to_json(), indent=1) + "\n"


def load(text: str) -> MemberList:
    """Parse (not verify: `refusal`) a member list; IdentityError says what is wrong."""
    if not isinstance(text, str) or len(text) > MAX_TEXT_BYTES:
        raise IdentityError(f"a member list is text of at most {MAX_TEXT_BYTES} bytes")
    item = identity._loads(text)
    identity._fields(item, {"overlay", "serial", "issued", "members", "sig"})
    serial, issued, entries = item["serial"], item["issued"], item["members"]
    for name, value in (("serial", serial), ("issued", issued)):
        if type(value) is not int or not 0 <= value < 1 << 53:
            raise IdentityError(f"{name} must be a non-negative integer")
    if not isinstance(entries, list) or len(entries) > MAX_MEMBERS:
        raise IdentityError(f"members: a list of at most {MAX_MEMBERS}")
    members: dict[int, str] = {}
    accounts: set[str] = set()
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], str):
            raise IdentityError("each member is [node id, account]")
        node_id, account = identity._node(entry[0]), entry[1]
        if not _ACCOUNT_RE.fullmatch(account):
            raise IdentityError(f"bad account {account[:40]!r}")
        if node_id in members or account in accounts:
            raise IdentityError("a node id or an account listed twice")
        members[node_id] = account
        accounts.add(account)
    return MemberList(identity._overlay(item["overlay"]), serial, issued, members,
                      identity._b64(item["sig"], identity.MAX_SIG_BYTES))  # fmt: skip


@dataclass(frozen=True)
class MemberChange:
    """The list of serial `serial` as a change to the list of serial `base`, with the new list's signature."""

    overlay: str
    serial: int
    issued: int
    base: int
    added: Mapping[int, str]  # node id -> account
    removed: tuple[int, ...]
    signature: bytes


def change_between(old: MemberList, new: MemberList) -> MemberChange:
    """What turns `old` into `new` (the server host's side)."""
    added = {n: a for n, a in new.members.items() if old.members.get(n) != a}
    removed = tuple(sorted(n for n, a in old.members.items() if new.members.get(n) != a))
    return MemberChange(new.overlay, new.serial, new.issued, old.serial, added, removed, new.signature)


def change_to_text(change: MemberChange) -> str:
    return json.dumps({"overlay": change.overlay, "serial": change.serial, "issued": change.issued,
                       "base": change.base, "add": [[f"{n:032x}", a] for n, a in sorted(change.added.items())],
                       "remove": [f"{n:032x}" for n in change.removed],
                       "sig": base64.b64encode(change.signature).decode()}, separators=(",", ":"))  # fmt: skip


def load_change(text: str) -> MemberChange:
    """Parse (not verify) a change; IdentityError says what is wrong."""
    if not isinstance(text, str) or len(text) > MAX_CHANGE_BYTES:
        raise IdentityError(f"a member list change is text of at most {MAX_CHANGE_BYTES} bytes")
    item = identity._loads(text)
    identity._fields(item, {"overlay", "serial", "issued", "base", "add", "remove", "sig"})
    for name in ("serial", "issued", "base"):
        if type(item[name]) is not int or not 0 <= item[name] < 1 << 53:
            raise IdentityError(f"{name} must be a non-negative integer")
    if item["base"] >= item["serial"]:
        raise IdentityError("a change's base must be below its serial")
    adds, removes = item["add"], item["remove"]
    if not isinstance(adds, list) or not isinstance(removes, list):
        raise IdentityError("add and remove must be lists")
    added: dict[int, str] = {}
    for entry in adds:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], str):
            raise IdentityError("each added member is [node id, account]")
        if not _ACCOUNT_RE.fullmatch(entry[1]):
            raise IdentityError(f"bad account {entry[1][:40]!r}")
        added[identity._node(entry[0])] = entry[1]
    removed = tuple(identity._node(n) for n in removes)
    if len(added) != len(adds) or len(set(removed)) != len(removed):
        raise IdentityError("a node id added or removed twice")
    return MemberChange(identity._overlay(item["overlay"]), item["serial"], item["issued"], item["base"], added,
                        removed, identity._b64(item["sig"], identity.MAX_SIG_BYTES))  # fmt: skip


def apply_change(held: MemberList, change: MemberChange) -> MemberList:
    """The list `change` makes of `held` (not verified: `refusal` checks the CA's signature over all of it).
    IdentityError if `held` is not the list the change is based on, or the change does not fit it."""
    if change.overlay != held.overlay or change.base != held.serial:
        raise IdentityError(f"a change of list {change.base}, not of the list held ({held.serial})")
    members = dict(held.members)
    for node_id in change.removed:
        if members.pop(node_id, None) is None:
            raise IdentityError(f"removes {node_id:032x}, not on the list held")
    for node_id, account in change.added.items():
        members[node_id] = account  # a node id given another account: its old one goes
    if len(members) > MAX_MEMBERS or len(set(members.values())) != len(members):
        raise IdentityError("the changed list has too many members or an account twice")
    return MemberList(change.overlay, change.serial, change.issued, members, change.signature)
