"""Overlay trust anchors: which certificates may stand for which node, and DTLS refusing the rest."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509

from evio.testing.dtls_handshakes import shuttle
from evio.tunnel.path.dtls import DtlsHandshake, DtlsRole, DtlsState, TunnelCertificate
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor, named_node_ids, node_uri

NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC)
NODE = 0xAA << 120
OTHER = 0xBB << 120


@pytest.fixture(scope="module")
def ca() -> tuple[object, x509.Certificate]:
    return make_overlay_ca("ov1 CA", NOW, days=365)


@pytest.fixture(scope="module")
def anchor(ca: tuple[object, x509.Certificate]) -> TrustAnchor:
    return TrustAnchor("ov1", (ca[1],))


def issue(ca: tuple[object, x509.Certificate], node: int = NODE, overlays: tuple[str, ...] = ("ov1",), days: int = 30) -> x509.Certificate:
    key, cert = ca
    return issue_node_certificate(key, cert, overlays, node, NOW, days)[1]  # type: ignore[arg-type]


def test_node_uri_names_overlay_and_id() -> None:
    assert node_uri("ov1", NODE) == "evio:ov1:aa" + "0" * 30


def test_certificate_from_the_ca_for_the_claimed_node_is_accepted(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    cert = issue(ca, overlays=("ov0", "ov1"))
    assert named_node_ids(cert, "ov1") == [NODE]
    assert anchor.refusal(cert, NODE, NOW + datetime.timedelta(days=1)) is None


def test_certificate_from_another_ca_is_refused(anchor: TrustAnchor) -> None:
    other_ca = make_overlay_ca("ov1 CA", NOW, days=365)  # same name, other key: the signature decides
    assert anchor.refusal(issue(other_ca), NODE, NOW) == "not issued by the overlay CA"


def test_self_signed_certificate_is_refused(anchor: TrustAnchor) -> None:
    forged = TunnelCertificate.generate(f"{NODE:032x}", NOW)
    assert anchor.refusal(forged.cert, NODE, NOW) == "not issued by the overlay CA"


def test_certificate_for_another_node_or_overlay_is_refused(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    reason = anchor.refusal(issue(ca, node=OTHER), NODE, NOW)
    assert reason is not None and f"names {OTHER:032x} for overlay ov1, not the claimed {NODE:032x}" == reason
    reason = anchor.refusal(issue(ca, overlays=("ov2",)), NODE, NOW)
    assert reason is not None and reason.startswith("names no node for overlay ov1")


def test_expired_and_not_yet_valid_certificates_are_refused(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    cert = issue(ca, days=1)
    reason = anchor.refusal(cert, NODE, NOW + datetime.timedelta(days=2))
    assert reason is not None and reason.startswith("certificate expired")
    later = issue_node_certificate(ca[0], ca[1], ("ov1",), NODE, NOW + datetime.timedelta(days=10), 30)[1]  # type: ignore[arg-type]
    reason = anchor.refusal(later, NODE, NOW + datetime.timedelta(days=1))
    assert reason is not None and reason.startswith("certificate not valid before")


def test_expired_ca_is_refused(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    reason = anchor.refusal(issue(ca, days=3650), NODE, NOW + datetime.timedelta(days=400))
    assert reason is not None and reason.startswith("overlay CA expired")


def test_ca_certificate_cannot_stand_for_a_node(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    # Self-issued: it verifies as issued by itself, so only the CA flag keeps it from naming nodes.
    assert anchor.refusal(ca[1], NODE, NOW) == "a CA certificate, not a node certificate"


def test_anchor_needs_a_ca_certificate(ca: tuple[object, x509.Certificate]) -> None:
    with pytest.raises(ValueError, match="not a CA certificate"):
        TrustAnchor("ov1", (issue(ca),))
    with pytest.raises(ValueError, match="at least one"):
        TrustAnchor("ov1", ())


def _node_identity(ca: tuple[object, x509.Certificate], node: int) -> TunnelCertificate:
    key, cert = issue_node_certificate(ca[0], ca[1], ("ov1",), node, NOW, 30)  # type: ignore[arg-type]
    return TunnelCertificate(key, cert)


def checker(anchor: TrustAnchor, peer: int) -> object:
    return lambda cert: anchor.refusal(cert, peer, NOW)


def test_dtls_with_an_anchor_connects_members(ca: tuple[object, x509.Certificate], anchor: TrustAnchor) -> None:
    a, b = _node_identity(ca, NODE), _node_identity(ca, OTHER)
    client = DtlsHandshake(a, DtlsRole.CLIENT, b.fingerprint, checker(anchor, OTHER))  # type: ignore[arg-type]
    server = DtlsHandshake(b, DtlsRole.SERVER, a.fingerprint, checker(anchor, NODE))  # type: ignore[arg-type]
    shuttle(client, server)
    assert client.state is server.state is DtlsState.CONNECTED


@pytest.mark.parametrize("forger_role", [DtlsRole.CLIENT, DtlsRole.SERVER])
def test_dtls_refuses_a_forged_certificate_whose_fingerprint_was_signalled(
    ca: tuple[object, x509.Certificate], anchor: TrustAnchor, forger_role: DtlsRole
) -> None:
    # The server operator answers for OTHER with a certificate of its own and signals its
    # (matching) fingerprint: the pin passes, the anchor does not.
    member = _node_identity(ca, NODE)
    forged = TunnelCertificate.generate(f"{OTHER:032x}", NOW)
    honest_role = DtlsRole.SERVER if forger_role is DtlsRole.CLIENT else DtlsRole.CLIENT
    honest = DtlsHandshake(member, honest_role, forged.fingerprint, checker(anchor, OTHER))  # type: ignore[arg-type]
    forger = DtlsHandshake(forged, forger_role, member.fingerprint)
    client, server = (forger, honest) if forger_role is DtlsRole.CLIENT else (honest, forger)
    shuttle(client, server)
    assert honest.state is DtlsState.FAILED
    assert honest.failure == "untrusted certificate: not issued by the overlay CA"
    # The refusal travels as an alert, so the forger learns at once too (no key is ever exported).
    assert forger.state is DtlsState.FAILED
