"""ARP and neighbour solicitations answered by the local switch (evio/sdn/neighbor_answers.py, issue 23): for
addresses the overlay knows, a local host's request is answered on its own port and crosses no tunnel;
anything doubtful is flooded."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb, garp
from evio.sdn import neighbor_answers as na
from evio.sdn.flow_actions import PacketOut
from evio.sdn.neighbor_answers import NeighborAnswers
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort
from evio.tcpip import finish, fold, ones_sum

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


def confirm(sw: BoundedFloodSwitch, mac: str, ip: ipaddress.IPv4Address, port: int, now: float) -> None:
    """H1's first request for `ip` floods (not confirmed here yet); `mac` answers it over `port`."""
    assert crossing(sw.packet_in(1, request(H1, IP1, ip), now=now)), "not confirmed yet: flooded"
    sw.packet_in(port, na.arp_reply(mac, ip, H1, IP1), now=now + 0.01)


def test_a_request_for_a_known_address_is_answered_on_its_port_and_crosses_no_tunnel() -> None:
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    confirm(sw, H3, IP3, port=10, now=1.5)  # its owner answered the first request, which crossed
    actions = sw.packet_in(1, request(H1, IP1, IP3), now=2)
    outs = [a for a in actions if isinstance(a, PacketOut)]
    assert crossing(actions) == [] and [a.port for a in outs] == [1]
    reply = garp.parse_arp(outs[0].data)
    assert reply is not None and reply.op is garp.ArpOp.REPLY
    assert (reply.eth_dst, reply.eth_src, reply.sender_mac, reply.sender_ip) == (H1, H3, H3, IP3)
    assert (reply.target_mac, reply.target_ip) == (H1, IP1)
    assert sw.neighbors.answered == 1


def test_unknown_contested_unconfirmed_or_dead_addresses_are_flooded_as_before() -> None:
    sw = switch()
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=1)), "unknown: flooded"
    announce(sw, H3, IP3, root=200, port=10, now=2)
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=2.5)), "announced only: flooded"
    announce(sw, H4, IP3, root=300, port=11, now=3)  # another MAC speaks for the same address
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=4)), "contested: flooded"
    assert sw.neighbors.contested == 1
    # Only one MAC for max_age, and it answered a flooded request: answered again.
    late = 3 + sw.neighbors.max_age + 1
    announce(sw, H4, IP3, root=300, port=11, now=late)
    confirm(sw, H4, IP3, port=11, now=late + 0.5)
    assert not crossing(sw.packet_in(1, request(H1, IP1, IP3), now=late + 1))
    # The MAC gone from the learning table (its port removed): flooded, not answered from memory.
    sw.port_removed(11, now=late + 2)
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=late + 3))


def test_a_reply_confirms_only_within_the_window_after_a_flooded_request() -> None:
    """A reply nobody here asked for (or too late), and an announcement, confirm nothing; a local host speaking
    on a leaf port is confirmed at once (the owner's own port)."""
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    sw.packet_in(10, na.arp_reply(H3, IP3, H1, IP1), now=1.1)  # unsolicited
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=2)), "an unasked reply confirmed it"
    sw.packet_in(10, na.arp_reply(H3, IP3, H1, IP1), now=2 + na.ASK_WINDOW + 0.1)  # after the window
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=6)), "a late reply confirmed it"
    sw.packet_in(10, garp.gratuitous_arp(H3, IP3, op=garp.ArpOp.REPLY), now=6.1)  # a reply-form announcement
    assert crossing(sw.packet_in(1, request(H1, IP1, IP3), now=7)), "an announcement confirmed it"
    sw.packet_in(10, na.arp_reply(H3, IP3, H1, IP1), now=7.5)
    assert not crossing(sw.packet_in(1, request(H1, IP1, IP3), now=8))
    # A second local host's address, heard on its own (leaf) port: answered for the first at once.
    sw.port_added(SwitchPort(2, "veth-h4", PortKind.LEAF, None, H4), now=8)
    ip4 = ipaddress.IPv4Address("10.9.0.4")
    sw.packet_in(2, request(H4, ip4, IP1), now=9)
    reply = [a for a in sw.packet_in(1, request(H1, IP1, ip4), now=10) if isinstance(a, PacketOut) and a.port == 1]
    assert reply and (parsed := garp.parse_arp(reply[0].data)) is not None and parsed.sender_mac == H4


