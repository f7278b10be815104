"""A switch told who announced which MAC (decision 0055): such a MAC is placed only under its announcer.

The fake ring of tests/unit/sdn/test_review21b_receiving_host.py; `announce_all` signs each node's hosted MACs
with a certificate of a test overlay CA and tells every switch the owners, as evio/node/host_claims.py does."""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.learning_table import MOVE_HOLD
from evio.sdn.switch import Drop
from evio.signal.host_claims import ALONE_HOLD
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import Announcer, announce_all
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged


def quiet_ring():  # type: ignore[no-untyped-def]
    """A ring of 6; u and v's hosts ARPed once and fell silent past the move hold; every node announced."""
    net, ids = ring(6)
    net.now = 1.0
    for nid in ids:
        net.inject(nid, 1, eth(BROADCAST, host_mac(net, nid), 0x0806))
    announce_all(net, ids)
    net.advance(MOVE_HOLD + 1)
    return net, ids


def test_plain_frames_from_a_hostile_neighbour_do_not_move_an_announced_mac() -> None:
    net, ids = quiet_ring()
    u, v, hostile = ids[0], ids[2], ids[5]
    v_mac = host_mac(net, v)
    before = net.nodes[u].switch.learning.lookup(v_mac, net.now)
    for _ in range(3):
        net.from_neighbour(u, hostile, eth(host_mac(net, u), v_mac))  # unicast "from" v's host, to u's
    after = net.nodes[u].switch.learning.lookup(v_mac, net.now)
    assert before is not None and after is not None and after.port == before.port and after.root == v
    assert net.nodes[u].switch.drops[Drop.NOT_ANNOUNCER] >= 1


def test_a_hostile_neighbours_leaf_announcement_of_another_members_mac_is_not_taken() -> None:
    net, ids = quiet_ring()
    u, v, hostile = ids[0], ids[2], ids[5]
    v_mac = host_mac(net, v)
    sw = net.nodes[u].switch
    frame = frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:00:00:00:00:99"), hostile, [v_mac])
    net.from_neighbour(u, hostile, frb.pack(frame))
    entry = sw.learning.lookup(v_mac, net.now)
    assert entry is not None and entry.root == v and sw.drops[Drop.NOT_ANNOUNCER] == 1


def test_a_mac_learned_under_another_member_before_the_announcement_goes_when_it_comes() -> None:
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    v_mac = host_mac(net, v)
    net.now = 1.0
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, v_mac, 0x0806), hostile, ids[4]))
    assert net.nodes[u].switch.learning.lookup(v_mac, net.now).root == hostile  # type: ignore[union-attr]
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))  # held at u: hostile's place spoke just now
    announce_all(net, ids)
    assert net.nodes[u].switch.learning.lookup(v_mac, net.now) is None  # forgotten, flows with it
    net.inject(v, 1, eth(BROADCAST, v_mac, 0x0806))
    assert net.nodes[u].switch.learning.lookup(v_mac, net.now).root == v  # type: ignore[union-attr]


def test_a_host_that_moved_is_placed_at_its_new_node_once_its_old_node_stops_naming_it() -> None:
    """The old node keeps the host as its own until its entry goes there (its leaf port went with the VM, or it
    aged out; a flood from its MAC is "our own frame come back"), so it announces it still: two claimants, and
    the first holds it (review21c). Once the old node's list leaves it out, the host is nobody's (0034's rules)
    until the new node has been its only claimant for ALONE_HOLD (review21e E4), then the new node's."""
    net, ids = quiet_ring()
    u, v, w = ids[0], ids[2], ids[3]
    vm = "52:54:00:00:00:07"
    announcer = Announcer()
    v_port = net.add_leaf(v, "vm")
    net.inject(v, v_port, eth(BROADCAST, vm, 0x0806))
    announcer.announce(net, ids)  # v hosts the VM
    net.advance(MOVE_HOLD + 1)
    w_port = net.add_leaf(w, "vm")
    net.inject(w, w_port, eth(BROADCAST, vm, 0x0806))  # migrated: its gratuitous ARP from w
    claims = announcer.announce(net, ids)  # w announces it too; v still does
    assert vm in claims.disputed and claims.owners()[vm] == v
    net.advance(MOVE_HOLD + 1)
    net.inject(w, w_port, eth(BROADCAST, vm, 0x0806))
    assert net.nodes[u].switch.learning.lookup(vm, net.now).root == v
    net.forget(v, vm)  # gone at v: its port went, or it aged out
    claims = announcer.announce(net, [v])  # v's next list leaves it out
    assert vm not in claims.disputed and vm in claims.unheld and vm not in claims.owners()
    net.advance(ALONE_HOLD)
    claims = announcer.announce(net, [w])
    assert claims.owners()[vm] == w
    assert net.nodes[u].switch.learning.lookup(vm, net.now) is None  # its place under v forgotten, flows with it
    net.inject(w, w_port, eth(BROADCAST, vm, 0x0806))
    for nid in ids:
        if nid != w:
            assert net.nodes[nid].switch.learning.lookup(vm, net.now).root == w


def test_a_host_aged_out_on_a_leaf_port_stays_announced_for_a_grace_unless_its_port_goes() -> None:
    """review21d C1': a busy VM's entry ages out while it talks over flows; its node keeps naming it. review21e E6:
    a frame from it by a tunnel (which any member can forge) does not end the grace."""
    from evio.sdn.switch import HOSTED_GRACE, BoundedFloodSwitch, PortKind, SwitchPort

    vm, other = "02:00:00:00:00:0b", "02:00:00:00:00:0c"
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01")
    sw.port_added(SwitchPort(1, "vm-tap", PortKind.LEAF, None, "02:00:00:00:00:01"), now=0)
    sw.port_added(SwitchPort(2, "tun", PortKind.PEER, 7, "02:00:00:00:00:02"), now=0)
    sw.port_added(SwitchPort(3, "vm2-tap", PortKind.LEAF, None, "02:00:00:00:00:03"), now=0)
    sw.packet_in(1, eth(other, vm), now=1)
    assert vm in sw.hosted_macs()
    age = sw.learning.max_age
    sw.expire(1 + age)  # aged out: no packet-in refreshed it
    assert sw.learning.lookup(vm, 1 + age) is None and vm in sw.hosted_macs()
    sw.expire(1 + age + HOSTED_GRACE)
    assert vm not in sw.hosted_macs(), "kept past the grace"
    # A frame from it by a tunnel, in its grace: still ours until the grace ends (a forged flood would end it).
    sw.packet_in(1, eth(other, vm), now=2000)
    sw.expire(2000 + age)
    sw.packet_in(2, eth(other, vm), now=2000 + age + 1)
    assert sw.learning.lookup(vm, 2000 + age + 1).port == 2 and vm in sw.hosted_macs()  # type: ignore[union-attr]
    sw.expire(2000 + age + HOSTED_GRACE)
    assert vm not in sw.hosted_macs()
    # Seen on another leaf port: named by that port.
    sw.packet_in(3, eth(other, vm), now=5000)
    assert vm in sw.hosted_macs()
    # Its leaf port gone: no longer ours at once.
    sw.packet_in(1, eth(other, "02:00:00:00:00:0d"), now=6000)
    sw.expire(6000 + age)
    assert "02:00:00:00:00:0d" in sw.hosted_macs()
    sw.packet_in(2, forged(eth("ff:ff:ff:ff:ff:ff", "02:00:00:00:00:0d"), 7, 7), now=6000 + age + 1)
    sw.port_removed(1, now=6000 + age + 2)
    assert "02:00:00:00:00:0d" not in sw.hosted_macs()
