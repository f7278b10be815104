"""Review21g G6 (low): a peer's candidate may name loopback or the metadata service inside an IPv6 address that
embeds an IPv4 one, and is tried.

Attack: `candidate_drop` decodes only IPv4-mapped addresses (::ffff:a.b.c.d). A candidate at the NAT64 well-known
prefix (64:ff9b::a9fe:a9fe, RFC 6052), its local-use prefix (64:ff9b:1::/48, RFC 8215), 6to4 (2002:a9fe:a9fe::1),
an IPv4-compatible address (::127.0.0.1) or SIIT's IPv4-translated form (::ffff:0:a9fe:a9fe) passes every check,
so the node sends ICE checks there. Where the host's path has a translator (an IPv6-only host behind NAT64, a
local NAT64 or a 6to4 relay) they reach 169.254.169.254 or 127.0.0.1, which M3's filter exists to refuse.

Measured: `candidate_drop` returned None (tried) for all five forms above with the default deny list, while
169.254.169.254 and ::ffff:169.254.169.254 are refused (LINK_LOCAL). Well-behaved NAT64 gateways refuse non-global
embedded addresses (RFC 6052 3.1), hence low.

Fixed: the embedded address (at /96 for both NAT64 prefixes) is judged too. Proposed at the review: decode the embedded IPv4 address of 64:ff9b::/96, 64:ff9b:1::/48, 2002::/16 (`sixtofour`), ::/96
(IPv4-compatible) and ::ffff:0:0:0/96 before the checks, and judge it as the IPv4 address; or deny those prefixes
by default where they embed a non-global address.
"""

from __future__ import annotations

import ipaddress

import pytest

from evio.config.model import DEFAULT_DENY_CANDIDATES
from evio.tunnel.path.candidates import CandidatePolicy, LocalNetworks, candidate_drop

POLICY = CandidatePolicy(deny=tuple(ipaddress.ip_network(n) for n in DEFAULT_DENY_CANDIDATES))


@pytest.mark.parametrize("host", ["64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe", "2002:a9fe:a9fe::1", "::127.0.0.1",
                                  "::ffff:0:a9fe:a9fe"])  # fmt: skip
def test_an_ipv4_address_the_filter_refuses_is_refused_inside_an_ipv6_one(host: str) -> None:
    assert candidate_drop(host, False, POLICY, LocalNetworks.of([])) is not None


@pytest.mark.parametrize("host", ["64:ff9b::c000:221", "2002:c000:221::1", "2001:db8::1", "64:ff9b:1::c000:221"])
def test_a_global_address_inside_an_ipv6_one_is_tried(host: str) -> None:
    """192.0.2.33 stands in for a public address (TEST-NET-1 is not in the default deny list)."""
    assert candidate_drop(host, False, POLICY, LocalNetworks.of([])) is None


def test_ipv6_loopback_is_loopback_not_an_embedded_address() -> None:
    local = CandidatePolicy(deny=POLICY.deny, allow_local=True)
    assert candidate_drop("::1", False, local, LocalNetworks.of([])) is None
    assert candidate_drop("::1", False, POLICY, LocalNetworks.of([])) is not None
