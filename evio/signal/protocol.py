"""The signaling wire schema: JSON documents inside one namespaced XML element.

Pure: encode and decode only; no XML library, no I/O. The adapter puts the JSON
text into ``<evio xmlns="urn:x-evio:signal:1">`` inside a ``<message>``
(requests, responses, errors) or a ``<presence>`` (membership announcement).

Envelopes (every field listed is required; ``features`` is optional)::

    {"v": 1, "kind": "request",  "overlay": O, "src": N, "dst": N, "txid": T, "action": A, "body": {...}}
    {"v": 1, "kind": "response", "overlay": O, "src": N, "dst": N, "txid": T, "body": {...}}
    {"v": 1, "kind": "error",    "overlay": O, "src": N, "dst": N, "txid": T, "reason": R, "text": S}
    {"v": 1, "kind": "announce", "members": [{"overlay": O, "node": N}, ...], "features": [F, ...]}

O is an overlay id ``[A-Za-z0-9_-]{1,32}``; N a node id as exactly 32 lowercase
hex digits; T a transaction id ``[A-Za-z0-9_-]{1,64}``; A an action name
``[a-z][a-z0-9_.-]{0,63}``; R one of the wire error reasons; S at most 256
characters; F a feature name ``[a-z][a-z0-9_.-]{0,63}``. The whole JSON text is
at most ``MAX_PAYLOAD_BYTES`` (UTF-8). Duplicate keys, NaN/Infinity and nesting
deep enough to exhaust the parser are refused. Every refusal raises
``ProtocolError`` with a ``Malformed`` reason.

Compatibility between releases (docs/operations.md, "Upgrades"). A release
must read everything the previous one sends, and what the next one adds must
not make it refuse a message. So:

- ``v`` is the major version: it changes only with a change that older nodes
  cannot read, which is then a flag day; additions never change it. A message
  of another ``v`` is refused (BAD_VERSION; counted ``unsupported_version``).
- Fields are only added, never removed or given another meaning. A field this
  release does not know, at the top of an envelope or announcement or in a
  member, is ignored (the decoded object lists it in ``ignored``; the endpoint
  counts it), not refused. So is an error ``reason`` it does not know: it
  decodes as ``ErrorReason.OTHER`` with the peer's reason in the text.
- A new kind is refused (UNKNOWN_KIND; counted ``unknown_kind``, not as
  malformed). A new remote action is answered ``unknown_action`` by a node
  without a handler for it: the requester can tell "not supported" from a
  failure.
- Anything new goes only to peers that announced they read it: a feature name
  in the ``features`` of their announcement, kept per peer by the peer table
  (``SignalEndpoint.peer_features``). A node sends a feature-gated message,
  field, action, FRB type or record only when the peer announced that feature.

The previous release, evio 0.1.0 (commit 26a4fda), refuses any field it does
not know, in envelopes, announcements, negotiation and tunnel bodies alike: an
announcement with ``features`` would make it drop this node's presence and
never link to it. So this release announces no features (``FEATURES`` is
empty) and adds nothing to what it sends; it reads ``features`` and ignores
the unknown, so that the next release may announce and add.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from evio.ids import OVERLAY_ID
from evio.signal.errors import WIRE_ERROR_REASONS, ErrorReason, Malformed, ProtocolError

NAMESPACE = "urn:x-evio:signal:1"
ELEMENT = "evio"
VERSION = 1
MAX_PAYLOAD_BYTES = 16 * 1024  # ICE candidates plus a DTLS fingerprint fit many times over
MAX_TEXT_CHARS = 256
MAX_MEMBERSHIPS = 64

_NODE_ID_RE = re.compile(r"[0-9a-f]{32}")
TXID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
ACTION_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
FEATURE_RE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
MAX_FEATURES = 64
FEATURES: frozenset[str] = frozenset()
"""What this release announces it reads beyond the previous release's protocol (see the module docstring)."""

Body = dict[str, Any]


