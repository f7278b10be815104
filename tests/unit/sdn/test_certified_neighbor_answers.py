"""A member's own overlay address that its CA certificate names is answered by the local switch at once (decision
0062), and never for anyone else.

The real BoundedFloodSwitch of node 100, with a local host H1, the victim's node 200 (its bridge's MAC V at IPV,
which its certificate names) and the attacker's node 300 (its bridge's MAC A), both adjacent. Before 0062 the
first request for IPV crossed the overlay (0056: an address is answered only once its owner answered a request
flooded here); the attacker here also announces IPV and answers flooded requests for it, as 0056's tests do.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn import frb, garp
from evio.sdn.flow_actions import PacketOut
from evio.sdn.neighbor_answers import arp_reply
from evio.sdn.switch import BoundedFloodSwitch, PortKind, SwitchPort

H1, V, A = "02:00:00:00:00:01", "02:00:00:00:02:00", "02:00:00:00:03:00"
IP1, IPV = ipaddress.IPv4Address("10.9.0.1"), ipaddress.IPv4Address("10.9.0.2")
PEERS = (10, 11)


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


def flood_from(sw: BoundedFloodSwitch, inner: bytes, root: int, port: int, now: float) -> None:
    sw.packet_in(port, frb.pack(frb.broadcast(inner, root_nid=root, bound_nid=root, hop_count=1)), now=now)


def heard(sw: BoundedFloodSwitch, mac: str, root: int, port: int, now: float) -> None:
    """A broadcast from `mac` at node `root` (its host announcement, say) teaches the switch where `mac` is."""
    flood_from(sw, bytes.fromhex("ffffffffffff") + frb.parse_mac(mac) + b"\x88\xb6" + bytes(46), root, port, now)


def ask(sw: BoundedFloodSwitch, now: float) -> tuple[str | None, bool]:
    """H1 asks for IPV: the MAC the switch answered with (None: none), and whether the request crossed a tunnel."""
    actions = sw.packet_in(1, request(H1, IP1, IPV), now=now)
    crossed = any(isinstance(a, PacketOut) and a.port in PEERS for a in actions)
    replies = [garp.parse_arp(a.data) for a in actions if isinstance(a, PacketOut) and a.port == 1]
    return (replies[0].sender_mac if replies and replies[0] is not None else None), crossed


def test_the_first_request_for_a_certified_address_is_answered_here_and_crosses_no_tunnel() -> None:
    sw = switch()
    heard(sw, V, root=200, port=10, now=1)
    sw.neighbors.certified = {IPV: V}
    assert ask(sw, 2) == (V, False)
    assert sw.neighbors.answered == sw.neighbors.answered_certified == 1


def test_without_the_certificate_the_first_request_floods_as_in_0056() -> None:
    sw = switch()
    heard(sw, V, root=200, port=10, now=1)
    assert ask(sw, 2) == (None, True)


def test_an_attacker_claiming_the_victims_certified_address_is_never_answered_for() -> None:
    sw = switch()
    heard(sw, V, root=200, port=10, now=1)
    heard(sw, A, root=300, port=11, now=1)
    sw.neighbors.certified = {IPV: V}
    # Its gratuitous ARP for IPV, then its answer to every request of H1's that floods (none should).
    flood_from(sw, garp.gratuitous_arp(A, IPV), root=300, port=11, now=2)
    for t in range(3, 10):
        sw.packet_in(11, arp_reply(A, IPV, H1, IP1), now=t + 0.5)
        assert ask(sw, t) == (V, False)
    # Without the certificate's word the attacker's lone answer (the victim silent) would be confirmed and answered
    # for (0056's residual: a member may answer a flooded request whose owner is absent).
    sw.neighbors.certified = {}
    assert ask(sw, 20)[1]
    sw.packet_in(11, arp_reply(A, IPV, H1, IP1), now=20.1)
    assert ask(sw, 21) == (A, False)
    sw.neighbors.certified = {IPV: V}
    assert ask(sw, 22) == (V, False)


def test_a_certified_mac_not_live_here_floods_and_no_other_mac_answers_for_its_address() -> None:
    sw = switch()
    heard(sw, A, root=300, port=11, now=1)
    flood_from(sw, garp.gratuitous_arp(A, IPV), root=300, port=11, now=2)
    assert ask(sw, 3) == (None, True)
    sw.packet_in(11, arp_reply(A, IPV, H1, IP1), now=3.1)  # the attacker's answer confirms it for A (0056)
    sw.neighbors.certified = {IPV: V}  # V never heard here
    assert ask(sw, 4) == (None, True)
    heard(sw, V, root=200, port=10, now=5)
    assert ask(sw, 6) == (V, False)


def test_a_certified_mac_on_the_asking_port_is_not_answered_there() -> None:
    sw = switch()
    sw.neighbors.certified = {IPV: H1}  # the asker's own port: the LAN segment answers for itself
    sw.packet_in(1, garp.gratuitous_arp(H1, IP1), now=1)
    assert ask(sw, 2)[0] is None
