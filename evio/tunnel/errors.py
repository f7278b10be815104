"""Errors raised by the tunnel package.

Bad datagrams from the network are never raised: the data path drops and
counts them (see ``DropReason``). These exceptions report local failures and
failed tunnel setups to the caller that asked for them.
"""

from __future__ import annotations


class TunnelError(Exception):
    """Base of every error raised by evio.tunnel."""


class RecordError(TunnelError):
    """A frame record or control payload that cannot be parsed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownControlError(RecordError):
    """An authentic control record with an opcode this release does not know (a newer peer's)."""


class OfferError(TunnelError):
    """A tunnel offer or answer from signaling that is malformed or unusable."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class SetupError(TunnelError):
    """The tunnel could not be brought up."""


class SignalingFailed(SetupError):
    """The offer/answer exchange through signaling failed."""


class IceFailed(SetupError):
    """No ICE candidate pair could be nominated in time."""


class GatherTimeout(IceFailed):
    """Local candidates were not gathered in time (a STUN or TURN server that does not answer)."""


class DtlsFailed(SetupError):
    """The DTLS handshake failed or timed out."""


class FingerprintMismatch(DtlsFailed):
    """The peer's certificate does not match the fingerprint it signalled."""


class UntrustedCertificate(DtlsFailed):
    """The peer's certificate matches its fingerprint but not the overlay's trust anchor."""


class NotAuthenticated(SetupError):
    """No authenticated record arrived from the peer in time."""


class TapError(TunnelError):
    """The TAP device could not be created or configured."""