@dataclass(frozen=True)
class Request:
    overlay: str
    src: int
    dst: int
    txid: str
    action: str
    body: Body
    ignored: tuple[str, ...] = field(default=(), compare=False)  # fields a newer peer added, not read here


@dataclass(frozen=True)
class Response:
    overlay: str
    src: int
    dst: int
    txid: str
    body: Body
    ignored: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class ErrorReply:
    overlay: str
    src: int
    dst: int
    txid: str
    reason: ErrorReason
    text: str
    ignored: tuple[str, ...] = field(default=(), compare=False)


Envelope = Request | Response | ErrorReply


@dataclass(frozen=True)
class Membership:
    overlay: str
    node_id: int


@dataclass(frozen=True)
class Announcement:
    """What a node claims in its presence: the (overlay, node id) pairs it serves, and the features it reads."""

    members: tuple[Membership, ...]
    features: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = field(default=(), compare=False)


_FIELDS: dict[str, frozenset[str]] = {
    "request": frozenset({"v", "kind", "overlay", "src", "dst", "txid", "action", "body"}),
    "response": frozenset({"v", "kind", "overlay", "src", "dst", "txid", "body"}),
    "error": frozenset({"v", "kind", "overlay", "src", "dst", "txid", "reason", "text"}),
    "announce": frozenset({"v", "kind", "members"}),
}
_OPTIONAL: dict[str, frozenset[str]] = {"announce": frozenset({"features"})}
_MEMBER_FIELDS = frozenset({"overlay", "node"})


# ---------------------------------------------------------------------------- encode


