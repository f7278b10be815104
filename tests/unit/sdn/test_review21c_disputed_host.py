"""review21c: decision 0055 says a member announcing another's host "can only bring back the rules of 0034 for
it, never take it". But 0034's rules are what lost a receiving-only host's MAC to one forged flood (review21b,
test_review21b_receiving_host.py: 50 of 50 frames). So the attacker announces the victim's host MAC in its own
signed claim (its certificate is genuine; nothing checks that it hosts the MAC), the MAC becomes *disputed*,
and the 21b attack works again. Real switches on the fake flow table, real claim codec."""

from __future__ import annotations

import datetime
import time

import pytest

from evio.sdn import frb
from evio.signal import host_claims
from evio.testing.fake_flow_table import FakeNetwork, host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import OVERLAY
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def announce(net: FakeNetwork, node_ids: list[int], extra: dict[int, list[str]]) -> host_claims.HostClaims:
    """evio.testing.host_claims.announce_all, with `extra` MACs in some nodes' claims."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca_cert = make_overlay_ca(OVERLAY, now, 30)
    anchor = TrustAnchor(OVERLAY, (ca_cert,))
    claims = host_claims.HostClaims()
    wall = time.time()
    for nid in node_ids:
        key, cert = issue_node_certificate(ca_key, ca_cert, [OVERLAY], nid, now, 30)
        macs = net.nodes[nid].switch.hosted_macs() + extra.get(nid, [])
        claims.take(host_claims.verify(anchor, host_claims.pack(key, cert, OVERLAY, nid, int(wall * 1000), macs), wall))
    net.tell_owners(claims.owners())
    return claims


@pytest.mark.xfail(strict=True, reason="review21c C1: a member's claim of another's receiving-only host makes "
                   "it disputed, and 0034's rules then let one forged flood take its stream (21b again)")  # fmt: skip
def test_a_member_claiming_a_receiving_hosts_mac_takes_its_stream_with_one_forged_flood() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    u_mac, v_mac = host_mac(net, u), host_mac(net, v)
    net.now = 1.0
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    net.advance(0.1)
    net.inject(v, 1, eth(u_mac, v_mac, 0x0806))  # the ARP reply: v's last frame
    claims = announce(net, ids, {hostile: [v_mac]})  # the hostile member's claim names v's host too
    assert v_mac in claims.disputed
    for _ in range(100):  # 10 s of a steady one-way stream u -> v, 10 frames/s
        net.advance(0.1)
        net.inject(u, 1, eth(v_mac, u_mac))
    to_hostile = net.port_towards(u, hostile)
    intercepted: list[bytes] = []
    output = net._output

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(v_mac):
            intercepted.append(frame)
        return output(node, port, frame)

    net._output = spy  # type: ignore[method-assign]
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, v_mac, 0x0806), hostile, ids[4]))
    for _ in range(50):
        net.advance(0.1)
        net.inject(u, 1, eth(v_mac, u_mac))
    print(f"v's host disputed; of the next 5 s's 50 u->v frames, {len(intercepted)} went to the hostile member")
    assert not intercepted
