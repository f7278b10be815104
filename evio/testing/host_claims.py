"""Signed host announcements for fake networks: an overlay CA, a certificate per node, and the owners every
switch is told, made by the real codec (evio.signal.host_claims) as the daemon makes them."""

from __future__ import annotations

import datetime
import time

from evio.signal import host_claims
from evio.testing.fake_flow_table import FakeNetwork
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OVERLAY = "hostclaims"


def announce_all(net: FakeNetwork, node_ids: list[int]) -> host_claims.HostClaims:
    """Each node signs what its switch hosts; the announcements are verified and every switch told the owners."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca(OVERLAY, now, 30)
    anchor = TrustAnchor(OVERLAY, (ca_cert,))
    claims = host_claims.HostClaims()
    wall = time.time()
    for nid in node_ids:
        key, cert = issue_node_certificate(ca_key, ca_cert, [OVERLAY], nid, now, 30)
        data = host_claims.pack(key, cert, OVERLAY, nid, int(wall * 1000), net.nodes[nid].switch.hosted_macs())
        claims.take(host_claims.verify(anchor, data, wall))
    net.tell_owners(claims.owners())
    return claims
