"""A node's own overlay addresses, named by its overlay-CA certificate (decision 0062). Pure.

A switch answers a local host's ARP request or neighbour solicitation for a member's address at once, without
crossing the overlay, only when something the members cannot forge binds the address to that member: a member
may announce any address (decision 0056). The CA can: a node certificate may name, beside its node id
(``evio:<overlay>:<id>``, `evio.tunnel.path.trust.node_uri`), the node's own address in each overlay, as the SAN
URI ``evio-address:<overlay>:<address>``. The node names the MAC that holds it in its signed host claims
(`evio.signal.host_claims`), and a receiver takes the address only if the certificate names it.
"""

from __future__ import annotations

import ipaddress

from cryptography import x509

from evio.signal.identity import san_names

SCHEME = "evio-address"
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_uri(overlay: str, address: IPAddress) -> str:
    """The SAN URI that binds a certificate's node to its own `address` in `overlay`."""
    return f"{SCHEME}:{overlay}:{address}"


def certified_addresses(cert: x509.Certificate, overlay: str) -> frozenset[IPAddress]:
    """The addresses `cert` names for its node in `overlay`; what is not one unicast address is left out."""
    found: set[IPAddress] = set()
    for name in san_names(cert, SCHEME, overlay):
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            continue
        if not (address.is_multicast or address.is_unspecified):
            found.add(address)
    return frozenset(found)
