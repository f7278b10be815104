"""Issuing an overlay's CA and its node certificates, offline (``evio pki``, the lab).

The CA signs with Ed25519: small, and its key never touches a tunnel. Node
certificates carry an ECDSA P-256 key, because the DTLS cipher suites the
tunnels accept are ECDHE-ECDSA ones, and name their node as the SAN URI of
``evio.tunnel.path.trust.node_uri``, once per overlay they may join, and the
node's own overlay address in each, where given (``overlay_addresses.address_uri``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from evio.signal.overlay_addresses import address_uri
from evio.tunnel.path.trust import node_uri

CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates start this long before `now`, so a peer whose clock is a little behind accepts them."""

CaKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def make_overlay_ca(name: str, now: datetime.datetime, days: int) -> tuple[ed25519.Ed25519PrivateKey, x509.Certificate]:
    key = ed25519.Ed25519PrivateKey.generate()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        certificate_builder(subject, subject, key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, None)
    )
    return key, cert


def issue_node_certificate(
    ca_key: CaKey,
    ca_cert: x509.Certificate,
    overlays: Sequence[str],
    node_id: int,
    now: datetime.datetime,
    days: int,
    key: ec.EllipticCurvePrivateKey | None = None,
    addresses: Mapping[str, Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address]] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate naming `node_id` in each of `overlays`, and its own overlay addresses (`addresses`, by
    overlay: decision 0062, local ARP and ND answers for them), signed by the CA."""
    if not overlays:
        raise ValueError("a node certificate names at least one overlay")
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{node_id:032x}")])
    names = [x509.UniformResourceIdentifier(node_uri(o, node_id)) for o in overlays]
    names += [x509.UniformResourceIdentifier(address_uri(o, a)) for o, found in (addresses or {}).items() for a in found]
    cert = (
        certificate_builder(subject, ca_cert.subject, key.public_key(), now, days)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, None if isinstance(ca_key, ed25519.Ed25519PrivateKey) else hashes.SHA256())
    )
    return key, cert


def certificate_builder(
    subject: x509.Name, issuer: x509.Name, public_key: ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey,
    now: datetime.datetime, days: int,
) -> x509.CertificateBuilder:  # fmt: skip
    """A certificate's common part: names, key, a random serial, valid from ``CLOCK_SKEW`` before ``now``."""
    if days <= 0:
        raise ValueError("validity must be at least one day")
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def write_certificate(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_private_key(path: Path, key: CaKey) -> None:
    """PKCS#8 PEM, created 0600 so the key is never readable by others, not even briefly.

    An existing file (`evio pki --force`) keeps its mode through O_CREAT, so it is made 0600
    before the new key is written into it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, 0o600)
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def load_ca_key(path: Path) -> CaKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path}: not an Ed25519 or EC private key")
    return key
