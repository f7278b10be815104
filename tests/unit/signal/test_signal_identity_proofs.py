"""Identity proofs and CA-signed revocation lists (evio.signal.identity): made, verified, refused, bounded."""

from __future__ import annotations

import datetime
import json

import pytest

from evio.signal import identity
from evio.signal.drops import DropReason
from evio.signal.endpoint import OverlayIdentity
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
M_ID, A_ID = 0x1 << 124, 0x2 << 124


@pytest.fixture(scope="module")
def pki() -> dict[str, object]:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    other_key, other_cert = make_overlay_ca("ov1 CA", NOW, 3650)  # same name, another key
    m_key, m_cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], M_ID, NOW, 30)
    a_key, a_cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], A_ID, NOW, 30)
    return {"ca_key": ca_key, "anchor": TrustAnchor("ov1", (ca_cert,)), "other_key": other_key,
            "m": (m_key, m_cert), "a": (a_key, a_cert)}


def test_a_proof_proves_its_own_session_only(pki: dict) -> None:
    anchor = pki["anchor"]
    m_key, m_cert = pki["m"]
    proof = identity.make_proof(m_key, m_cert, "m@x.test/r1", "ov1", M_ID)
    assert identity.proof_refusal(anchor, proof, "m@x.test/r1", NOW) is None
    # replayed by another account's session, or by another session: refused
    assert "signature" in identity.proof_refusal(anchor, proof, "a@x.test/r1", NOW)
    # A's own certificate cannot prove M's id
    a_key, a_cert = pki["a"]
    forged = identity.make_proof(a_key, a_cert, "a@x.test/r1", "ov1", M_ID)
    assert "not the claimed" in identity.proof_refusal(anchor, forged, "a@x.test/r1", NOW)
    # expired certificate
    later = NOW + datetime.timedelta(days=31)
    assert "expired" in identity.proof_refusal(anchor, proof, "m@x.test/r1", later)


def test_a_revocation_list_verifies_only_against_its_ca(pki: dict) -> None:
    until = int(NOW.timestamp()) + 30 * 86400
    rl = identity.sign_list(pki["ca_key"], "ov1", 3, int(NOW.timestamp()), {A_ID: until})
    assert identity.list_refusal(pki["anchor"], rl) is None
    assert identity.load_list(identity.list_to_text(rl)) == rl
    forged = identity.sign_list(pki["other_key"], "ov1", 4, int(NOW.timestamp()), {M_ID: until})
    assert identity.list_refusal(pki["anchor"], forged) == "not signed by the overlay CA"
    tampered = identity.RevocationList("ov1", 3, rl.issued, {}, rl.signature)  # the entry removed
    assert identity.list_refusal(pki["anchor"], tampered) == "not signed by the overlay CA"
    assert rl.node_ids(NOW.timestamp()) == {A_ID} and rl.node_ids(until + 1) == frozenset()


def test_the_document_round_trips_and_its_size(pki: dict) -> None:
    m_key, m_cert = pki["m"]
    proof = identity.make_proof(m_key, m_cert, "m@x.test/r1", "ov1", M_ID)
    rl = identity.sign_list(pki["ca_key"], "ov1", 1, 0, {n: 2**40 for n in range(1, 101)})
    doc = identity.IdentityDocument((proof,), (rl,))
    text = identity.encode(doc)
    assert identity.decode(text) == doc
    only_claim = len(identity.encode(identity.IdentityDocument((proof,))))
    print(f"identity element: one claim {only_claim} bytes; plus a list of 100 revoked ids {len(text)} bytes")
    assert only_claim < 1000 and len(text) < identity.MAX_DOCUMENT_BYTES


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(v=2),
    lambda d: d.update(extra=1),
    lambda d: d.update(claims=[{"overlay": "ov1"}]),
    lambda d: d.update(claims=[{"overlay": "ov1", "node": "x" * 32, "cert": "", "sig": ""}]),
    lambda d: d.update(claims=[{"overlay": "ov1", "node": "0" * 32, "cert": "!!", "sig": ""}]),
    lambda d: d.update(claims=[{"overlay": "ov1", "node": "0" * 32, "cert": "A" * 4000, "sig": ""}]),
    lambda d: d.update(revocations=[{"overlay": "ov1", "serial": -1, "issued": 0, "nodes": [], "sig": ""}]),
    lambda d: d.update(revocations=[{"overlay": "ov1", "serial": True, "issued": 0, "nodes": [], "sig": ""}]),
    lambda d: d.update(revocations=[{"overlay": "ov1", "serial": 1, "issued": 0, "nodes": [["0" * 32, 1]] * 2,
                                     "sig": ""}]),
    lambda d: d.update(revocations=[{"overlay": "ov1", "serial": 1, "issued": 0,
                                     "nodes": [[f"{n:032x}", 1] for n in range(300)], "sig": ""}]),
])  # fmt: skip
def test_malformed_documents_are_refused_whole(mutate: object) -> None:
    doc: dict = {"v": 1, "claims": [], "revocations": []}
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(identity.IdentityError):
        identity.decode(json.dumps(doc))


def test_not_json_and_oversized() -> None:
    for text in ("", "[]", "{" * 100000, '{"v":1,"v":1}', '{"v":NaN}', "x" * (identity.MAX_DOCUMENT_BYTES + 1)):
        with pytest.raises(identity.IdentityError):
            identity.decode(text)


async def test_a_bad_list_repeated_is_verified_once(pki: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = FakeSignalHub(VirtualClock())
    m_key, m_cert = pki["m"]
    c = hub.client("m@x.test", {"ov1": M_ID}, identities={"ov1": OverlayIdentity(pki["anchor"], m_cert, m_key)})
    forged = identity.list_to_text(identity.sign_list(pki["other_key"], "ov1", 5, 0, {A_ID: 2**40}))
    calls = []
    real = identity.list_refusal

    def counting(anchor: identity.TrustAnchor, rl: identity.RevocationList) -> str | None:
        calls.append(rl.serial)
        return real(anchor, rl)

    monkeypatch.setattr(identity, "list_refusal", counting)
    for _ in range(3):
        assert not c.receive_revocation_list(forged, "peer")
    assert calls == [5] and c.drops.count(DropReason.BAD_REVOCATION) == 3


def test_a_proof_whose_certificate_cryptography_cannot_read_is_refused_not_raised(pki: dict) -> None:
    """Found by the `claims` fuzz target: a certificate whose version byte is 0x12 raised InvalidVersion (not a
    ValueError) out of the proof check of any presence (any account of the server may send one)."""
    m_key, m_cert = pki["m"]
    proof = identity.make_proof(m_key, m_cert, "m@x.test/r1", "ov1", M_ID)
    der = bytearray(proof.cert_der)
    at = der.index(b"\xa0\x03\x02\x01\x02")  # [0] EXPLICIT INTEGER 2: version 3
    der[at + 4] = 0x12
    bad = identity.ClaimProof(proof.overlay, proof.node_id, bytes(der), proof.signature)
    refusal = identity.proof_refusal(pki["anchor"], bad, "m@x.test/r1", NOW)
    assert refusal is not None and "unreadable" in refusal
