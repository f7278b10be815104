"""Signed host announcements (evio/signal/host_claims.py): what verifies, what is refused, who owns a MAC."""

from __future__ import annotations

import dataclasses
import datetime
import time

import pytest

from evio.signal import host_claims as hc
from evio.signal import revocation_manifest as rm
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 30)
ANCHOR = TrustAnchor(OV, (CA,))
A, M = 0xA << 120, 0xB << 120
KEY_A, CERT_A = issue_node_certificate(CA_KEY, CA, [OV], A, NOW, 30)
KEY_M, CERT_M = issue_node_certificate(CA_KEY, CA, [OV], M, NOW, 30)
MACS = ("02:00:00:00:00:01", "52:54:00:12:34:56")


def signed(key=KEY_M, cert=CERT_M, node=M, macs=MACS, at: float | None = None) -> bytes:  # type: ignore[no-untyped-def]
    return hc.pack(key, cert, OV, node, int((at or time.time()) * 1000), macs)


def test_an_announcement_verifies_and_fits_one_frame_with_the_cap() -> None:
    ann = hc.verify(ANCHOR, signed(), time.time())
    assert (ann.node_id, ann.macs) == (M, MACS)
    full = signed(macs=tuple(f"02:00:00:00:01:{i:02x}" for i in range(hc.MAX_MACS)))
    print(f"announcement of {hc.MAX_MACS} MACs: {len(full)} bytes (bound {hc.MAX_FRAME_BYTES})")
    assert len(full) <= hc.MAX_FRAME_BYTES
    with pytest.raises(ValueError):
        signed(macs=tuple(f"02:00:00:00:02:{i:02x}" for i in range(hc.MAX_MACS + 1)))


@pytest.mark.parametrize("case", ["other node's id", "byte flipped", "other CA", "stale", "truncated", "group MAC",
                                  "other overlay"])
def test_refused(case: str) -> None:
    if case == "other node's id":  # A's certificate and key, M's id: A cannot speak for M
        data = signed(key=KEY_A, cert=CERT_A, node=M)
    elif case == "byte flipped":
        raw = bytearray(signed())
        raw[-80] ^= 1  # inside the MACs
        data = bytes(raw)
    elif case == "other CA":
        key2, ca2 = make_overlay_ca("other", NOW, 30)
        k, c = issue_node_certificate(key2, ca2, [OV], M, NOW, 30)
        data = signed(key=k, cert=c)
    elif case == "stale":
        data = signed(at=time.time() - hc.LIFETIME - 1)
    elif case == "truncated":
        data = signed()[:60]
    elif case == "group MAC":
        data = signed(macs=("01:00:5e:00:00:01",))
    else:
        data = hc.pack(KEY_M, CERT_M, "ov2", M, int(time.time() * 1000), MACS)
    with pytest.raises(hc.ClaimError):
        hc.verify(ANCHOR, data, time.time())


def test_a_mac_two_members_announce_is_disputed_and_stays_with_its_first_claimant() -> None:
    clock = [0.0]
    claims = hc.HostClaims(clock=lambda: clock[0])
    now = int(time.time() * 1000)
    assert claims.take(hc.Announcement(OV, M, now, MACS))
    assert claims.owners() == {mac: M for mac in MACS}
    assert claims.take(hc.Announcement(OV, A, now, (MACS[1],)))  # A claims M's host: M keeps it (review21c)
    assert claims.owners() == {mac: M for mac in MACS} and claims.disputed == {MACS[1]}
    assert claims.claimants(MACS[1]) == [M, A]
    assert not claims.take(hc.Announcement(OV, A, now + 1, (MACS[1],)))  # a refresh: nothing changes
    assert claims.owners() == {mac: M for mac in MACS}
    old = hc.Announcement(OV, M, now - 1, ())
    assert not claims.take(old)  # an older announcement replayed changes nothing
    assert claims.take(dataclasses.replace(old, issued_ms=now + 1))  # M's newer list, without them: nobody's ...
    assert claims.owners() == {} and claims.unheld == {MACS[1]} and claims.next_change() == hc.ALONE_HOLD
    assert claims.take(hc.Announcement(OV, M, now + 2, MACS))  # M, its first claimant, names it again: M's at once
    assert claims.owners() == {mac: M for mac in MACS} and claims.disputed == {MACS[1]}
    assert claims.take(hc.Announcement(OV, M, now + 3, ())) and claims.owners() == {}
    clock[0] = hc.ALONE_HOLD - 1
    assert claims.owners() == {}
    clock[0] = hc.ALONE_HOLD  # A alone naming it for ALONE_HOLD: A holds it (review21e E4)
    assert claims.owners() == {MACS[1]: A} and claims.disputed == frozenset() and claims.next_change() is None
    assert claims.take(hc.Announcement(OV, M, now + 4, MACS))  # M and A both held it: nobody's
    assert claims.owners() == {MACS[0]: M} and claims.disputed == {MACS[1]} and claims.unheld == {MACS[1]}
    assert claims.forget([A]) and claims.owners() == {mac: M for mac in MACS}  # M alone of its holders
    assert claims.expire(time.time() + hc.LIFETIME + 1) and len(claims) == 0


