"""review21b: what the vouch of 7b00e34 leaves: a host that is busy *receiving* (a one-way stream to it: video,
backup, syslog, RTP with silence suppression) sends nothing its place could vouch with. Its MAC is "quiet" at the
sender's node however much traffic flows to it, and one forged flood from the sender's adjacent member moves it
at once (no claim to wait on: its place last spoke at its ARP). Decision 0034's residual, but for a busy host.

Fixed since (decision 0055): each node announces the MACs it hosts, signed with its overlay certificate, and a
switch places an announced MAC only under its announcer's root. `announce_all` does what the daemons do."""

from __future__ import annotations

from evio.sdn import frb
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import announce_all
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def test_one_forged_flood_takes_the_mac_of_a_host_receiving_a_steady_stream() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    u_mac, v_mac = host_mac(net, u), host_mac(net, v)
    net.now = 1.0
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))
    net.inject(u, 1, eth(BROADCAST, u_mac, 0x0806))
    net.advance(0.1)
    net.inject(v, 1, eth(u_mac, v_mac, 0x0806))  # the ARP reply: v's last frame
    announce_all(net, ids)  # each node's signed list of the MACs it hosts, flooded over the overlay
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
    print(f"of the next 5 s's 50 u->v frames, {len(intercepted)} went to the hostile member")
    assert not intercepted
