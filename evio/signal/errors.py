"""The signaling package's exceptions.

``SignalError`` is the root. ``ProtocolError`` says why a payload from the
network was refused (it never escapes the receive path: the adapter counts and
drops). ``RequestError`` is what ``request()`` raises when no response body
comes back, with a reason the caller can branch on. ``LoginFailure`` is not
raised: it is what the client reports (log, status) when it cannot log in or is
not a member, naming the step that failed (`SignalStep`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class SignalError(Exception):
    """Base of every error raised by evio.signal."""


class Malformed(enum.Enum):
    """Why a payload (message or presence announcement) was refused."""

    TOO_LARGE = "too_large"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    BAD_VERSION = "bad_version"
    UNKNOWN_KIND = "unknown_kind"
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    WRONG_TYPE = "wrong_type"
    BAD_OVERLAY_ID = "bad_overlay_id"
    BAD_NODE_ID = "bad_node_id"
    BAD_TXID = "bad_txid"
    BAD_ACTION = "bad_action"
    BAD_ERROR_REASON = "bad_error_reason"
    BAD_TEXT = "bad_text"
    DUPLICATE_KEY = "duplicate_key"
    DUPLICATE_MEMBERSHIP = "duplicate_membership"
    TOO_MANY_MEMBERSHIPS = "too_many_memberships"


class ProtocolError(SignalError):
    """A payload that does not follow the schema in evio.signal.protocol."""

    def __init__(self, reason: Malformed, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class ErrorReason(enum.Enum):
    """Why a request produced no response body.

    The first group travels on the wire in error envelopes; the second is only
    ever produced locally by the requester.
    """

    # sent by the responder
    UNKNOWN_ACTION = "unknown_action"  # no handler registered for the action
    REJECTED = "rejected"  # the handler refused (HandlerRejected)
    BAD_REQUEST = "bad_request"  # the handler found the body unusable (HandlerBadRequest)
    INTERNAL = "internal"  # the handler failed unexpectedly
    TIMEOUT = "timeout"  # the handler did not finish in time (remote side)
    # local only
    NO_RESPONSE = "no_response"  # our own deadline passed
    UNKNOWN_PEER = "unknown_peer"  # the node id is not a current member of the overlay
    UNREACHABLE = "unreachable"  # the server bounced the message (peer went away)
    NOT_CONNECTED = "not_connected"  # we are not logged in right now
    CLOSED = "closed"  # the client was stopped while the request was outstanding
    OTHER = "other"  # the responder sent a reason this release does not know (a newer peer's); text says which


WIRE_ERROR_REASONS = frozenset(
    {
        ErrorReason.UNKNOWN_ACTION,
        ErrorReason.REJECTED,
        ErrorReason.BAD_REQUEST,
        ErrorReason.INTERNAL,
        ErrorReason.TIMEOUT,
    }
)


class RequestError(SignalError):
    """A request ended without a response body."""

    def __init__(self, reason: ErrorReason, text: str = "") -> None:
        super().__init__(f"{reason.value}: {text}" if text else reason.value)
        self.reason = reason
        self.text = text


class HandlerRejected(SignalError):
    """Raised by a handler to answer with a ``rejected`` error (a policy refusal)."""


class HandlerBadRequest(SignalError):
    """Raised by a handler to answer with a ``bad_request`` error (unusable body)."""


class PasswordChangeError(SignalError):
    """`SignalClient.change_password` did not change the account's password (decision 0083). `refused` when the
    server refused the login itself: the password given no longer logs in (a join token used already)."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class SignalSettingsError(SignalError):
    """Settings that cannot work (e.g. no credential, or a CA file missing)."""


class SignalStep(enum.Enum):
    """The step of getting onto the overlay's signaling that failed (values as in the status document)."""

    TCP = "tcp"  # connecting to the server's address and port
    TLS = "tls"  # STARTTLS or direct TLS: the handshake and the server certificate's verification
    SASL = "sasl"  # logging in: the server refused the credentials, or offers no mechanism we accept
    MEMBERSHIP = "membership"  # logged in, but the account is not in the overlay's roster group
    STREAM = "stream"  # anything else on the XMPP stream: closed early, no session, roster fetch failed


@dataclass(frozen=True)
class LoginFailure:
    """Why the signaling of an overlay is not working, since when (wall-clock time, seconds)."""

    step: SignalStep
    message: str
    since: float

    def same_as(self, other: LoginFailure) -> bool:
        """The same failure, whenever seen."""
        return (other.step, other.message) == (self.step, self.message)

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step.value, "message": self.message, "since": round(self.since, 3)}
