"""review21: can a member make other nodes' switches answer a victim's address with the member's MAC?

decision 0044 says an address two MACs claimed within max_age is *contested* and flooded ("a member lying
about another's address"); 0056 answers only for an address its owner confirmed here (a reply to a request
this switch flooded, or a local host on its own port), so a member's announcement alone is never answered for.
These tests drive the real BoundedFloodSwitch: node 100 with a local host H1, the victim's node 200 (host H3 at
IP3) and the attacker's node 300 (host HA), both adjacent.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb, garp
from evio.sdn.flow_actions import PacketOut
from evio.sdn.neighbor_answers import arp_reply
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

H1, H3, HA = "02:00:00:00:00:01", "02:00:00:00:00:03", "02:00:00:00:00:aa"
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
    wire = frb.pack(frb.broadcast(garp.gratuitous_arp(mac, ip), root_nid=root, bound_nid=root, hop_count=1))
    sw.packet_in(port, wire, now=now)


def answered_with(sw: BoundedFloodSwitch, now: float) -> str | None:
    """H1 asks for IP3: the MAC the switch answers with, or None when the request is flooded."""
    actions = sw.packet_in(1, request(H1, IP1, IP3), now=now)
    crossing = [a for a in actions if isinstance(a, PacketOut) and a.port in (10, 11)]
    if crossing:
        return None
    replies = [garp.parse_arp(a.data) for a in actions if isinstance(a, PacketOut) and a.port == 1]
    return replies[0].sender_mac if replies and replies[0] is not None else None


def owner_answers(sw: BoundedFloodSwitch, mac: str, port: int, now: float) -> None:
    """H1's request for IP3 floods, and `mac` answers it over `port`: confirmed here (0056)."""
    assert answered_with(sw, now) is None
    sw.packet_in(port, arp_reply(mac, IP3, H1, IP1), now=now + 0.01)


def test_baseline_a_lie_about_a_recently_heard_address_is_contested_and_flooded() -> None:
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    owner_answers(sw, H3, port=10, now=1.5)
    assert answered_with(sw, 2) == H3
    announce(sw, HA, IP3, root=300, port=11, now=3)
    assert answered_with(sw, 4) is None  # contested: flooded, the owner answers


# Closed (N1, decision 0056): a member's announcement alone is never answered for; the request floods, so the owner
# answers it as on any Ethernet.
@pytest.mark.parametrize("heard_before", [True, False])
def test_first_claim_of_an_address_not_heard_here_is_not_answered_for_the_attacker(heard_before: bool) -> None:
    """The victim's address is not in this node's table within max_age (never ARPed since this node started, or
    > max_age ago). Was: the attacker's one announcement was answered to every local host, and the request no
    longer reached the victim, so the real owner could not even answer (on an Ethernet it would)."""
    sw = switch()
    if heard_before:
        announce(sw, H3, IP3, root=200, port=10, now=1)
        owner_answers(sw, H3, port=10, now=1.5)  # even confirmed once
    late = 1 + sw.neighbors.max_age + 1  # the victim talks by unicast (ARP refreshes are unicast): not heard
    announce(sw, HA, IP3, root=300, port=11, now=late)
    got = answered_with(sw, late + 1)
    assert sw.neighbors.contested == 0  # nothing marks the lie
    assert got != HA, f"H1 is answered {got} (the attacker) for the victim's address, and the request stays here"
    assert got is None  # flooded: it reaches the victim


def test_the_owners_answer_to_the_flooded_request_contests_the_attackers_claim() -> None:
    """After the attacker's announcement, H1's request floods; the owner answers: two MACs within max_age, so the
    address is contested and every request floods (the attacker can take the answering away, not the address).
    The attacker answering too, before the owner, changes nothing."""
    for attacker_answers in (False, True):
        sw = switch()
        announce(sw, HA, IP3, root=300, port=11, now=1)
        assert answered_with(sw, 2) is None
        if attacker_answers:
            sw.packet_in(11, arp_reply(HA, IP3, H1, IP1), now=2.01)
        sw.packet_in(10, arp_reply(H3, IP3, H1, IP1), now=2.02)
        assert sw.neighbors.contested == 1
        assert answered_with(sw, 3) is None


def test_a_member_cannot_evict_a_live_address_to_claim_it_uncontested() -> None:
    """Fixed: a port's frames hold at most a quarter of the table and evict their own first."""
    sw = switch()
    announce(sw, H3, IP3, root=200, port=10, now=1)
    owner_answers(sw, H3, port=10, now=1.2)
    assert answered_with(sw, 1.5) == H3
    # The attacker announces invented addresses with its own MAC (one MAC: its port's learning share is
    # untouched), within the per-port packet-in rate (1000/s).
    now = 2.0
    base = int(ipaddress.IPv4Address("10.200.0.0"))
    for i in range(sw.neighbors.max_entries):
        now += 1 / 900
        announce(sw, HA, ipaddress.IPv4Address(base + i), root=300, port=11, now=now)
    assert sw.neighbors.known_mac(_req()) == H3  # the victim's entry stays; the attacker evicted its own
    announce(sw, HA, IP3, root=300, port=11, now=now + 0.01)
    got = answered_with(sw, now + 0.02)
    # Within max_age of the victim's own announcement this should be contested (flooded): it is answered HA.
    assert got != HA, f"answered with the attacker's MAC {got} {now - 1:.1f} s after the owner spoke"


def _req():
    from evio.sdn.neighbor_answers import parse

    return parse(request(H1, IP1, IP3))


# Fixed: an address is learned only from a frame whose source the learning table placed where it came from.
def test_an_address_is_learned_from_a_frame_whose_mac_move_the_learning_table_refused() -> None:
    """0044: 'learned from ARP whose source the learning table accepted'. The attacker sends the victim's MAC
    (held on port 10, heard within MOVE_HOLD) speaking for a third address IP9: the move is refused, the
    address is learned anyway, and H1 is answered IP9 -> H3 (traffic for IP9 goes to the wrong host)."""
    sw = switch()
    ip9 = ipaddress.IPv4Address("10.9.0.9")
    announce(sw, H3, IP3, root=200, port=10, now=1)
    announce(sw, H3, ip9, root=300, port=11, now=1.5)  # a move of H3 to 300's side: refused (held)
    assert sw.learning.lookup(H3, 1.6).port == 10
    from evio.sdn.neighbor_answers import parse

    assert sw.neighbors.known_mac(parse(request(H1, IP1, ip9))) is None
