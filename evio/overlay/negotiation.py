"""Edge negotiation: the two remote actions overlay controllers exchange (paper section 3.1).

Pure: bodies in and out, no I/O. They travel as the JSON ``body`` of an
evio.signal remote action.

``overlay.link`` -- "I want to hold a link to you, of this type"::

    request  {"v": 1, "type": T, "existing": false, "epoch": E}   a new link (the requester then connects)
             {"v": 1, "type": T, "existing": true, "epoch": E}    hold, or hold as another type, the link we share
    answer   {"v": 1, "accepted": true, "held_as": T | null, "epoch": E}   held_as: the answerer holds it too
             {"v": 1, "accepted": false, "refusal": R}

``overlay.release`` -- "I no longer hold the link to you"::

    request  {"v": 1, "type": T}                     the type it was held as
    answer   {"v": 1, "held_as": T | null}            null: nobody holds it, the releaser tears it down

T is a link type (``successor``, ``long_distance``, ``on_demand``), R a
``LinkRefusal``, E the sender's epoch: a number its overlay controller draws when
it starts (0 <= E < 2**64). A new-link request from a peer whose epoch differs
from the one its current link was agreed with comes from a restarted peer:
that link is stale (its other end is gone), and the request replaces it at once
instead of being refused as ``already_linked`` until the dead tunnel times out.
Every field is required; a body that lacks one or holds a wrong value raises
``NegotiationError`` with the reason, never a KeyError or TypeError.

Compatibility between releases (evio.signal.protocol, docs/operations.md
"Upgrades"): ``v`` changes only with a change older nodes cannot read. A field
this release does not know (a newer one's) is ignored, and so is a refusal
reason it does not know: it reads as ``other``, a refusal like any passing one.
A new link type is sent only to a peer that announced the feature for it. The
previous release, 0.1.0, refuses a body with a field it does not know: this
release adds none.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evio.overlay.adjacency import LinkType, RejectReason

ACTION_LINK = "overlay.link"
ACTION_RELEASE = "overlay.release"
VERSION = 1
EPOCH_LIMIT = 1 << 64
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a refusal reason's form

Body = dict[str, Any]


class NegotiationError(ValueError):
    """A negotiation body that does not follow the schema above."""


class LinkRefusal(enum.Enum):
    """Why an ``overlay.link`` request was refused: the RejectReason vocabulary plus some of the wire's own."""

    TOO_MANY_LONG_DISTANCE = "too_many_long_distance"
    COLLISION = "collision"
    ALREADY_LINKED = "already_linked"
    LINK_CLOSING = "link_closing"
    TOO_MANY_SUCCESSORS = "too_many_successors"
    TOO_MANY_ON_DEMAND = "too_many_on_demand"
    NO_LINK = "no_link"  # asked to hold an existing link, but there is none here (it just went down)
    STOPPING = "stopping"  # the answering controller is shutting down
    TOO_MANY_LINKS = "too_many_links"  # the answerer has its most tunnels (limits.max_tunnels)
    RATE_LIMITED = "rate_limited"  # the requester asked too often (limits.link_requests_per_s)
    OTHER = "other"  # a reason this release does not know (a newer peer's): never sent

    @classmethod
    def of(cls, reason: RejectReason) -> LinkRefusal:
        return cls(reason.value)


@dataclass(frozen=True)
class LinkRequest:
    type: LinkType
    existing: bool = False
    epoch: int = 0  # the requester's controller run


@dataclass(frozen=True)
class LinkAnswer:
    accepted: bool
    held_as: LinkType | None = None  # accepted: the answerer's own hold on the link
    refusal: LinkRefusal | None = None  # refused: why
    epoch: int = 0  # accepted: the answerer's controller run (a refusal does not carry it)

    def __post_init__(self) -> None:
        if self.accepted == (self.refusal is not None):
            raise ValueError("a link answer is either accepted or carries a refusal")


@dataclass(frozen=True)
class ReleaseRequest:
    type: LinkType


