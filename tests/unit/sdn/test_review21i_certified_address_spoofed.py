"""Review21i I3: a member tells a node's own interface, by unicast ARP, that another member's certified address is
at the member's MAC; the switch delivers it, since 0066 by a flow that never asks the controller.

Attack (a hostile member, attacker a): in trust mode each member's overlay address is certified by the CA with its
interface MAC (decision 0062), and the switch answers local ARP for it with that MAC and "never with another".
But nothing looks at what a peer sends a local host by unicast. Member A, adjacent to node u, sends u's interface
(its MAC is in every announcement) an ARP request "who has 10.7.0.1 (u), tell 10.7.0.3 (V's certified address)
at A's MAC", or an unsolicited reply saying the same. Linux takes the sender's address from a request for its own
address at once, and from a reply once its entry is a second old (`locktime`): u's kernel then sends V's IP
traffic to A, which reads it and may pass it on (a man in the middle between two members' interfaces). Since
0066 the way back `(A's port, A's MAC, u's interface) -> LOCAL` is installed ahead with no idle timeout, so the
frame rides a flow: 0 packet-ins, the controller never sees it. Without the flow it reaches the controller and
is delivered all the same (`_peer_frame_in`: ARP from a peer is only observed).

Measured (fake network, real switch logic): both forged frames delivered to u's interface, 0 packet-ins.

Suggested fix: ARP and ND from tunnel ports reach the controller (a higher-priority rule by ethertype, or the
flows installed ahead match IPv4/IPv6 only), and a frame whose sender address is certified for another MAC
(`neighbors.certified`) is dropped and counted (`Drop.CERTIFIED_ADDRESS_SPOOFED`, say).

Closed by the ARP guard (decision 0068, evio/sdn/neighbor_guard.py): table 0 lets a certified address's true
(address, MAC) pair on to switching and sends any other ARP naming it to the controller, which drops it and counts.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb
from tests.unit.sdn.test_sdn_proactive_flows import packet_ins, trusted_ring


def arp(dst: str, src: str, op: int, sender_ip: str, target_mac: str, target_ip: str) -> bytes:
    return struct.pack("!6s6sHHHBBH6s4s6s4s", frb.parse_mac(dst), frb.parse_mac(src), 0x0806, 1, 0x0800, 6, 4, op,
                       frb.parse_mac(src), ipaddress.IPv4Address(sender_ip).packed, frb.parse_mac(target_mac),
                       ipaddress.IPv4Address(target_ip).packed).ljust(60, b"\x00")  # fmt: skip


@pytest.mark.parametrize("op", [1, 2], ids=["request", "reply"])
def test_a_members_arp_naming_another_members_certified_address_does_not_reach_the_interface(op: int) -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, v = ids[0], ids[1], ids[2]
    certified = net.nodes[u].switch.neighbors.certified
    assert certified[ipaddress.IPv4Address("10.7.0.3")] == macs[v]  # V's address, V's MAC, as the CA says
    asked_before, heard_before = packet_ins(net)[u], len(net.nodes[u].received[1])
    forged = arp(macs[u], macs[a], op, "10.7.0.3", macs[u], "10.7.0.1")  # "10.7.0.3 is at A's MAC"
    net.from_neighbour(u, a, forged)
    delivered = forged in net.nodes[u].received[1][heard_before:]
    print(f"forged ARP {'request' if op == 1 else 'reply'} delivered to u's interface: {delivered}, "
          f"packet-ins at u: {packet_ins(net)[u] - asked_before}")
    assert not delivered
