"""Frame keys: exported from DTLS (RFC 5705), one traffic secret per direction, epochs by ratchet.

After the DTLS handshake both ends call the exporter with ``EXPORTER_LABEL``
(RFC 5705 section 4: labels starting with "EXPERIMENTAL" need no
registration) and split the output into the client-to-server and the
server-to-client traffic secret. Each side sends with its own direction's
secret and receives with the other.

Rekeying: instead of a new DTLS handshake, each direction ratchets its secret
forward with HKDF-Expand (``next``), like TLS 1.3 KeyUpdate (RFC 8446 section
7.2). The sender decides alone: it bumps the record's epoch byte and resets its
counter; the receiver derives the next epoch on demand, as often as
``RekeyPolicy.peer_epochs`` lets the peer move on. Old secrets are
discarded, so a later key compromise does not expose earlier epochs. A new
DTLS handshake would add post-compromise security; the tunnel gets that by
being torn down and set up again (for instance after the peer's certificate
rotates).
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from evio.config.model import Cipher
from evio.ratelimit import Rate

EXPORTER_LABEL = b"EXPERIMENTAL evio frame aead v1"
SECRET_LEN = 32
EXPORTER_LEN = 2 * SECRET_LEN
KEY_LEN = 32
IV_LEN = 12


# Records one key may seal before the sender moves to the next epoch: the
# confidentiality limits of RFC 9001 section 6.6 (QUIC), which assume
# full-size packets. ChaCha20-Poly1305's limit exceeds the 64-bit counter.
CONFIDENTIALITY_LIMIT = {
    Cipher.AES_256_GCM: 1 << 23,
    Cipher.CHACHA20_POLY1305: 1 << 62,
}


def _expand(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=b"evio " + label).derive(secret)


@dataclass(frozen=True)
class EpochKeys:
    """Key and IV of one direction for one epoch."""

    epoch: int
    key: bytes
    iv: bytes


@dataclass(frozen=True)
class TrafficSecret:
    """One direction's secret at one epoch."""

    epoch: int
    secret: bytes

    def keys(self) -> EpochKeys:
        return EpochKeys(self.epoch, _expand(self.secret, b"key", KEY_LEN), _expand(self.secret, b"iv", IV_LEN))

    def next(self) -> TrafficSecret:
        return TrafficSecret(self.epoch + 1, _expand(self.secret, b"next", SECRET_LEN))


@dataclass(frozen=True)
class SessionSecrets:
    """What the data path needs to start: both directions' secrets and the cipher."""

    cipher: Cipher
    tx: TrafficSecret
    rx: TrafficSecret


def split_exporter(material: bytes, cipher: Cipher, is_dtls_client: bool) -> SessionSecrets:
    """Split exporter output into (tx, rx) for this side of the DTLS handshake."""
    if len(material) != EXPORTER_LEN:
        raise ValueError(f"exporter output must be {EXPORTER_LEN} bytes")
    client_to_server = TrafficSecret(0, material[:SECRET_LEN])
    server_to_client = TrafficSecret(0, material[SECRET_LEN:])
    if is_dtls_client:
        return SessionSecrets(cipher, tx=client_to_server, rx=server_to_client)
    return SessionSecrets(cipher, tx=server_to_client, rx=client_to_server)


def make_aead(cipher: Cipher, key: bytes) -> AESGCM | ChaCha20Poly1305:
    if cipher is Cipher.AES_256_GCM:
        return AESGCM(key)
    return ChaCha20Poly1305(key)


PEER_EPOCHS = Rate(per_second=1.0, burst=4)
"""How often the peer may move to its next epoch. An honest one moves on after ``max_seconds`` or 2^23 AES-GCM
records, which at a million records a second (more than a tunnel carries) is every 8 s; each move costs the
receiver a derivation, a new AEAD and replay window on the event loop, and a peer holds the keys to move on
with every record it sends (review21v3; decision 0079, amendment 1)."""


@dataclass(frozen=True)
class RekeyPolicy:
    """When the sender moves to the next epoch (whichever comes first), and how often the peer may."""

    max_records: int | None = None
    """None: the cipher's confidentiality limit."""
    max_seconds: float = 3600.0
    peer_epochs: Rate = PEER_EPOCHS
    """The receiving side's bound: records of the peer's next epoch past it are dropped unopened, counted
    ``epoch-rate`` (receive.py). Tests whose senders move on every few records raise it."""

    def record_limit(self, cipher: Cipher) -> int:
        limit = CONFIDENTIALITY_LIMIT[cipher]
        return limit if self.max_records is None else min(limit, self.max_records)
