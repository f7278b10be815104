"""Review21m M1: a member's unicast neighbour advertisement (or solicitation) for another member's certified IPv6
address, at the attacker's MAC, rides a flow to a node's interface past the ND guard.

Attack (a hostile member A, victim member V, target node u; trust mode, V's bridge address fd00::3 certified by the
CA, 0062):
1. A's host sends one NA to u's interface MAC, unicast, flags solicited+override, target fd00::3, target
   link-layer option A's MAC (or an NS from fd00::3 with source link-layer option A's MAC).
2. At u's switch the frame matches a flow installed ahead: 0066's way back `(P, A's MAC, u's MAC) -> leaf`, and
   0072's `eth_dst=<u's MAC> -> leaf` (any source). Table 0 has guard flows for certified *IPv4* addresses
   (`neighbor_guard.guard_flows`: `arp_spa`) and for named routers' bound link-local addresses
   (`router_addresses.flows`: `ipv6_src`, `ipv6_nd_target`), none for certified IPv6 addresses. So the frame
   never reaches `switch.guard_allows` (where `spoofs_certified` would drop it, as it does the flooded NA: K6's
   test) and is delivered to u's interface with 0 packet-ins.
3. u's kernel, holding an entry for fd00::3 (it talked to V), overrides it to A's MAC (Linux `ndisc_recv_na`:
   override flag set, the review21k K6 test checked the same frame's effect on this kernel; an NS creates or
   updates the entry for its source too). u's IPv6 traffic for V now goes to A; A answers u's unreachability
   probes (unicast NS to A's MAC) with the same NA and keeps it. A repeats per node to take V's IPv6 traffic
   overlay-wide.

Code path: `neighbor_guard.guard_flows` (IPv4 only) / `router_addresses.flows` (bound router addresses only) ->
table 1's flows ahead (`proactive_flows.wanted_flows`, `destination_flows.wanted_destination_flows`) ->
u's LOCAL/leaf port. Decision 0068 lists this as a follow-up ("A unicast neighbour advertisement ... for a
member's certified IPv6 address ... still rides a unicast flow"), review21k pinned the flooded variant only, and
K7's fix built exactly this guard for router addresses but not for certified ones.

Impact: high on the issue's scale (a member takes over another member's traffic: V's IPv6 at every node A
targets), one frame per node, no position needed beyond membership, nothing counted.

Suggested fix: do for certified IPv6 addresses what `router_addresses.flows` does for bound ones: table-0 flows
`icmpv6_type=135, ipv6_src=<addr>` and `icmpv6_type=136, ipv6_nd_target=<addr>` to the controller (optionally a
pass flow for the owner's true pair by `eth_src` and `nd_sll`/`nd_tll`, as the ARP pair flows do), bounded by
`MAX_GUARDED`, so `guard_allows` judges every ND message naming a certified address.
"""

from __future__ import annotations

import ipaddress
import struct

from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_review21k_router_link_local_taken import _SOURCE_LL, nd_frame, neighbor_advert
from tests.unit.sdn.test_sdn_proactive_flows import trusted_ring


def _setup() -> tuple[FakeNetwork, list[int], dict[int, str]]:
    net, ids, macs, _ = trusted_ring(6)
    _certify_v6(net, ids, macs)  # V = ids[2] is fd00::3
    net.advance(0.5)  # a tick: whatever the certified set changes in table 0 goes in
    return net, ids, macs


def test_a_unicast_advertisement_for_a_certified_ipv6_address_is_judged() -> None:
    net, ids, macs = _setup()
    u, a = ids[0], ids[1]
    ins = net.nodes[u].packet_ins
    heard = len(net.nodes[u].received[1])
    forged = neighbor_advert(macs[a], macs[u], V6.format(3), macs[a], solicited=True)  # "fd00::3 is at A's MAC"
    net.inject(a, 1, forged)
    delivered = forged in net.nodes[u].received[1][heard:]
    drops = net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED]
    print(f"A's unicast NA for V's fd00::3 at A's MAC: delivered to u={delivered}, packet-ins at u="
          f"{net.nodes[u].packet_ins - ins}, CERTIFIED_ADDRESS_SPOOFED at u={drops}")
    assert not delivered
    assert drops == 1


def test_a_unicast_solicitation_from_a_certified_ipv6_address_is_judged() -> None:
    net, ids, macs = _setup()
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    body = struct.pack("!I16s", 0, ipaddress.IPv6Address(V6.format(1)).packed)  # "who has fd00::1 (u)", from V's
    forged = nd_frame(135, macs[a], macs[u], V6.format(3), V6.format(1), body, (_SOURCE_LL, macs[a]))
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] == 1


def test_the_same_advertisement_flooded_is_dropped() -> None:
    # The control: the guard itself judges the message right when it sees it (review21k K6's fix).
    net, ids, macs = _setup()
    u, a = ids[0], ids[1]
    heard = len(net.nodes[u].received[1])
    forged = neighbor_advert(macs[a], "33:33:00:00:00:01", V6.format(3), macs[a], solicited=False)
    net.inject(a, 1, forged)
    assert forged not in net.nodes[u].received[1][heard:]
    assert net.nodes[u].switch.drops[Drop.CERTIFIED_ADDRESS_SPOOFED] >= 1
