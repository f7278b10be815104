"""Signed host announcements for fake networks: an overlay CA, a certificate per node, and the owners every
switch is told, made by the real codec (evio.signal.host_claims) as the daemon makes them."""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from evio.signal import host_claims
from evio.testing.fake_flow_table import FakeNetwork
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

OVERLAY = "hostclaims"


class Announcer:
    """One overlay CA and its node certificates, and the claims every node holds (one `HostClaims` for all: the
    fake network's announcements reach every node, in the order of the node ids given)."""

    def __init__(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        self._ca_key, self._ca_cert = make_overlay_ca(OVERLAY, now, 30)
        self.anchor = TrustAnchor(OVERLAY, (self._ca_cert,))
        self._certs: dict[int, tuple[ec.EllipticCurvePrivateKey, x509.Certificate]] = {}
        self.now = 0.0  # the fake network's clock at the last announcement: times HostClaims' ALONE_HOLD
        self.claims = host_claims.HostClaims(clock=lambda: self.now)
        self._last_ms = 0
        self._pagers: dict[int, host_claims.Pager] = {}

    def announce(self, net: FakeNetwork, node_ids: Sequence[int],
                 extra: Mapping[int, Sequence[str]] | None = None) -> host_claims.HostClaims:  # fmt: skip
        """Each of `node_ids` signs what its switch hosts (and its `extra` MACs); every switch is told the owners."""
        self.now = net.now
        for nid in node_ids:
            if nid not in self._certs:
                now = datetime.datetime.now(datetime.UTC)
                self._certs[nid] = issue_node_certificate(self._ca_key, self._ca_cert, [OVERLAY], nid, now, 30)
            key, cert = self._certs[nid]
            wall = time.time()
            self._last_ms = max(self._last_ms + 1, int(wall * 1000))  # each one newer than the last
            macs = net.nodes[nid].switch.hosted_macs() + list((extra or {}).get(nid, ()))
            pages = self._pagers.setdefault(nid, host_claims.Pager()).pages(macs)  # as the daemon pages a long list
            for number, page in enumerate(pages):
                self._last_ms += 1
                data = host_claims.pack(key, cert, OVERLAY, nid, self._last_ms, page, (), number, len(pages))
                self.claims.take(host_claims.verify(self.anchor, data, wall))
        net.tell_owners(self.claims.owners())
        return self.claims


def announce_all(net: FakeNetwork, node_ids: list[int]) -> host_claims.HostClaims:
    """Each node signs what its switch hosts; the announcements are verified and every switch told the owners."""
    return Announcer().announce(net, node_ids)
