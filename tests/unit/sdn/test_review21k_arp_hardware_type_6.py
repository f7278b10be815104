"""Review21k K3: ARP with hardware type 6 (IEEE 802) carries "V's certified address is at A's MAC" past the ARP
guard (decision 0068) to a node's interface: review21i I3 again.

Attack (a hostile member, attacker a): the ARP guard recognises ARP only as Ethernet/IPv4 with hardware type 1:
`garp.parse_arp` returns None for any other `htype`, so `neighbor_answers.parse` gives no message and
`switch.guard_allows` passes the frame; OVS likewise reads `arp_spa`/`arp_sha`/`arp_op` only when `ar_hrd` is 1
(lib/flow.c), so the table-0 guard flow `arp, arp_spa=<V's address>` never matches it and, since 0066, the unicast
flow installed ahead `(A's port, A's MAC, u's MAC) -> LOCAL` carries it with 0 packet-ins. Linux's `arp_process`
accepts hardware type 1 *or* 6 on an Ethernet device (RFC 2625). Member A sends u's interface "who has 10.7.0.1
(u), tell 10.7.0.3 (V's certified address) at A's MAC" with `htype` 6; u's kernel takes 10.7.0.3 at A's MAC and
sends V's IPv4 traffic to A (a man in the middle between two members' interfaces). A gratuitous ARP flooded in
A's FRBs does the same at every node (the FRB inner frame goes through the same `guard_allows`).

Measured (fake network, real switch logic, trust mode): both the unicast request and the flooded announcement
with `htype` 6 reach u's interface, 0 CERTIFIED_ADDRESS_SPOOFED drops (with `htype` 1: dropped, counted). (The
fake flow table reads `arp_spa` whatever the hardware type, so here the frame goes to the controller, which passes
it; real OVS does not even ask.) Checked on this machine's kernel: a namespace's veth holding 10.7.0.1 sent this
very request (htype 6) took `10.7.0.3 lladdr <A's MAC> STALE`.

Impact: high, as I3: one member takes another member's certified IPv4 address at any node it reaches.

Suggested fix: in `parse_arp` (or the guard's own reading) accept `htype` 6 as Ethernet, as Linux does, so the
guard checks it; and add a table-0 flow from tunnel ports for ARP that OVS could not read (`arp, arp_op=0`: OVS
leaves every ARP field 0 for a hardware type other than 1) to the controller or to a drop, above the unicast flows,
so it rides no flow past the check. Fix the fake flow table's `_guard_fields` to read ARP fields only for htype 1.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from evio.sdn import frb
from evio.sdn.switch import Drop
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring

IEEE802 = 6  # ARPHRD_IEEE802: Linux takes it on an Ethernet device like 1 (ARPHRD_ETHER)


def arp(dst: str, src: str, op: int, sender_ip: str, target_mac: str, target_ip: str, htype: int) -> bytes:
    return struct.pack("!6s6sHHHBBH6s4s6s4s", frb.parse_mac(dst), frb.parse_mac(src), 0x0806, htype, 0x0800, 6, 4,
                       op, frb.parse_mac(src), ipaddress.IPv4Address(sender_ip).packed, frb.parse_mac(target_mac),
                       ipaddress.IPv4Address(target_ip).packed).ljust(60, b"\x00")  # fmt: skip


@pytest.mark.parametrize("how", ["unicast", "flooded"])
def test_arp_of_hardware_type_6_for_a_certified_address_does_not_reach_the_interface(how: str) -> None:
    net, ids, macs, _ = trusted_ring(4)
    u, a, v = ids[0], ids[1], ids[2]
    assert net.nodes[u].switch.neighbors.certified[ipaddress.IPv4Address("10.7.0.3")] == macs[v]
    heard = len(net.nodes[u].received[1])
    if how == "unicast":  # "who has u's address, tell V's address at A's MAC", to u's interface over A's tunnel
        forged = arp(macs[u], macs[a], 1, "10.7.0.3", "00:00:00:00:00:00", "10.7.0.1", IEEE802)
        net.from_neighbour(u, a, forged)
    else:  # a gratuitous request to all from A's host, carried in A's FRBs
        forged = arp("ff:ff:ff:ff:ff:ff", macs[a], 1, "10.7.0.3", "00:00:00:00:00:00", "10.7.0.3", IEEE802)
        net.inject(a, 1, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    spoofed = sum(net.nodes[n].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] for n in ids)
    print(f"ARP (htype 6, {how}) naming V's address at A's MAC delivered to u's interface: {delivered}, "
          f"CERTIFIED_ADDRESS_SPOOFED drops: {spoofed}")
    assert not delivered
