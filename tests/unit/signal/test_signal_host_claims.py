"""Signed host announcements (evio/signal/host_claims.py): what verifies, what is refused, who owns a MAC."""

from __future__ import annotations

import dataclasses
import datetime
import time

import pytest

from evio.signal import host_claims as hc
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


def test_a_mac_two_members_announce_is_disputed_and_owned_by_neither() -> None:
    claims = hc.HostClaims()
    now = int(time.time() * 1000)
    assert claims.take(hc.Announcement(OV, M, now, MACS))
    assert claims.owners() == {mac: M for mac in MACS}
    assert claims.take(hc.Announcement(OV, A, now, (MACS[1],)))  # A claims M's host: no one owns it now
    assert claims.owners() == {MACS[0]: M} and claims.disputed == {MACS[1]}
    old = hc.Announcement(OV, M, now - 1, ())
    assert not claims.take(old)  # an older announcement replayed changes nothing
    assert claims.take(dataclasses.replace(old, issued_ms=now + 1))  # M's newer list, without them
    assert claims.owners() == {MACS[1]: A}
    assert claims.forget([A]) and claims.owners() == {}
    assert claims.expire(time.time() + hc.LIFETIME + 1) and len(claims) == 0
