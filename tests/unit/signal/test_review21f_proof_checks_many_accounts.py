"""Review21f F5 (a variant of review21e E7): the proof checks are bounded per account only, so presences from
many accounts, each in no group of ours, cost a check each (chain and ECDSA signature, about 0.85 ms): an operator
of another overlay on a shared server (who makes accounts at will), or the server itself (which may write any
sender), stalls the node's event loop at about 0.85 s per 1,000 presences, with no bound. Fake server, real
endpoint code. Fixed: accounts in none of our overlays share one budget of proof checks (`STRANGER_PROOF_RATE`);
members keep their own."""

from __future__ import annotations

import os

import pytest

from evio.signal import identity, protocol
from evio.signal.drops import DropReason
from evio.signal.protocol import Announcement, Membership
from evio.testing.virtual_clock import VirtualClock
from tests.unit.signal.test_signal_identity import M_ID, X_ID, A, M, X, _pki, _trust_fleet


async def test_presences_with_bogus_proofs_from_many_accounts_cost_a_bounded_number_of_checks(
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
    for i in range(1000):
        proof = identity.ClaimProof("ov1", M_ID, m_cert_der, os.urandom(71))
        victim._presence_available(f"s{i}@x.test/evio", announcement, identity.encode(identity.IdentityDocument((proof,))))
    print(f"1000 presences with bogus proofs from 1000 accounts: {checks} chain and signature checks")
    assert checks <= 100
    assert victim.drops.count(DropReason.PROOF_RATE) >= 900
    await victim.stop()
