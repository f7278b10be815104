"""A member's own overlay address, named by its CA certificate and its signed host claims (decision 0062).

The codec and the claims table: an address counts only if the announcing member's certificate names it, so an
attacker that signs a claim of the victim's address (with its own MAC, or the victim's) is refused, with or
without an address of its own in its certificate, and with its certificate already checked once; what does
not parse is refused before any signature check."""

from __future__ import annotations

import datetime
import ipaddress
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal import host_claims
from evio.signal.overlay_addresses import address_uri, certified_addresses
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OV = "ov1"
NOW = datetime.datetime.now(datetime.UTC)
CA_KEY, CA = make_overlay_ca("ov1 CA", NOW, 30)
ANCHOR = TrustAnchor(OV, (CA,))
VICTIM, ATTACKER, OTHER = 1 << 120, 2 << 120, 3 << 120
IP_V, IP_A = ipaddress.IPv4Address("10.254.0.2"), ipaddress.IPv4Address("10.254.0.3")
MAC_V, MAC_A = "02:00:00:00:00:02", "02:00:00:00:00:03"
V_KEY, V_CERT = issue_node_certificate(CA_KEY, CA, [OV], VICTIM, NOW, 30, addresses={OV: [IP_V]})
A_KEY, A_CERT = issue_node_certificate(CA_KEY, CA, [OV], ATTACKER, NOW, 30, addresses={OV: [IP_A]})
BARE_KEY, BARE_CERT = issue_node_certificate(CA_KEY, CA, [OV], OTHER, NOW, 30)


def ms() -> int:
    return int(time.time() * 1000)


def test_the_certificate_names_the_address_for_its_overlay_only() -> None:
    assert certified_addresses(V_CERT, OV) == {IP_V}
    assert certified_addresses(V_CERT, "ov2") == frozenset()
    assert certified_addresses(BARE_CERT, OV) == frozenset()
    assert address_uri(OV, ipaddress.IPv6Address("fd00::2")) == "evio-address:ov1:fd00::2"
    # The address does not disturb the node id the tunnels check.
    assert ANCHOR.refusal(V_CERT, VICTIM, NOW) is None


def test_a_member_names_its_own_certified_address_with_its_mac() -> None:
    data = host_claims.pack(V_KEY, V_CERT, OV, VICTIM, ms(), [MAC_V], [(IP_V, MAC_V)])
    assert data[4] == host_claims.VERSION_ADDRESSES
    ann = host_claims.verify(ANCHOR, data, time.time())
    assert ann.addresses == ((IP_V, MAC_V),) and ann.macs == (MAC_V,)
    # Without addresses the announcement stays version 1, which nodes of the previous release read.
    assert host_claims.pack(V_KEY, V_CERT, OV, VICTIM, ms(), [MAC_V])[4] == host_claims.VERSION


@pytest.mark.parametrize("key, cert, node", [(A_KEY, A_CERT, ATTACKER), (BARE_KEY, BARE_CERT, OTHER)],
                         ids=["attacker with an address of its own", "attacker with no address"])  # fmt: skip
@pytest.mark.parametrize("mac", [MAC_A, MAC_V], ids=["its own MAC", "the victim's MAC"])
def test_an_attacker_signing_a_claim_of_the_victims_address_is_refused(key: ec.EllipticCurvePrivateKey,
                                                                       cert: x509.Certificate, node: int, mac: str) -> None:  # fmt: skip
    data = host_claims.pack(key, cert, OV, node, ms(), [mac], [(IP_V, mac)])
    with pytest.raises(host_claims.ClaimError, match="address not certified"):
        host_claims.verify(ANCHOR, data, time.time())
    # Its certificate already checked once (a refresh costs no chain): the addresses it names are kept with it.
    certificates = host_claims.Certificates()
    honest = host_claims.pack(key, cert, OV, node, ms(), [mac])
    host_claims.check(ANCHOR, host_claims.parse(OV, honest, time.time()), time.time(), certificates)
    with pytest.raises(host_claims.ClaimError, match="address not certified"):
        host_claims.check(ANCHOR, host_claims.parse(OV, data, time.time()), time.time(), certificates)


