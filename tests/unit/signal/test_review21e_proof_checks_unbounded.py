"""review21e E7: a presence's identity element is checked (certificate chain and ECDSA signature, about 0.85 ms) for
whoever sent it, before anything asks whether the sender may claim anything here, and the only saving is a cache of
the exact (sender, overlay, certificate, signature): a new signature each time is a new check. Any account on the
server (a member of another overlay too) may send a member presence, and a c2s stream may carry 256 kB/s (prosody's
limit as `evio server init` writes it): some 230 presences a second of 1.1 kB, each a member's public certificate
with random signature bytes, cost about 0.2 s of the victim's event loop a second per stream, and an account may
open several. Nothing is bounded per sender, nothing counted but the refusals. Fake server, real endpoint code.
Fixed: an account's proofs not in the cache are checked at `PROOF_CHECK_RATE` (2/s, burst 20), the rest counted."""

from __future__ import annotations

import os

import pytest

from evio.signal import identity, protocol
from evio.signal.drops import DropReason
from evio.signal.protocol import Announcement, Membership
from evio.testing.virtual_clock import VirtualClock
from tests.unit.signal.test_signal_identity import M_ID, X_ID, A, M, X, _pki, _trust_fleet


async def test_presences_with_fresh_bogus_proofs_cost_a_bounded_number_of_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualClock()
    _, ids = _pki({M: M_ID, A: 0x2 << 124, X: X_ID})
    _, c = await _trust_fleet(clock, ids)
    victim = c[X]
    await victim.start()
    await clock.advance(1.0)
    checks = 0
    real = identity.proof_refusal

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal checks
        checks += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(identity, "proof_refusal", counted)
    m_cert_der = identity.make_proof(ids[M].key, ids[M].cert, "m@x.test/r", "ov1", M_ID).cert_der
    announcement = protocol.encode_announcement(Announcement((Membership("ov1", M_ID),)))
    stranger = "s@x.test/evio"  # any account of the server: in no overlay's group here
    for _ in range(1000):  # about 4 s of one c2s stream at prosody's 256 kB/s
        proof = identity.ClaimProof("ov1", M_ID, m_cert_der, os.urandom(71))
        victim._presence_available(stranger, announcement, identity.encode(identity.IdentityDocument((proof,))))
    print(f"1000 presences with fresh bogus proofs from one stranger: {checks} chain and signature checks")
    assert checks <= 100
    assert victim.drops.count(DropReason.PROOF_RATE) >= 900