def test_a_claimant_cannot_found_a_mac_anew_by_leaving_it_off_its_list_and_naming_it_again() -> None:
    """review21e E4: a MAC's first claimant is remembered while nobody names the MAC, so a member that named a host
    in advance gains nothing by dropping it and naming it again in the host's gap; a second member naming it
    keeps it nobody's however long; a member churning MACs of its own through its list forgets only its own."""
    clock, b = [0.0], 0xC << 120
    claims = hc.HostClaims(clock=lambda: clock[0])
    now = int(time.time() * 1000)
    claims.take(hc.Announcement(OV, M, now, MACS[:1]))
    claims.take(hc.Announcement(OV, A, now, MACS[:1]))
    assert claims.owners() == {MACS[0]: M}
    claims.take(hc.Announcement(OV, M, now + 1, ()))  # the host's port goes
    claims.take(hc.Announcement(OV, A, now + 1, ()))
    for i in range(hc.RECORDS_PER_FOUNDER + 10):  # A founds MACs of its own and lets them go
        claims.take(hc.Announcement(OV, A, now + 2 + i, (f"02:00:00:00:{i >> 8:02x}:{i & 255:02x}",)))
        claims.owners()
    claims.take(hc.Announcement(OV, A, now + 10_000, MACS[:1]))  # A names the host again, alone
    assert claims.owners() == {} and claims.unheld == {MACS[0]}
    clock[0] = hc.ALONE_HOLD - 1
    claims.take(hc.Announcement(OV, b, now, MACS[:1]))  # a second member: nobody's while both name it
    clock[0] = 10 * hc.ALONE_HOLD
    assert claims.owners() == {} and claims.next_change() is None
    claims.take(hc.Announcement(OV, M, now + 2, MACS[:1]))  # the host is back at M
    assert claims.owners() == {MACS[0]: M}


def test_this_nodes_own_list_is_a_claim_but_its_macs_are_not_told() -> None:
    claims = hc.HostClaims(self_id=M)
    now = int(time.time() * 1000)
    claims.take(hc.Announcement(OV, M, now, MACS))
    claims.take(hc.Announcement(OV, A, now, MACS[:1]))  # A claims this node's host after it: ours still
    assert claims.owners() == {} and claims.disputed == {MACS[0]}


def test_a_verified_certificate_is_remembered_so_a_refresh_costs_one_signature_check() -> None:
    certificates = hc.Certificates()
    wall = time.time()
    first = hc.check(ANCHOR, hc.parse(OV, signed(), wall), wall, certificates)
    assert first.node_id == M and len(certificates) == 1 and certificates.knows(M) and not certificates.knows(A)
    parsed = hc.parse(OV, signed(), wall)
    assert certificates.key_for(parsed.der, M, wall) is not None and certificates.key_for(parsed.der, A, wall) is None
    forged = dataclasses.replace(parsed, signature=parsed.signature[:-1] + bytes([parsed.signature[-1] ^ 1]))
    with pytest.raises(hc.ClaimError, match="bad signature"):
        hc.check(ANCHOR, forged, wall, certificates)  # the cached key still checks the signature
    assert certificates.key_for(parsed.der, M, wall + hc.Certificates.HOLD + 1) is None  # its chain again then


def test_a_members_checked_certificate_key_is_found_by_its_node_id_while_it_holds() -> None:
    """What a message along the ring to the member is sealed to (decision 0064, review21f F8)."""
    certificates = hc.Certificates()
    wall = time.time()
    assert certificates.key_of(M, wall) is None
    hc.check(ANCHOR, hc.parse(OV, signed(), wall), wall, certificates)
    found = certificates.key_of(M, wall)
    assert found is not None and certificates.key_of(A, wall) is None
    assert found.public_numbers() == KEY_M.public_key().public_numbers()
    assert certificates.key_of(M, wall + hc.Certificates.HOLD + 1) is None  # not taken on trust past its hold


