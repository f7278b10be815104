"""review21e E4: a disputed MAC is held by its first claimant here until that one stops naming it (decision 0055,
review21c), and a node stops naming a host at once when the host's leaf port goes. A member that names, in its own
signed list, the MACs of others' hosts it has seen (it sees every broadcast) is their second claimant everywhere:
held by nobody's doing while the real node names them. But when the host's leaf port goes and comes back (a VM
rebooted or migrated: libvirt makes a new TAP; a link flap), the real node drops it and names it again after the
member: the member is now the first claimant at every node, the host's own node second, and one forged flood takes
the host's traffic. Real switches on the fake flow table, real claim codec."""

from __future__ import annotations

from evio.sdn import frb
from evio.signal.host_claims import ALONE_HOLD
from evio.testing.fake_flow_table import host_mac
from evio.testing.fake_flow_table import ring_network as ring
from evio.testing.frames import eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged

VM = "52:54:00:12:34:56"


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


def intercepted_after_one_forgery(net, ids, hostile) -> int:  # type: ignore[no-untyped-def]
    """u streams to the VM (which only receives); the hostile member forges one flood naming it: the frames of the
    next 5 s that went to the hostile member."""
    u = ids[0]
    u_mac, to_hostile, output, seen = host_mac(net, u), net.port_towards(u, hostile), net._output, []

    def spy(node, port, frame):  # type: ignore[no-untyped-def]
        if node is net.nodes[u] and port == to_hostile and frame[:6] == frb.parse_mac(VM):
            seen.append(frame)
        return output(node, port, frame)

    net._output = spy
    for _ in range(100):
        net.advance(0.1)
        net.inject(u, 1, eth(VM, u_mac))
    net.from_neighbour(u, hostile, forged(eth(BROADCAST, VM, 0x0806), hostile, ids[4]))
    for _ in range(50):
        net.advance(0.1)
        net.inject(u, 1, eth(VM, u_mac))
    return len(seen)


def test_a_host_back_at_its_node_after_the_node_was_away_past_the_lists_lifetime_is_its_nodes_again() -> None:
    """E4's other door: v away (its list expired at the others), the member alone naming the VM for ALONE_HOLD
    holds it; v back, naming it again, holds it at once: the member yields to v, held before it and away."""
    net, ids = ring(6)
    u, v, hostile = ids[0], ids[2], ids[5]
    net.now = 1.0
    vnet = net.add_leaf(v, name="vnet0")
    net.inject(v, vnet, eth(BROADCAST, VM, 0x0806))
    net.inject(u, 1, eth(BROADCAST, host_mac(net, u), 0x0806))
    announcer = Announcer()
    claims = announcer.announce(net, ids, {hostile: [VM]})
    assert claims.owners()[VM] == v
    claims.forget([v])  # v's list expired (v away past LIFETIME): the same path
    announcer.announce(net, [hostile], {hostile: [VM]})
    assert VM not in claims.owners()
    net.advance(ALONE_HOLD)
    assert announcer.announce(net, [hostile], {hostile: [VM]}).owners()[VM] == hostile  # alone that long
    net.inject(v, vnet, eth(BROADCAST, VM, 0x0806))
    claims = announcer.announce(net, [v, hostile], {hostile: [VM]})  # v is back
    assert claims.owners()[VM] == v
    assert intercepted_after_one_forgery(net, ids, hostile) == 0


def test_a_host_that_migrates_while_a_member_names_it_in_advance_is_never_that_members() -> None:
    """E4 with a migration: the VM leaves v for w, its TAP at v going before or after w names it. The member
    that named it in advance never holds it: it is nobody's (0034's rules) while both name it."""
    for w_first in (True, False):
        net, ids = ring(6)
        v, w, hostile = ids[2], ids[3], ids[5]
        net.now = 1.0
        vnet = net.add_leaf(v, name="vnet0")
        net.inject(v, vnet, eth(BROADCAST, VM, 0x0806))
        announcer = Announcer()
        assert announcer.announce(net, ids, {hostile: [VM]}).owners()[VM] == v
        wnet = net.add_leaf(w, name="vnet0")
        net.advance(1.0)
        net.inject(w, wnet, eth(BROADCAST, VM, 0x0806))  # the VM resumes at w: its RARP
        node = net.nodes[v]
        for step in ("w", "v") if w_first else ("v", "w"):
            if step == "w":
                announcer.announce(net, [w])
            else:
                net._execute(node, node.switch.port_removed(vnet, net.now))
                announcer.announce(net, [v])
        for _ in range(3):
            net.advance(ALONE_HOLD)
            net.inject(w, wnet, eth(BROADCAST, VM, 0x0806))
            claims = announcer.announce(net, [v, w, hostile], {hostile: [VM]})
            assert claims.owners().get(VM) is None and VM in claims.unheld, f"w first: {w_first}"
        claims.forget([hostile])  # the member stops naming it (or is revoked): w's, alone, after ALONE_HOLD
        assert claims.owners().get(VM) is None
        net.advance(ALONE_HOLD)
        assert announcer.announce(net, [w]).owners()[VM] == w
