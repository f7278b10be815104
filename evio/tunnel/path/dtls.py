"""DTLS handshake as a sans-I/O machine: datagrams in, datagrams out, a timer to honour.

The tunnel uses DTLS only to authenticate the peer and agree on keys: each side
has a self-signed certificate whose fingerprint the peer learnt through the
authenticated signaling, and pins. After the handshake both sides call the
RFC 5705 exporter (``export``) for the frame keys; frames never travel as DTLS
records.

This replaces aiortc's ``RTCDtlsTransport``, which owns a receive task on the
ICE connection and needs private attributes (``_ssl``, ``_role``) for the
exporter. pyOpenSSL is the same library underneath.

The fingerprint is checked inside OpenSSL's verify callback, so a mismatch
aborts the handshake with a ``bad_certificate`` alert and both sides fail at
once (with aiortc only the verifying side fails).
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from OpenSSL import SSL, crypto

from evio.ratelimit import Rate
from evio.tunnel.errors import OfferError

logger = logging.getLogger(__name__)

FINGERPRINT_ALGORITHM = "sha-256"
_FINGERPRINT_VALUE = re.compile(r"(?:[0-9A-F]{2}:){31}[0-9A-F]{2}")
_CIPHERS = b"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305"
_DTLS_MTU = 1200
_READ_LEN = 65536

AFTER_HANDSHAKE = Rate(per_second=1.0, burst=10)
"""DTLS datagrams a tunnel feeds to OpenSSL after its handshake; the rest are dropped unread, counted ``dtls-rate``
(session.py). An honest peer sends its final flight again (one datagram) each time its timer runs out, 1, 2, 4 s
and on, while ours is lost, then a close_notify; OpenSSL reads any datagram whose first byte is 20-63 from the
peer's address, some 46 us each (review21v3; decision 0008, amendment 1)."""

PeerCheck = Callable[[x509.Certificate], "str | None"]
"""Why the peer's certificate is refused beyond its fingerprint (an overlay trust anchor), None when it is not."""
FINGERPRINT_MISMATCH = "fingerprint mismatch"
UNTRUSTED = "untrusted certificate"


@dataclass(frozen=True)
class Fingerprint:
    """A certificate fingerprint as in SDP (RFC 8122): ``sha-256 AB:CD:...``."""

    algorithm: str
    value: str

    def __str__(self) -> str:
        return f"{self.algorithm} {self.value}"

    @classmethod
    def parse(cls, text: str) -> Fingerprint:
        algorithm, _, value = text.partition(" ")
        if algorithm.lower() != FINGERPRINT_ALGORITHM or not _FINGERPRINT_VALUE.fullmatch(value.upper()):
            raise OfferError("dtls.fingerprint", "expected 'sha-256' and 32 colon-separated hex bytes")
        return cls(FINGERPRINT_ALGORITHM, value.upper())

    @classmethod
    def of_der(cls, der: bytes) -> Fingerprint:
        digest = hashlib.sha256(der).hexdigest().upper()
        return cls(FINGERPRINT_ALGORITHM, ":".join(digest[i : i + 2] for i in range(0, 64, 2)))


class TunnelCertificate:
    """This node's DTLS identity: an ECDSA key and its certificate (self-signed, or issued by an overlay CA)."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert
        self.fingerprint = Fingerprint.of_der(cert.public_bytes(serialization.Encoding.DER))

    @classmethod
    def generate(cls, common_name: str, now: datetime.datetime, days: int = 365) -> TunnelCertificate:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def from_files(cls, cert_file: Path, key_file: Path) -> TunnelCertificate:
        """A certificate and key given in the config; the key must be ECDSA (the accepted cipher suites)."""
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_file}: not an EC private key (DTLS here uses ECDSA cipher suites)")
        if key.public_key() != cert.public_key():
            raise ValueError(f"{key_file} is not the key of {cert_file}")
        return cls(key, cert)


class DtlsRole(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


class DtlsState(enum.Enum):
    HANDSHAKING = "handshaking"
    CONNECTED = "connected"
    FAILED = "failed"
    CLOSED = "closed"


def _describe(exc: SSL.Error) -> str:
    """pyOpenSSL's error list, as the reasons alone: ``sslv3 alert handshake failure``."""
    reasons = [str(item[2]) for item in exc.args[0] if isinstance(item, tuple) and len(item) == 3] if exc.args and isinstance(exc.args[0], list) else []
    return "; ".join(r for r in reasons if r) or str(exc) or type(exc).__name__


