"""review21e E4: a disputed MAC is held by its first claimant here until that one stops naming it (decision 0055,
review21c), and a node stops naming a host at once when the host's leaf port goes. A member that names, in its own
signed list, the MACs of others' hosts it has seen (it sees every broadcast) is their second claimant everywhere:
held by nobody's doing while the real node names them. But when the host's leaf port goes and comes back (a VM
rebooted or migrated: libvirt makes a new TAP; a link flap), the real node drops it and names it again after the
member: the member is now the first claimant at every node, the host's own node second, and one forged flood takes
the host's traffic. Real switches on the fake flow table, real claim codec."""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged

VM = "52:54:00:12:34:56"


@pytest.mark.xfail(strict=True, reason="review21e E4: a member naming a host in advance holds it after its port flaps")
def test_a_member_naming_a_host_in_advance_does_not_hold_it_once_the_hosts_port_comes_back() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    u_mac = host_mac(net, u)
    net.now = 1.0
    vnet = net.add_leaf(v, name="vnet0")
    net.inject(v, vnet, eth(BROADCAST, VM, 0x0806))
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    announcer = Announcer()
    claims = announcer.announce(net, ids, {hostile: [VM]})  # v first: v holds it, the member is seen (disputed)
    assert claims.owners()[VM] == v
    node = net.nodes[v]
    net._execute(node, node.switch.port_removed(vnet, net.now))  # the VM reboots: its TAP goes ...
    announcer.announce(net, [v])
    net.advance(1.0)
    vnet = net.add_leaf(v, name="vnet0")  # ... and a new one comes; the VM's first broadcast
    net.inject(v, vnet, eth(BROADCAST, VM, 0x0806))
    claims = announcer.announce(net, [v, hostile], {hostile: [VM]})  # both refresh: v names it again
    print(f"after the VM's port came back, its MAC is held by {'the hostile member' if claims.owners()[VM] == hostile else 'v'}")
    to_hostile = net.port_towards(u, hostile)
    intercepted: list[bytes] = []
    output = net._output

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(VM):
            intercepted.append(frame)
        return output(node, port, frame)

    net._output = spy  # type: ignore[method-assign]
    for _ in range(100):  # 10 s of u's stream to the VM, which only receives
        net.advance(0.1)
        net.inject(u, 1, eth(VM, u_mac))
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, VM, 0x0806), hostile, ids[4]))
    for _ in range(50):
        net.advance(0.1)
        net.inject(u, 1, eth(VM, u_mac))
    print(f"of the next 50 u->VM frames, {len(intercepted)} went to the hostile member")
    assert claims.owners()[VM] == v
    assert not intercepted