def test_a_known_certificate_still_certifies_its_address() -> None:
    certificates = host_claims.Certificates()
    for _ in range(2):  # the chain checked the first time, the cache the second
        data = host_claims.pack(V_KEY, V_CERT, OV, VICTIM, ms(), [MAC_V], [(IP_V, MAC_V)])
        ann = host_claims.check(ANCHOR, host_claims.parse(OV, data, time.time()), time.time(), certificates)
        assert ann.addresses == ((IP_V, MAC_V),)


@pytest.mark.parametrize("section, why", [
    (b"\x00", "bad address count"),
    (bytes([host_claims.MAX_ADDRESSES + 1]), "bad address count"),
    (b"\x01\x05" + bytes(5) + b"\x00", "bad address"),  # neither 4 nor 16 bytes
    (b"\x01\x04" + IP_V.packed + b"\x01", "bad address"),  # its MAC index past the one MAC
    (b"\x01\x04" + bytes(4) + b"\x00", "bad address"),  # 0.0.0.0
    (b"\x01\x04" + bytes([224, 0, 0, 251]) + b"\x00", "bad address"),
])  # fmt: skip
def test_a_malformed_address_section_is_refused_before_any_signature_check(section: bytes, why: str) -> None:
    honest = host_claims.pack(V_KEY, V_CERT, OV, VICTIM, ms(), [MAC_V])
    head = host_claims.parse(OV, honest, time.time()).signed
    data = bytes([*head[:4], host_claims.VERSION_ADDRESSES, *head[5:]]) + section + b"\x30\x06" + bytes(6)
    with pytest.raises(host_claims.ClaimError, match=why):
        host_claims.parse(OV, data, time.time())


def announcement(node: int, macs: tuple[str, ...], addresses: tuple[tuple[ipaddress.IPv4Address, str], ...],
                 issued: int = 1) -> host_claims.Announcement:  # fmt: skip
    return host_claims.Announcement(OV, node, issued, macs, addresses)


def test_an_address_is_answered_only_for_its_one_claimant_holding_its_mac() -> None:
    claims = host_claims.HostClaims(self_id=OTHER)
    claims.take(announcement(VICTIM, (MAC_V,), ((IP_V, MAC_V),)))
    assert claims.addresses(claims.owners()) == {IP_V: MAC_V}
    # A member that named the victim's MAC first holds it here (0055): the address is then answered by nobody.
    first = host_claims.HostClaims(self_id=OTHER)
    first.take(announcement(ATTACKER, (MAC_V,), ()))
    first.take(announcement(VICTIM, (MAC_V,), ((IP_V, MAC_V),)))
    assert first.owners()[MAC_V] == ATTACKER and first.addresses(first.owners()) == {}
    # Two certificates naming one address (the CA gave it again before the first expired): neither is answered for.
    twice = host_claims.HostClaims(self_id=OTHER)
    twice.take(announcement(VICTIM, (MAC_V,), ((IP_V, MAC_V),)))
    twice.take(announcement(ATTACKER, (MAC_A,), ((IP_V, MAC_A),)))
    assert twice.addresses(twice.owners()) == {}
    # This node's own address is left out: its bridge answers for itself.
    own = host_claims.HostClaims(self_id=VICTIM)
    own.take(announcement(VICTIM, (MAC_V,), ((IP_V, MAC_V),)))
    assert own.addresses(own.owners()) == {}


def test_a_list_naming_new_addresses_is_a_change_and_one_dropping_them_withdraws_them() -> None:
    claims = host_claims.HostClaims()
    claims.take(announcement(VICTIM, (MAC_V,), ()))
    assert claims.take(announcement(VICTIM, (MAC_V,), ((IP_V, MAC_V),), issued=2))
    assert claims.addresses(claims.owners()) == {IP_V: MAC_V}
    assert claims.take(announcement(VICTIM, (MAC_V,), (), issued=3))
    assert claims.addresses(claims.owners()) == {}
