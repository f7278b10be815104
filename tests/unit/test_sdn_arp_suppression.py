"""ARP answered by the local switch (evio/sdn/arp_suppression.py, issue 23): for addresses the overlay knows,
a local host's request is answered on its own port and crosses no tunnel; anything doubtful is flooded."""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb, garp
from evio.sdn.arp_suppression import ArpSuppression
from evio.sdn.flow_actions import PacketOut
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

H1, H3, H4 = "02:00:00:00:00:01", "02:00:00:00:00:03", "02:00:00:00:00:04"
IP1, IP3 = ipaddress.IPv4Address("10.9.0.1"), ipaddress.IPv4Address("10.9.0.3")


def request(src: str, src_ip: ipaddress.IPv4Address, target_ip: ipaddress.IPv4Address) -> bytes:
    sha = frb.parse_mac(src)
    return struct.pack("!6s6sHHHBBH6s4s6s4s", b"\xff" * 6, sha, 0x0806, 1, 0x0800, 6, 4, 1, sha, src_ip.packed,
                       b"\x00" * 6, target_ip.packed).ljust(60, b"\x00")  # fmt: skip


def switch() -> BoundedFloodSwitch:
    sw = BoundedFloodSwitch(100, "02:aa:00:00:00:01", flow_idle_timeout=30)
    sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, H1), now=0)
    sw.port_added(SwitchPort(10, "t200", PortKind.PEER, 200), now=0)
    sw.port_added(SwitchPort(11, "t300", PortKind.PEER, 300), now=0)
    return sw


def announce(sw: BoundedFloodSwitch, mac: str, ip: ipaddress.IPv4Address, root: int, port: int, now: float) -> None:
    """A remote node's gratuitous ARP, flooded to us from its root over the adjacent link."""
    wire = frb.pack(frb.broadcast(garp.gratuitous_arp(mac, ip), root_nid=root, bound_nid=root, hop_count=1))
    sw.packet_in(port, wire, now=now)


def crossing(actions: list) -> list[PacketOut]:
    return [a for a in actions if isinstance(a, PacketOut) and a.port in (10, 11)]


def test_a_request_for_a_known_address_is_answered_on_its_port_and_crosses_no_tunnel() -> None:
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    actions = sw.packet_in(1, request(H1, IP1, IP3), now=2)
    outs = [a for a in actions if isinstance(a, PacketOut)]
    assert crossing(actions) == [] and [a.port for a in outs] == [1]
    reply = garp.parse_arp(outs[0].data)
    assert reply is not None and reply.op is garp.ArpOp.REPLY
    assert (reply.eth_dst, reply.eth_src, reply.sender_mac, reply.sender_ip) == (H1, H3, H3, IP3)
    assert (reply.target_mac, reply.target_ip) == (H1, IP1)
    assert sw.arp.answered == 1


def test_unknown_contested_or_dead_addresses_are_flooded_as_before() -> None:
    sw = switch()
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=1)), "unknown: flooded"
    announce(sw, H3, IP3, root=200, port=10, now=2)
    announce(sw, H4, IP3, root=300, port=11, now=3)  # another MAC speaks for the same address
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=4)), "contested: flooded"
    assert sw.arp.contested == 1
    # Only one MAC for max_age: answered again.
    late = 3 + sw.arp.max_age + 1
    announce(sw, H4, IP3, root=300, port=11, now=late)
    assert not crossing(sw.packet_in(1, request(H1, IP1, IP3), now=late + 1))
    # The MAC gone from the learning table (its port removed): flooded, not answered from memory.
    sw.port_removed(11, now=late + 2)
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=late + 3))


def test_probes_announcements_and_requests_from_peers_are_never_answered() -> None:
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    probe = request(H1, ipaddress.IPv4Address(0), IP3)  # RFC 5227 duplicate address probe
    assert crossing(sw.packet_in(1, probe, now=2))
    assert crossing(sw.packet_in(1, garp.gratuitous_arp(H1, IP3), now=3))
    assert sw.arp.answered == 0


def test_a_frame_speaking_for_another_mac_teaches_nothing_and_the_table_is_bounded() -> None:
    table = ArpSuppression(max_age=300, max_entries=4)
    forged = garp.parse_arp(request(H1, IP3, IP1))
    assert forged is not None
    table.observe(garp.ArpPacket(forged.eth_dst, H4, forged.op, H1, IP3, forged.target_mac, IP1), now=1)
    assert len(table) == 0  # Ethernet source H4, ARP sender H1: proxy or forgery, not learned
    for n in range(10):
        arp = garp.parse_arp(request(H1, ipaddress.IPv4Address(f"10.9.1.{n}"), IP1))
        assert arp is not None
        table.observe(arp, now=2 + n)
    assert len(table) == 4 and table.evicted == 6
    table.expire(now=2 + 9 + 301)
    assert len(table) == 0