def test_probes_announcements_and_requests_from_peers_are_never_answered() -> None:
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    probe = request(H1, ipaddress.IPv4Address(0), IP3)  # RFC 5227 duplicate address probe
    assert crossing(sw.packet_in(1, probe, now=2))
    assert crossing(sw.packet_in(1, garp.gratuitous_arp(H1, IP3), now=3))
    assert sw.neighbors.answered == 0


def test_a_frame_speaking_for_another_mac_teaches_nothing_and_the_table_is_bounded() -> None:
    table = NeighborAnswers(max_age=300, max_entries=4)
    forged = bytearray(request(H1, IP3, IP1))
    forged[6:12] = frb.parse_mac(H4)
    msg = na.parse(bytes(forged))
    assert msg is not None
    table.observe(msg, 1, now=1)
    assert len(table) == 0  # Ethernet source H4, ARP sender H1: proxy or forgery, not learned
    for n in range(10):
        arp = na.parse(request(H1, ipaddress.IPv4Address(f"10.9.1.{n}"), IP1))
        assert arp is not None
        table.observe(arp, 1, now=2 + n)
    assert len(table) == 1 and table.evicted == 9  # one port holds at most a quarter of the table
    table.expire(now=2 + 9 + 301)
    assert len(table) == 0


# ---------------------------------------------------------------- IPv6 neighbour discovery

V6_1, V6_3 = ipaddress.IPv6Address("fe80::1"), ipaddress.IPv6Address("fe80::3")


def ndp(kind: int, src_mac: str, src: ipaddress.IPv6Address, dst: ipaddress.IPv6Address,
        target: ipaddress.IPv6Address, flags: int = 0, option_mac: str | None = None, hop_limit: int = 255) -> bytes:  # fmt: skip
    option = b"" if option_mac is None else bytes([1 if kind == 135 else 2, 1]) + frb.parse_mac(option_mac)
    body = bytearray(struct.pack("!BBHI16s", kind, 0, 0, flags, target.packed) + option)
    pseudo = src.packed + dst.packed + len(body).to_bytes(4, "big") + bytes([0, 0, 0, 58])
    body[2:4] = finish(ones_sum(pseudo) + ones_sum(body)).to_bytes(2, "big")
    ip = struct.pack("!IHBB16s16s", 6 << 28, len(body), 58, hop_limit, src.packed, dst.packed)
    dst_mac = b"\x33\x33\xff" + dst.packed[-3:] if dst.is_multicast else frb.parse_mac(H1)
    return dst_mac + frb.parse_mac(src_mac) + b"\x86\xdd" + ip + bytes(body)


def solicit(target: ipaddress.IPv6Address, src: ipaddress.IPv6Address = V6_1) -> bytes:
    group = ipaddress.IPv6Address("ff02::1:ff00:0") + (int(target) & 0xFFFFFF)
    return ndp(135, H1, src, group, target, option_mac=H1 if not src.is_unspecified else None)


def advertise_remote(sw: BoundedFloodSwitch, mac: str, ip: ipaddress.IPv6Address, router: bool, now: float) -> None:
    adv = ndp(136, mac, ip, ipaddress.IPv6Address("ff02::1"), ip, flags=0x20000000 | (0x80000000 if router else 0),
              option_mac=mac)  # fmt: skip
    wire = frb.pack(frb.broadcast(adv, root_nid=200, bound_nid=200, hop_count=1))
    sw.packet_in(10, wire, now=now)