@dataclass(frozen=True)
class ReleaseAnswer:
    held_as: LinkType | None  # None: the answerer does not hold the link either


# -- encode ---------------------------------------------------------------------------------


def _type_text(link_type: LinkType | None) -> str | None:
    return None if link_type is None else link_type.value


def encode_link_request(request: LinkRequest) -> Body:
    return {"v": VERSION, "type": request.type.value, "existing": request.existing, "epoch": request.epoch}


def encode_link_answer(answer: LinkAnswer) -> Body:
    if answer.accepted:
        return {"v": VERSION, "accepted": True, "held_as": _type_text(answer.held_as), "epoch": answer.epoch}
    assert answer.refusal is not None
    return {"v": VERSION, "accepted": False, "refusal": answer.refusal.value}


def encode_release_request(request: ReleaseRequest) -> Body:
    return {"v": VERSION, "type": request.type.value}


def encode_release_answer(answer: ReleaseAnswer) -> Body:
    return {"v": VERSION, "held_as": _type_text(answer.held_as)}


# -- decode ---------------------------------------------------------------------------------


def _fields(body: object, required: frozenset[str], what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise NegotiationError(f"{what}: not an object")
    keys = set(body)  # beyond `required`: a newer release's fields, ignored
    if required - keys:
        raise NegotiationError(f"{what}: missing field(s) {sorted(required - keys)}")
    version = body["v"]
    if type(version) is not int or version != VERSION:
        raise NegotiationError(f"{what}: unsupported version {version!r}")
    return body


def _link_type(value: object, what: str, nullable: bool = False) -> LinkType | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise NegotiationError(f"{what}: link type must be a string, got {type(value).__name__}")
    try:
        return LinkType(value)
    except ValueError:
        raise NegotiationError(f"{what}: unknown link type {value[:40]!r}") from None


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise NegotiationError(f"{what}: must be true or false")
    return value


def _epoch(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value < EPOCH_LIMIT:
        raise NegotiationError(f"{what}: must be an integer from 0 to 2**64 - 1")
    return value


def decode_link_request(body: object) -> LinkRequest:
    fields = _fields(body, frozenset({"v", "type", "existing", "epoch"}), "link request")
    link_type = _link_type(fields["type"], "link request type")
    assert link_type is not None
    existing = _bool(fields["existing"], "link request existing")
    return LinkRequest(link_type, existing, _epoch(fields["epoch"], "link request epoch"))


def decode_link_answer(body: object) -> LinkAnswer:
    if isinstance(body, Mapping) and body.get("accepted") is False:
        fields = _fields(body, frozenset({"v", "accepted", "refusal"}), "link answer")
        refusal = fields["refusal"]
        if not isinstance(refusal, str):
            raise NegotiationError("link answer refusal: must be a string")
        try:
            return LinkAnswer(False, refusal=LinkRefusal(refusal))
        except ValueError:
            if not _NAME.fullmatch(refusal):
                raise NegotiationError(f"link answer: refusal {refusal[:40]!r} is not a name") from None
            return LinkAnswer(False, refusal=LinkRefusal.OTHER)  # a newer peer's reason
    fields = _fields(body, frozenset({"v", "accepted", "held_as", "epoch"}), "link answer")
    if fields["accepted"] is not True:
        raise NegotiationError("link answer accepted: must be true or false")
    held_as = _link_type(fields["held_as"], "link answer held_as", nullable=True)
    return LinkAnswer(True, held_as=held_as, epoch=_epoch(fields["epoch"], "link answer epoch"))


def decode_release_request(body: object) -> ReleaseRequest:
    fields = _fields(body, frozenset({"v", "type"}), "release request")
    link_type = _link_type(fields["type"], "release request type")
    assert link_type is not None
    return ReleaseRequest(link_type)


def decode_release_answer(body: object) -> ReleaseAnswer:
    fields = _fields(body, frozenset({"v", "held_as"}), "release answer")
    return ReleaseAnswer(_link_type(fields["held_as"], "release answer held_as", nullable=True))