class DtlsHandshake:
    """One DTLS association, fed and drained by its owner."""

    def __init__(
        self, certificate: TunnelCertificate, role: DtlsRole, peer_fingerprint: Fingerprint, peer_check: PeerCheck | None = None
    ) -> None:
        self.role = role
        self.state = DtlsState.HANDSHAKING
        self.failure: str | None = None
        self._peer_fingerprint = peer_fingerprint
        self._peer_check = peer_check
        self._fingerprint_ok = False
        self._verified = False
        self._refusal: str | None = None
        ctx = SSL.Context(SSL.DTLS_METHOD)
        # No renegotiation: the frame keys were exported once, so a new handshake would buy a peer nothing but
        # ours to run (a HelloRequest makes a client start one, certificate checks and signatures on the event
        # loop, review21v3); it is answered with a no_renegotiation warning instead.
        ctx.set_options(SSL.OP_NO_TICKET | SSL.OP_NO_QUERY_MTU | SSL.OP_NO_RENEGOTIATION)
        ctx.set_mode(SSL.MODE_RELEASE_BUFFERS)
        ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, self._verify)
        ctx.use_certificate(certificate.cert)
        ctx.use_privatekey(certificate.key)
        ctx.set_cipher_list(_CIPHERS)
        self._ssl = SSL.Connection(ctx, None)
        self._ssl.set_ciphertext_mtu(_DTLS_MTU)
        if role is DtlsRole.SERVER:
            self._ssl.set_accept_state()
        else:
            self._ssl.set_connect_state()

    def start(self) -> list[bytes]:
        """The first flight (the client's ClientHello; nothing for a server)."""
        if self.role is DtlsRole.CLIENT:
            self._advance()
        return self._drain()

    def receive(self, datagram: bytes) -> list[bytes]:
        """Feed one DTLS datagram; returns the datagrams to send."""
        if self.state in (DtlsState.FAILED, DtlsState.CLOSED) or not datagram:
            return []  # OpenSSL's memory BIO raises on a zero-length write (found by benchmarks/fuzz.py)
        self._ssl.bio_write(datagram)
        if self.state is DtlsState.HANDSHAKING:
            self._advance()
        else:
            # Post-handshake: retransmitted final flights and alerts (close_notify).
            try:
                self._ssl.recv(_READ_LEN)
            except SSL.WantReadError:
                pass
            except SSL.ZeroReturnError:
                self._set_state(DtlsState.CLOSED, "closed by peer")
            except SSL.Error as exc:
                logger.debug("dtls record ignored: %s", exc)
        return self._drain()

    def timeout(self) -> float | None:
        """Seconds until ``handle_timeout`` is due, or None when no timer runs."""
        if self.state is not DtlsState.HANDSHAKING:
            return None
        return self._ssl.DTLSv1_get_timeout()

    def handle_timeout(self) -> list[bytes]:
        """Retransmit the last flight when its timer expired."""
        if self.state is DtlsState.HANDSHAKING:
            try:
                self._ssl.DTLSv1_handle_timeout()
            except SSL.Error as exc:
                self._set_state(DtlsState.FAILED, f"timeout handling: {exc}")
        return self._drain()

    def export(self, label: bytes, length: int) -> bytes:
        if self.state is not DtlsState.CONNECTED:
            raise RuntimeError("exporter used before the handshake completed")
        return bytes(self._ssl.export_keying_material(label, length))

    def close(self) -> list[bytes]:
        """Send close_notify (best effort) and stop."""
        if self.state is DtlsState.CONNECTED:
            try:
                self._ssl.shutdown()
            except SSL.Error:
                pass
        self._set_state(DtlsState.CLOSED, "closed locally")
        return self._drain()

    def cipher_name(self) -> str | None:
        name = self._ssl.get_cipher_name()
        return str(name) if name else None

    # -- internals -------------------------------------------------------------

    def _advance(self) -> None:
        try:
            self._ssl.do_handshake()
        except SSL.WantReadError:
            return
        except SSL.Error as exc:
            # Only a certificate that was checked can explain the failure (a mismatch or an untrusted
            # certificate); anything else (an alert, a malformed flight) fails before or apart from the check.
            explained = self._verify_failure() if self._verified else None
            self._set_state(DtlsState.FAILED, explained or _describe(exc))
            return
        failure = self._verify_failure()
        if failure is not None:
            self._set_state(DtlsState.FAILED, failure)
            return
        self._set_state(DtlsState.CONNECTED, None)

    def _verify_failure(self) -> str | None:
        if not self._fingerprint_ok:
            return FINGERPRINT_MISMATCH
        if self._refusal is not None:
            return f"{UNTRUSTED}: {self._refusal}"
        return None

    def _verify(self, conn: SSL.Connection, cert: crypto.X509, errnum: int, depth: int, ok: int) -> bool:
        # OpenSSL's own chain verdict (errnum) is ignored: peers present one certificate,
        # pinned by the fingerprint the peer signalled and, with an overlay trust anchor,
        # checked against that anchor by `peer_check` (evio.tunnel.path.trust).
        if depth != 0:
            return False
        self._verified = True
        actual = Fingerprint.of_der(crypto.dump_certificate(crypto.FILETYPE_ASN1, cert))
        self._fingerprint_ok = actual == self._peer_fingerprint
        if not self._fingerprint_ok:
            logger.debug("dtls peer fingerprint %s, expected %s", actual, self._peer_fingerprint)
            return False
        if self._peer_check is not None:
            self._refusal = self._peer_check(cert.to_cryptography())
            if self._refusal is not None:
                logger.debug("dtls peer certificate refused: %s", self._refusal)
                return False
        return True

    def _drain(self) -> list[bytes]:
        out = []
        while True:
            try:
                data = self._ssl.bio_read(_READ_LEN)
            except SSL.WantReadError:
                break
            if not data:
                break
            out.append(bytes(data))
        return out

    def _set_state(self, state: DtlsState, failure: str | None) -> None:
        if state is not self.state:
            logger.debug("dtls %s: %s -> %s%s", self.role.value, self.state.value, state.value, f" ({failure})" if failure else "")
            self.state = state
            self.failure = failure
