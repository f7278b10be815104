"""The lab's certificate authority and the XMPP server certificate it signs.

Each lab makes a fresh CA, so nodes verify the server the way a real
deployment would (ca_file in their config) and nothing outside trusts it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from evio.tunnel.path.overlay_ca import (
    certificate_builder,
    issue_node_certificate,
    load_ca_key,
    write_certificate,
    write_private_key,
)
from evio.tunnel.path.overlay_ca import make_overlay_ca as _make_overlay_ca

_VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Certificate:
    cert_path: Path
    key_path: Path


def make_ca(directory: Path, common_name: str, now: datetime.datetime) -> Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        certificate_builder(name, name, key.public_key(), now, _VALIDITY.days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, "ca", cert, key)


def make_server_cert(
    directory: Path, ca: Certificate, hostnames: list[str], now: datetime.datetime, file_stem: str
) -> Certificate:
    """A certificate for `hostnames` (the first is the CN), signed by `ca`."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key_path.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the lab CA key is not an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    cert = (
        certificate_builder(subject, ca_cert.subject, key.public_key(), now, _VALIDITY.days)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hostnames]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _write(directory, file_stem, cert, key)


def make_overlay_ca(directory: Path, common_name: str, now: datetime.datetime) -> Certificate:
    """The overlay trust anchor of `evio lab up --trust` (the same as `evio pki ca` makes)."""
    key, cert = _make_overlay_ca(common_name, now, _VALIDITY.days)
    directory.mkdir(parents=True, exist_ok=True)
    paths = Certificate(cert_path=directory / "ca.crt", key_path=directory / "ca.key")
    write_private_key(paths.key_path, key)
    write_certificate(paths.cert_path, cert)
    return paths


def issue_overlay_member(ca: Certificate, overlay: str, node_id: int, directory: Path, now: datetime.datetime,
                         address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None) -> dict[str, str]:  # fmt: skip
    """A node certificate for `node_id` (and its overlay `address`: decision 0062) under the overlay CA; returns
    the node config's `trust` section."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
    key, cert = issue_node_certificate(load_ca_key(ca.key_path), ca_cert, [overlay], node_id, now, _VALIDITY.days,
                                       addresses={overlay: [address]} if address is not None else None)  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    write_private_key(directory / "node.key", key)
    write_certificate(directory / "node.crt", cert)
    # Each node its own copy of the CA, as on real hosts: a revocation file dropped beside it is this node's alone.
    write_certificate(directory / "ca.crt", ca_cert)
    return {"ca_file": str(directory / "ca.crt"), "cert_file": str(directory / "node.crt"), "key_file": str(directory / "node.key")}


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Certificate:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / f"{stem}.crt"
    key_path = directory / f"{stem}.key"
    write_certificate(cert_path, cert)
    write_private_key(key_path, key)
    return Certificate(cert_path=cert_path, key_path=key_path)
