"""Review21m M3: a router solicitation from another member's certified IPv6 address, with the attacker's MAC in its
source link-layer option, passes the guard and moves that address to the attacker at every node that forwards
IPv6 (the named router above all).

Attack (a hostile member A; victim member V, certified fd00::3 (0062); trust mode; R named in `ipv6_routers`, its
bridge interface forwarding IPv6, which is why it is named):
1. A's host floods one RS (ICMPv6 133) to ff02::2 (all routers), IPv6 source fd00::3, source link-layer option
   A's MAC, Ethernet source A's own MAC (its FRBs are its own: root A, nothing forged at layer 2).
2. Every switch: `switch.guard_allows` judges ARP and `neighbor_guard.NEIGHBOR_TYPES` = (135, 136) against the
   certified addresses; an RS (133) is in neither, nor in `router_addresses.CLAIM_TYPES`' check unless its source
   is a bound router address. The frame reaches every node's interface, 0 drops. Sent unicast to R's MAC it rides
   the flows ahead (0066/0072) with 0 packet-ins.
3. A kernel forwarding IPv6 on that interface (`ndisc_recv_rs`: only when forwarding) creates or overrides its
   entry for the RS's source with the option's MAC: R's entry for fd00::3 moves to A, and what R routes to V (the
   traffic it was named to carry into the overlay) goes to A. Checked on this machine's kernel: a namespace with
   forwarding=1 and `fd00::3 lladdr 02:00:00:00:00:03 STALE` received this very RS and showed
   `fd00::3 lladdr 02:00:00:00:00:0a STALE` (A's MAC). The same holds at any node whose bridge interface forwards
   IPv6 (a container or Kubernetes host), and at attached routers behind leaf ports.

Code path: `frb_receive.frb_in` / `switch.packet_in` -> `switch.guard_allows`: `kind in NEIGHBOR_TYPES` is False
for 133 -> delivered; unicast: `proactive_flows` / `destination_flows` flows, no table-0 guard flow.

Impact and severity: high (a member takes over another member's certified IPv6 traffic at the overlay's IPv6
router with one flooded frame; no position), conditional on a node forwarding IPv6 on its bridge interface, which
is what naming a router in `ipv6_routers` is for.

Suggested fix: judge an RS like an NS (`neighbor_answers.parse` reads its source and source link-layer option;
`spoofs_certified` then applies; a source `::` carries no option and is not judged), and add 133 to the table-0
flows for certified IPv6 addresses that M1 asks for (`icmpv6_type=133, ipv6_src=<addr>` to the controller), as
`router_addresses.flows` already does for bound router addresses.
"""

from __future__ import annotations

import struct

from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_review21k_router_link_local_taken import _SOURCE_LL, _named, nd_frame
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(6)
    _certify_v6(net, ids, macs)  # V = ids[2] is fd00::3
    _named(net, ids, ids[3])  # R
    net.advance(0.5)
    return net, ids, macs


def solicitation(eth_src: str, eth_dst: str, source: str, lladdr: str) -> bytes:
    """An RS from `source` to all routers, its source link-layer option `lladdr`."""
    return nd_frame(133, eth_src, eth_dst, source, "ff02::2", struct.pack("!I", 0), (_SOURCE_LL, lladdr))


def test_a_flooded_solicitation_from_a_certified_address_at_another_mac_reaches_no_router() -> None:
    net, ids, macs = _setup()
    a, v, r = ids[1], ids[2], ids[3]
    heard = len(net.nodes[r].received[1])
    forged = solicitation(macs[a], "33:33:00:00:00:02", V6.format(3), macs[a])
    net.inject(a, 1, forged)
    delivered = forged in net.nodes[r].received[1][heard:]
    drops = sum(net.nodes[n].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] for n in ids if n not in (a, v))
    print(f"A's RS from V's fd00::3 at A's MAC delivered to R's interface: {delivered}; "
          f"CERTIFIED_ADDRESS_SPOOFED at the others: {drops}")
    assert not delivered
    assert drops >= 1


def test_a_unicast_solicitation_from_a_certified_address_at_another_mac_reaches_no_router() -> None:
    net, ids, macs = _setup()
    a, r = ids[1], ids[3]
    heard = len(net.nodes[r].received[1])
    forged = solicitation(macs[a], macs[r], V6.format(3), macs[a])
    net.inject(a, 1, forged)
    assert forged not in net.nodes[r].received[1][heard:]


def test_the_owners_own_solicitation_still_reaches_the_router() -> None:
    net, ids, macs = _setup()
    v, r = ids[2], ids[3]
    heard = len(net.nodes[r].received[1])
    honest = solicitation(macs[v], "33:33:00:00:00:02", V6.format(3), macs[v])
    net.inject(v, 1, honest)
    assert honest in net.nodes[r].received[1][heard:]
