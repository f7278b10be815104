"""The XMPP server's TLS: a private CA of the server host, and the certificate it signs for the XMPP domain.

Members verify the server with this CA only (their join token carries its
certificate), so no public CA is needed and a public one is never trusted.
The certificate names the domain (what a member's JID says, and what
slixmpp checks) and, when members connect to an IP address, that address.
ECDSA P-256: what every TLS stack the servers use (luasec, Erlang ssl) and
the members (OpenSSL) accept in TLS 1.2 and 1.3.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evio.tunnel.path.overlay_ca import certificate_builder

CA_DAYS = 3650
SERVER_DAYS = 3650  # renewal is not automated: long enough to outlive the server host's deployment


def make_ca(domain: str, now: datetime.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"evio XMPP CA for {domain}")])
    cert = (
        certificate_builder(subject, subject, key.public_key(), now, CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_server_certificate(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    domain: str,
    address: str,
    now: datetime.datetime,
    key: ec.EllipticCurvePrivateKey | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for `domain` (and `address`), for `key` (a new one if None)."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    cert = (
        certificate_builder(subject, ca_cert.subject, key.public_key(), now, SERVER_DAYS)
        .add_extension(x509.SubjectAlternativeName(subject_alt_names(domain, address)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def subject_alt_names(domain: str, address: str) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(domain)]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(address)))
    except ValueError:
        if address != domain:
            names.append(x509.DNSName(address))
    return names


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an EC private key")
    return key


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip
