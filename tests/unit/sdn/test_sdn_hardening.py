"""An adjacent peer attacking this node's switching: poisoning, forged announcements, floods."""

from __future__ import annotations

from evio.sdn import frb
from evio.sdn.broadcast_log import BroadcastLog
from evio.sdn.flow_actions import DeleteFlowsToMac, PacketOut
from evio.sdn.learning_table import Change, LearningTable
from evio.sdn.switch import BoundedFloodSwitch, Drop, PortKind, SwitchPort
from evio.testing.frames import eth

BRIDGE = "02:00:00:00:00:01"  # the bridge's internal port
APP = "02:00:00:00:00:0a"  # a host behind the app port
H200 = "02:00:00:00:02:00"  # hosted by node 200
SWITCH_MAC = "02:aa:00:00:00:01"


def switch() -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(100, SWITCH_MAC)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, BRIDGE), now=0)
    sw.port_added(SwitchPort(2, "app0", PortKind.LEAF), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    sw.port_added(SwitchPort(11, "t300", PortKind.PEER, 300), now=0)
    return sw


def test_a_peer_cannot_claim_the_bridge_mac() -> None:
    sw = switch()
    # Never seen locally yet: the bridge's own address is still ours.
    assert sw.packet_in(11, eth(H200, BRIDGE), now=1) == []
    assert sw.learning.lookup(BRIDGE, now=1) is None
    # Seen locally, then claimed by a peer: frame, FRB broadcast and leaf announcement all fail.
    sw.packet_in(1, eth(APP, BRIDGE), now=2)
    sw.packet_in(11, eth(APP, BRIDGE), now=3)
    sw.packet_in(11, frb.pack(frb.broadcast(eth("ff:ff:ff:ff:ff:ff", BRIDGE), 300, 300, 1)), now=3)
    sw.packet_in(11, frb.pack(frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:03"), 300, [BRIDGE])), now=3)
    entry = sw.learning.lookup(BRIDGE, now=4)
    assert entry is not None and entry.port == 1
    # The broadcast is our own frame as far as the switch can tell (a transit flood brings those back):
    # passed on within its bound, never delivered here nor learned.
    assert sw.drops[Drop.LOCAL_MAC_CLAIMED] == 3 and sw.drops[Drop.OWN_FRAME] == 1


def test_a_peer_cannot_move_a_host_learned_on_a_leaf_port_with_unicast_or_announcements() -> None:
    sw = switch()
    sw.packet_in(2, eth(BRIDGE, APP), now=1)
    assert sw.packet_in(11, eth(BRIDGE, APP), now=2) == []
    sw.packet_in(11, frb.pack(frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:03"), 300, [APP])), now=2)
    entry = sw.learning.lookup(APP, now=3)
    assert entry is not None and entry.port == 2
    assert sw.drops[Drop.LOCAL_MAC_CLAIMED] == 2


def test_a_leaf_announcement_is_taken_only_for_the_announcing_ports_own_root() -> None:
    sw = switch()
    announce_200 = frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:02"), 200, [H200])
    sw.packet_in(10, frb.pack(announce_200), now=1)
    assert sw.learning.leaf_macs(200) == {H200}
    # Peer 300 speaks for root 200 with an empty list: that would withdraw H200.
    forged = frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:00:03"), 200, [])
    assert sw.packet_in(11, frb.pack(forged), now=2) == []
    assert sw.learning.leaf_macs(200) == {H200}
    entry = sw.learning.lookup(H200, now=2)
    assert entry is not None and entry.port == 10
    assert sw.drops[Drop.FOREIGN_ANNOUNCE] == 1


def test_the_learning_table_is_bounded_and_evicts_remote_entries_before_local_ones() -> None:
    t = LearningTable(max_age=300, max_entries=3, max_per_port=3)  # the whole table's rule alone
    t.learn(APP, 2, None, now=0, local=True)
    t.learn("02:00:00:00:00:b1", 10, 200, now=1)
    t.learn("02:00:00:00:00:b2", 10, 200, now=2)
    got = t.learn("02:00:00:00:00:b3", 11, 300, now=3)
    assert got.change is Change.NEW and got.evicted == ("02:00:00:00:00:b1",)
    assert len(t) == 3 and t.lookup(APP, now=3) is not None
    assert t.leaf_macs(200) == {"02:00:00:00:00:b2"}
    # A refresh makes an entry recent: the other remote one goes next.
    t.learn("02:00:00:00:00:b2", 10, 200, now=4)
    assert t.learn("02:00:00:00:00:b4", 11, 300, now=5).evicted == ("02:00:00:00:00:b3",)


def test_a_table_full_of_pins_refuses_remote_macs() -> None:
    t = LearningTable(max_age=300, max_entries=2)
    t.learn("02:00:00:00:00:a1", 1, None, now=0, local=True)
    t.learn("02:00:00:00:00:a2", 2, None, now=0, local=True)
    assert t.learn("02:00:00:00:00:b1", 10, 200, now=1).change is Change.REFUSED
    assert len(t) == 2


def test_a_peer_flooding_random_source_macs_evicts_only_what_peers_taught_and_flows_follow() -> None:
    sw = BoundedFloodSwitch(100, SWITCH_MAC, max_macs=64, packet_in_rate=1e9, packet_in_burst=10**9)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, BRIDGE), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    sw.packet_in(1, eth(H200, BRIDGE), now=0)
    deletes = 0
    for i in range(1000):
        actions = sw.packet_in(10, eth(BRIDGE, f"02:66:00:00:{i >> 8:02x}:{i & 0xFF:02x}"), now=1)
        deletes += sum(isinstance(a, DeleteFlowsToMac) for a in actions)
    # The port keeps its share of the table (a quarter), churning only its own entries.
    assert len(sw.learning.macs_on_port(10)) == 64 // 4 and len(sw.learning) == 1 + 64 // 4
    assert sw.learning.lookup(BRIDGE, now=1) is not None
    assert deletes == 1000 - 64 // 4  # every evicted MAC's flows go with it


def test_the_broadcast_log_keeps_a_bounded_number_of_roots() -> None:
    log = BroadcastLog(max_roots=4)
    for root in range(10):
        log.record(root, b"x" * 14, peer=1, hop_count=1)
    log.record(7, b"x" * 14, peer=1, hop_count=1)
    assert list(log.by_root) == [6, 8, 9, 7]
    assert log.by_root[7] == 2 and log.received == 11 and log.roots_evicted == 6


def test_packet_ins_are_rate_limited_per_port() -> None:
    sw = BoundedFloodSwitch(100, SWITCH_MAC, packet_in_rate=100, packet_in_burst=50)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, BRIDGE), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    storm = frb.pack(frb.broadcast(eth("ff:ff:ff:ff:ff:ff", H200), 200, 200, 1))
    delivered = sum(any(isinstance(a, PacketOut) for a in sw.packet_in(10, storm, now=1.0)) for _ in range(500))
    assert delivered == 50 and sw.drops[Drop.RATE_LIMITED] == 450
    # Another port is not starved by it, and the storming port gets its rate back over time.
    assert sw.packet_in(1, eth("ff:ff:ff:ff:ff:ff", BRIDGE), now=1.0) != []
    delivered = sum(any(isinstance(a, PacketOut) for a in sw.packet_in(10, storm, now=1.25)) for _ in range(500))
    assert delivered == 25