def encode(envelope: Envelope, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """The JSON text for an envelope; ProtocolError if it would not validate."""
    _check_overlay(envelope.overlay)
    _check_txid(envelope.txid)
    doc: dict[str, Any] = {
        "v": VERSION,
        "overlay": envelope.overlay,
        "src": _node_text(envelope.src),
        "dst": _node_text(envelope.dst),
        "txid": envelope.txid,
    }
    if isinstance(envelope, Request):
        _check_action(envelope.action)
        doc.update(kind="request", action=envelope.action, body=_check_body(envelope.body))
    elif isinstance(envelope, Response):
        doc.update(kind="response", body=_check_body(envelope.body))
    else:
        if envelope.reason not in WIRE_ERROR_REASONS:
            _fail(Malformed.BAD_ERROR_REASON, f"{envelope.reason.value} is not sent on the wire")
        doc.update(kind="error", reason=envelope.reason.value, text=_check_text(envelope.text))
    return _dump(doc, max_bytes)


def encode_announcement(announcement: Announcement, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    members = announcement.members
    if len(members) > MAX_MEMBERSHIPS:
        _fail(Malformed.TOO_MANY_MEMBERSHIPS, f"{len(members)} > {MAX_MEMBERSHIPS}")
    overlays = [m.overlay for m in members]
    if len(set(overlays)) != len(overlays):
        _fail(Malformed.DUPLICATE_MEMBERSHIP, "an overlay appears twice")
    for m in members:
        _check_overlay(m.overlay)
    doc: dict[str, Any] = {
        "v": VERSION,
        "kind": "announce",
        "members": [{"overlay": m.overlay, "node": _node_text(m.node_id)} for m in members],
    }
    if announcement.features:  # never empty on the wire: the previous release refuses the field
        doc["features"] = _features(sorted(announcement.features))
    return _dump(doc, max_bytes)


def _dump(doc: Mapping[str, Any], max_bytes: int) -> str:
    try:
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # unserialisable value, NaN, circular
        _fail(Malformed.NOT_JSON, f"body is not plain JSON: {exc}")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        _fail(Malformed.TOO_LARGE, f"{size} bytes > {max_bytes}")
    return text


# ---------------------------------------------------------------------------- decode


def decode(text: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> Envelope:
    """Parse and validate a message payload (request, response or error)."""
    doc = _load(text, max_bytes)
    kind = _kind(doc)
    if kind == "announce":
        _fail(Malformed.UNKNOWN_KIND, "announce is only valid in presence")
    ignored = _required_fields(doc, _FIELDS[kind])
    overlay = _overlay(doc["overlay"])
    src = _node(doc["src"], "src")
    dst = _node(doc["dst"], "dst")
    txid = doc["txid"]
    if not isinstance(txid, str) or not TXID_RE.fullmatch(txid):
        _fail(Malformed.BAD_TXID, f"txid {_short(txid)}")
    if kind == "request":
        action = doc["action"]
        if not isinstance(action, str) or not ACTION_RE.fullmatch(action):
            _fail(Malformed.BAD_ACTION, f"action {_short(action)}")
        return Request(overlay, src, dst, txid, action, _body(doc["body"]), ignored)
    if kind == "response":
        return Response(overlay, src, dst, txid, _body(doc["body"]), ignored)
    reason_text = doc["reason"]
    reason = _wire_reason(reason_text)
    error_text = doc["text"]
    if not isinstance(error_text, str) or len(error_text) > MAX_TEXT_CHARS:
        _fail(Malformed.BAD_TEXT, f"text must be a string of at most {MAX_TEXT_CHARS} characters")
    if reason is ErrorReason.OTHER:  # a newer peer's reason: keep it for the log
        error_text = f"{reason_text}: {error_text}"[:MAX_TEXT_CHARS]
    return ErrorReply(overlay, src, dst, txid, reason, error_text, ignored)


def decode_announcement(text: str, max_bytes: int = MAX_PAYLOAD_BYTES) -> Announcement:
    """Parse and validate a presence announcement."""
    doc = _load(text, max_bytes)
    if _kind(doc) != "announce":
        _fail(Malformed.UNKNOWN_KIND, "presence carries only announce")
    ignored = _required_fields(doc, _FIELDS["announce"] | _OPTIONAL["announce"])
    raw = doc["members"]
    if not isinstance(raw, list):
        _fail(Malformed.WRONG_TYPE, "members must be a list")
    if len(raw) > MAX_MEMBERSHIPS:
        _fail(Malformed.TOO_MANY_MEMBERSHIPS, f"{len(raw)} > {MAX_MEMBERSHIPS}")
    members: list[Membership] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, dict):
            _fail(Malformed.WRONG_TYPE, "each member must be an object")
        ignored += tuple(f"members.{name}" for name in _required_fields(item, _MEMBER_FIELDS))
        overlay = _overlay(item["overlay"])
        if overlay in seen:
            _fail(Malformed.DUPLICATE_MEMBERSHIP, f"overlay {overlay} appears twice")
        seen.add(overlay)
        members.append(Membership(overlay, _node(item["node"], "node")))
    features = frozenset(_features(doc["features"])) if "features" in doc else frozenset()
    return Announcement(tuple(members), features, tuple(dict.fromkeys(ignored)))


def _features(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_FEATURES:
        _fail(Malformed.WRONG_TYPE, f"features must be a list of at most {MAX_FEATURES} names")
    for name in value:
        if not isinstance(name, str) or not FEATURE_RE.fullmatch(name):
            _fail(Malformed.WRONG_TYPE, f"feature {_short(name)}")
    return list(value)


def _load(text: str, max_bytes: int) -> dict[str, Any]:
    if not isinstance(text, str):
        _fail(Malformed.NOT_JSON, "payload is not text")
    # Cheap bound first, exact byte count second: a UTF-8 character is at most 4 bytes.
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        _fail(Malformed.TOO_LARGE, f"more than {max_bytes} bytes")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except ProtocolError:
        raise
    except RecursionError:
        _fail(Malformed.NOT_JSON, "nested too deeply")
    except ValueError as exc:  # JSONDecodeError, and int digit limits
        _fail(Malformed.NOT_JSON, str(exc))
    if not isinstance(doc, dict):
        _fail(Malformed.NOT_OBJECT, f"top level is {type(doc).__name__}")
    return doc


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            _fail(Malformed.DUPLICATE_KEY, f"key {_short(key)} appears twice")
        out[key] = value
    return out


def _no_constants(name: str) -> NoReturn:
    _fail(Malformed.NOT_JSON, f"{name} is not JSON")


def _kind(doc: dict[str, Any]) -> str:
    if "v" not in doc:
        _fail(Malformed.MISSING_FIELD, "v")
    version = doc["v"]
    if type(version) is not int or version != VERSION:  # bool is an int: compare the type exactly
        _fail(Malformed.BAD_VERSION, f"v {_short(version)}, expected {VERSION}")
    if "kind" not in doc:
        _fail(Malformed.MISSING_FIELD, "kind")
    kind = doc["kind"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        _fail(Malformed.UNKNOWN_KIND, f"kind {_short(kind)}")
    return kind


def _required_fields(doc: dict[str, Any], known: frozenset[str]) -> tuple[str, ...]:
    """Refuse a document that lacks a required field; the names of those it has beyond `known` (a newer
    peer's additions: ignored, see the module docstring), at most a few and shortened, for the count and log."""
    missing = {name for name in known if name not in _OPTIONAL_NAMES} - doc.keys()
    if missing:
        _fail(Malformed.MISSING_FIELD, ", ".join(sorted(missing)))
    extra = doc.keys() - known
    return tuple(sorted(name[:40] for name in extra)[:_MAX_IGNORED_NAMES])


_OPTIONAL_NAMES = frozenset().union(*_OPTIONAL.values())
_MAX_IGNORED_NAMES = 8


def _overlay(value: Any) -> str:
    if not isinstance(value, str) or not OVERLAY_ID.fullmatch(value):
        _fail(Malformed.BAD_OVERLAY_ID, f"overlay {_short(value)}")
    return value


def _node(value: Any, field: str) -> int:
    if not isinstance(value, str) or not _NODE_ID_RE.fullmatch(value):
        _fail(Malformed.BAD_NODE_ID, f"{field} must be 32 lowercase hex digits, got {_short(value)}")
    return int(value, 16)


def _body(value: Any) -> Body:
    if not isinstance(value, dict):
        _fail(Malformed.WRONG_TYPE, f"body must be an object, got {type(value).__name__}")
    return value


def _wire_reason(value: Any) -> ErrorReason:
    for reason in WIRE_ERROR_REASONS:
        if reason.value == value:
            return reason
    known = {reason.value for reason in ErrorReason}
    if isinstance(value, str) and ACTION_RE.fullmatch(value) and value not in known:
        return ErrorReason.OTHER  # a reason a newer peer added
    _fail(Malformed.BAD_ERROR_REASON, f"reason {_short(value)}")


def _check_overlay(value: str) -> None:
    _overlay(value)


def _check_txid(value: str) -> None:
    if not isinstance(value, str) or not TXID_RE.fullmatch(value):
        _fail(Malformed.BAD_TXID, f"txid {_short(value)}")


def _check_action(value: str) -> None:
    if not isinstance(value, str) or not ACTION_RE.fullmatch(value):
        _fail(Malformed.BAD_ACTION, f"action {_short(value)}")


def _check_body(value: Body) -> Body:
    return _body(value)


def _check_text(value: str) -> str:
    if not isinstance(value, str):
        _fail(Malformed.BAD_TEXT, "text must be a string")
    return value[:MAX_TEXT_CHARS]  # our own diagnostics: truncate rather than refuse


def _node_text(node_id: int) -> str:
    if not isinstance(node_id, int) or not 0 <= node_id < 1 << 128:
        _fail(Malformed.BAD_NODE_ID, f"node id {_short(node_id)} out of range")
    return f"{node_id:032x}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(reason: Malformed, detail: str) -> NoReturn:
    raise ProtocolError(reason, detail)


def is_valid_action(name: str) -> bool:
    return isinstance(name, str) and ACTION_RE.fullmatch(name) is not None


def is_valid_overlay_id(name: str) -> bool:
    return isinstance(name, str) and OVERLAY_ID.fullmatch(name) is not None
