"""An overlay's trust anchor: peer certificates must be issued by the overlay CA and name the peer.

Without an anchor a tunnel trusts the fingerprint the peer signalled, so the
operator of the XMPP server, which carries that fingerprint, could answer in
a member's place with a certificate of its own. With an anchor the peer's DTLS
certificate must also

- be issued directly by one of the overlay's CA certificates (signature checked,
  the CA marked as a CA), both within their validity at the time of the check;
- name the node id the peer claims for this overlay, as the SAN URI
  ``evio:<overlay>:<32 hex digits>`` (``node_uri``).

Only a holder of the CA key can then make a member; the server is reduced to a
messenger. One level only: intermediates are not looked for, which keeps the
check small enough to read (an overlay's admin issues node certificates with
``evio pki``).

Pure: the certificates and ``now`` come in, a refusal reason (or None) goes out.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from evio.signal.identity import UNREADABLE, san_names

URI_SCHEME = "evio"


def node_uri(overlay: str, node_id: int) -> str:
    """The SAN URI that binds a certificate to `node_id` in `overlay`."""
    return f"{URI_SCHEME}:{overlay}:{node_id:032x}"


def named_node_ids(cert: x509.Certificate, overlay: str) -> list[int]:
    """The node ids `cert` names for `overlay` (SAN URIs ``evio:<overlay>:<id>``)."""
    ids = []
    for text in san_names(cert, URI_SCHEME, overlay):
        if len(text) == 32:
            try:
                ids.append(int(text, 16))
            except ValueError:
                continue
    return ids


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _validity_problem(cert: x509.Certificate, what: str, now: datetime.datetime) -> str | None:
    if now < cert.not_valid_before_utc:
        return f"{what} not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S}Z"
    if now > cert.not_valid_after_utc:
        return f"{what} expired {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S}Z"
    return None


@dataclass(frozen=True)
class TrustAnchor:
    """The CA certificates one overlay's members must be issued by."""

    overlay: str
    authorities: tuple[x509.Certificate, ...]

    def __post_init__(self) -> None:
        if not self.authorities:
            raise ValueError("a trust anchor needs at least one CA certificate")
        for ca in self.authorities:
            if not _is_ca(ca):
                raise ValueError(f"{ca.subject.rfc4514_string()} is not a CA certificate (basicConstraints ca=true)")

    @classmethod
    def from_pem(cls, overlay: str, pem: bytes) -> TrustAnchor:
        return cls(overlay, tuple(x509.load_pem_x509_certificates(pem)))

    @classmethod
    def from_file(cls, overlay: str, path: Path) -> TrustAnchor:
        return cls.from_pem(overlay, path.read_bytes())

    def refusal(self, cert: x509.Certificate, node_id: int, now: datetime.datetime) -> str | None:
        """Why `cert` may not stand for `node_id` in this overlay at `now`; None when it may."""
        try:
            return self._refusal(cert, node_id, now)
        except UNREADABLE as exc:  # a field parsed only now (a peer's issuer name that is not DER)
            return f"certificate unreadable: {exc or type(exc).__name__}"

    def _refusal(self, cert: x509.Certificate, node_id: int, now: datetime.datetime) -> str | None:
        issuer = self._issuer_of(cert)
        if issuer is None:
            return "not issued by the overlay CA"
        problem = _validity_problem(issuer, "overlay CA", now) or _validity_problem(cert, "certificate", now)
        if problem is not None:
            return problem
        if _is_ca(cert):
            return "a CA certificate, not a node certificate"
        named = named_node_ids(cert, self.overlay)
        if node_id not in named:
            shown = ", ".join(f"{n:032x}" for n in named) or "no node"
            return f"names {shown} for overlay {self.overlay}, not the claimed {node_id:032x}"
        return None

    def _issuer_of(self, cert: x509.Certificate) -> x509.Certificate | None:
        for ca in self.authorities:
            if cert.issuer != ca.subject:
                continue
            try:
                cert.verify_directly_issued_by(ca)
            except (InvalidSignature, ValueError, TypeError):
                continue
            return ca
        return None