def reply_remote(sw: BoundedFloodSwitch, mac: str, ip: ipaddress.IPv6Address, router: bool, now: float) -> None:
    """`mac`'s solicited advertisement for `ip`, unicast to H1 over the link to node 200."""
    flags = 0x60000000 | (0x80000000 if router else 0)
    sw.packet_in(10, ndp(136, mac, ip, V6_1, ip, flags=flags, option_mac=mac), now=now)


def test_a_solicitation_for_an_advertised_address_is_answered_with_a_valid_advertisement() -> None:
    sw = switch()
    advertise_remote(sw, H3, V6_3, router=True, now=1)
    assert crossing(sw.packet_in(1, solicit(V6_3), now=1.5)), "advertised only: flooded"
    reply_remote(sw, H3, V6_3, router=True, now=1.6)  # its answer to the flooded solicitation confirms it
    actions = sw.packet_in(1, solicit(V6_3), now=2)
    outs = [a for a in actions if isinstance(a, PacketOut)]
    assert crossing(actions) == [] and [a.port for a in outs] == [1]
    reply = outs[0].data
    assert reply[:6] == frb.parse_mac(H1) and reply[6:12] == frb.parse_mac(H3)
    msg = na.parse(reply)
    assert msg is not None and msg.kind is na.Kind.SPEAKS
    assert (msg.sender_ip, msg.sender_mac, msg.router) == (V6_3, H3, True)  # the router flag it advertised
    icmp = reply[54:]
    pseudo = V6_3.packed + V6_1.packed + len(icmp).to_bytes(4, "big") + bytes([0, 0, 0, 58])
    assert fold(ones_sum(pseudo) + ones_sum(icmp)) == 0xFFFF, "ICMPv6 checksum does not verify"
    assert reply[21] == 255 and int.from_bytes(icmp[4:8], "big") & 0x60000000 == 0x60000000  # hop 255, S and O


def test_ndp_that_is_doubtful_is_flooded() -> None:
    sw = switch()
    assert crossing(sw.packet_in(1, solicit(V6_3), now=1)), "unknown: flooded"
    # Learned only from a solicitation (no router flag known): flooded, never answered with a guessed flag.
    sw.packet_in(10, frb.pack(frb.broadcast(ndp(135, H3, V6_3, ipaddress.IPv6Address("ff02::1:ff00:1"), V6_1,
                                                 option_mac=H3), 200, 200, 1)), now=2)  # fmt: skip
    assert crossing(sw.packet_in(1, solicit(V6_3), now=3))
    # Duplicate address detection (source ::) is never answered by the switch.
    advertise_remote(sw, H3, V6_3, router=False, now=4)  # unsolicited (within the window): confirms nothing
    assert crossing(sw.packet_in(1, solicit(V6_3), now=4.5))
    reply_remote(sw, H3, V6_3, router=False, now=4.6)
    assert crossing(sw.packet_in(1, solicit(V6_3, ipaddress.IPv6Address(0)), now=5))
    assert not crossing(sw.packet_in(1, solicit(V6_3), now=6))
    assert sw.neighbors.answered == 1


@pytest.mark.parametrize("mangle", ["hop-limit", "truncated", "bad-option", "multicast-target"])
def test_malformed_ndp_teaches_nothing(mangle: str) -> None:
    frame = ndp(136, H3, V6_3, ipaddress.IPv6Address("ff02::1"), V6_3, flags=0x20000000, option_mac=H3,
                hop_limit=64 if mangle == "hop-limit" else 255)  # fmt: skip
    if mangle == "truncated":
        frame = frame[:-5]
    elif mangle == "bad-option":
        frame = frame[:-7] + b"\x00" + frame[-6:]  # option length 0
    elif mangle == "multicast-target":
        frame = ndp(136, H3, V6_3, ipaddress.IPv6Address("ff02::1"), ipaddress.IPv6Address("ff02::1"), option_mac=H3)
    msg = na.parse(frame)
    table = NeighborAnswers()
    if msg is not None:
        table.observe(msg, 1, now=1)
    assert len(table) == 0