def test_a_certificate_found_for_a_node_id_stays_found_past_its_hold_for_that_id_only() -> None:
    """What budget a check spends (review21f F9): a certificate found the CA's for its id keeps the signature checks'
    share after its hold ran out (its chain is checked again, once), never under another id."""
    certificates = hc.Certificates()
    wall = time.time()
    parsed = hc.parse(OV, signed(), wall)
    assert not certificates.found(parsed.der, M)
    hc.check(ANCHOR, parsed, wall, certificates)
    assert certificates.found(parsed.der, M) and not certificates.found(parsed.der, A)
    later = wall + hc.Certificates.HOLD + 1
    assert certificates.key_for(parsed.der, M, later) is None and certificates.found(parsed.der, M)
    hc.check(ANCHOR, parsed, later, certificates)  # its chain again: holds anew
    assert certificates.key_for(parsed.der, M, later) is not None


def test_a_certificate_refused_for_a_node_id_is_refused_again_without_a_chain_check() -> None:
    certificates = hc.Certificates()
    wall = time.time()
    under_m = hc.parse(OV, signed(key=KEY_A, cert=CERT_A, node=M), wall)  # A's genuine certificate, M's id
    with pytest.raises(hc.ClaimError, match="certificate refused"):
        hc.check(ANCHOR, under_m, wall, certificates)
    with pytest.raises(hc.ClaimError, match="certificate refused"):
        certificates.key_for(under_m.der, M, wall)  # remembered: the next such forgery costs no chain
    assert hc.check(ANCHOR, hc.parse(OV, signed(key=KEY_A, cert=CERT_A, node=A), wall), wall, certificates).node_id == A


@pytest.mark.parametrize("case", ["unreadable", "other node's id", "refused lately"])
def test_host_claims_and_manifests_refuse_a_certificate_in_the_same_words(case: str) -> None:
    """Both check a certificate with `Certificates.checked_key`: a refusal counts the same under either."""
    wall = time.time()
    parsed = hc.parse(OV, signed(), wall)  # M's, under M's id
    claims_certificates, manifest_certificates = hc.Certificates(), hc.Certificates()
    if case == "unreadable":
        der = b"not a certificate"
    elif case == "other node's id":
        der = hc.parse(OV, signed(key=KEY_A, cert=CERT_A, node=A), wall).der
    else:  # M's own certificate, remembered as refused for M: refused from memory, though its chain holds
        der = parsed.der
        claims_certificates.refuse(der, M, wall)
        manifest_certificates.refuse(der, M, wall)
    parsed = dataclasses.replace(parsed, der=der)
    with pytest.raises(hc.ClaimError) as claim_refusal:
        hc.check(ANCHOR, parsed, wall, claims_certificates)
    manifest = rm.Manifest(M, der, (), b"\x00", b"")
    with pytest.raises(rm.ManifestError) as manifest_refusal:
        rm.check(ANCHOR, OV, manifest, wall, manifest_certificates)
    expected = "certificate unreadable" if case == "unreadable" else "certificate refused"
    assert str(claim_refusal.value) == str(manifest_refusal.value) == expected


def test_members_taking_turns_alone_with_a_host_cannot_push_its_first_claimant_out() -> None:
    """review21e E4: each member alone for ALONE_HOLD becomes a holder; the first claimant is always kept, and
    holds the host again at once when it names it (the others that took it after it: gone)."""
    clock = [0.0]
    claims = hc.HostClaims(clock=lambda: clock[0])
    now, mac = int(time.time() * 1000), MACS[1]
    claims.take(hc.Announcement(OV, M, now, (mac,)))
    assert claims.owners() == {mac: M}
    claims.take(hc.Announcement(OV, M, now + 1, ()))
    for turn in range(2 * hc.MAX_HOLDERS):
        member = (0x10 + turn) << 120
        claims.take(hc.Announcement(OV, member, now, (mac,)))
        claims.owners()
        clock[0] += hc.ALONE_HOLD
        assert claims.owners() == {mac: member}
        claims.take(hc.Announcement(OV, member, now + 1, ()))
        claims.owners()
    claims.take(hc.Announcement(OV, M, now + 2, (mac,)))
    assert claims.owners() == {mac: M}
