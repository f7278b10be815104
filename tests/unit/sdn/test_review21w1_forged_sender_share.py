"""review21w1 finding 1: a member forges the MAC of another member V whose way to a node X runs through the tunnel
from T (V's interface MAC, or T's own hosts' MACs beside its interface), rides decision 0072's flows ahead through
T's switch past T's controller, and spends V's (or T's) share of X's unicast packet-ins on T's port (0082): V's
neighbour advertisements for its certified IPv6 address are dropped at X. The attacker is on nobody's way.

0082 shares a tunnel port's unicast packet-ins among the senders the switch vouches for (`_unicast_sender`): a
source MAC counts as its owner's (`mac_owners`) if it came by the owner's own link or by the port learning places it
on under the owner. Its written residual: "a member forging the MAC of another member behind the same tunnel spends
that member's share there (a relay on its way could drop its frames anyway)". The attacker here is no relay on the
victim's way: V (or T itself) reaches X over T's tunnel, the attacker reaches T over a tunnel of its own, and T's
switch forwards the forgeries by destination whatever their source; only T's own interface MAC is stopped there
(table 1's `OWN_SOURCE` flow).

Attack A, another member's interface MAC (trust mode, certified IPv4 and IPv6 addresses; a 6-node ring with a chord
ids[4]-ids[0]; X = ids[1], T = ids[0], V = ids[5], T's neighbour, whose MAC X learned on T's port under V; hostile
H = ids[4], which reaches T by the chord): H sends, at T, unicast neighbour solicitations from T's own certified
address fd00::1, Ethernet source V's interface MAC, to ids[2]'s certified MAC.
1. At T, table 0 has no flow for an NS from T's own address (T's guards are for the others' certified addresses; its
   own only for NAs), and no flow by source for V's MAC, so 0072's flow ahead `eth_dst=<ids[2]> -> output,
   CONTROLLER` forwards the NS to X at line rate; T's controller sees the copies (H's port, nobody's share there)
   and refuses to move V's MAC, but the frames went on already.
2. At X, table 0 sends every NS from a certified IPv6 address to the controller, pair flow or not. It comes by T's
   port with V's MAC, which X places there under V: charged to V's share (half the port's unicast budget), then
   dropped as `CERTIFIED_ADDRESS_SPOOFED` (fd00::1 is T's). V's share spent, V's own checked unicasts at X (its
   NAs for its address, its NS and RS from it, its signed documents' unicasts to X, 0043, which X's daemon also
   charges to V's document share) are refused (`UNICAST_LIMITED`) and lost.

Attack B, T's own hosted MAC (6-node ring, T = ids[0] announced a second MAC, a VM on a leaf port, beside its
interface; X = ids[1]; hostile H = ids[5], T's other neighbour): the same NS with Ethernet source T's VM's MAC spends
T's own share at X, and T's NAs for fd00::1 are dropped there.

Measured (fake network, real switch logic and flows, virtual clock; budgets scaled tenfold as in 0082's tests: 100/s,
burst 200; the victim's host sends X's interface a solicited NA for its address ten times a second, 3 s; load 1.5-3):
- A: no storm 30 of 30 of V's NAs arrive; H at 200/s: 7 of 30, 381 `UNICAST_LIMITED` and 242
  `CERTIFIED_ADDRESS_SPOOFED` at X, nothing refused at T.
- B: no storm 30 of 30 of T's NAs; H's NS from invented sources at 200/s: 30 of 30 (nobody's share pays, 351
  `UNICAST_LIMITED` at X); from T's VM's MAC at 100/s (the per-port rate): 17 of 30; at 200/s: 7 of 30, 381 and 242.
- A as a signed documents' unicast (0x88B5) to X's interface: X hands it to its daemon as V's (by T's tunnel), 0
  packet-ins at T.
Unscaled the victim's share is 500/s, and the forgeries cost H nothing but its own line rate.

Impact: H, on no one's way, silences a member's IPv6 neighbour discovery at X (X's kernel cannot confirm the
member's address: its entry fails and its IPv6 traffic to the member stops while H storms) and that member's
document unicasts (revocation lists, 0043) to X. Any member V whose floods reach X by T's tunnel is exposed to any
member with a tunnel to T; T itself once it announces a MAC beside its interface's (an attached port, 0046).
Severity: medium (one member crowding out another's signaling at a third node), worse than 0082's written residual:
the attacker is no relay on the victim's way.

Suggested fix: the switch that knows better is T, where the forgery enters: a frame from a tunnel port whose source
is a MAC learning does not place on that port (another member's, this node's own hosts') must not ride a flow ahead
past T's controller, e.g. flows ahead installed per (in_port of the MAC's place, eth_dst) for owned MACs, or table-0
flows sending an owned MAC's frames from any other tunnel port to the controller (one per owned MAC, as
`OWN_SOURCE` does for the interface's, bounded as the flows ahead are); 0034 refuses the move at T's controller,
but 0072's flows carry the frame on first. Besides, at X, a check that refuses a frame for its spoofed MAC could be
charged to the member whose MAC it turned out not to be only after it passed (judge first, charge the vouched
sender only for what passed), so a forgery spends nobody's share.
"""

from __future__ import annotations

import ipaddress
import random
import struct

import pytest

from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import arp_request, eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_review21k_nd_behind_extension_header import V6, _certify_v6
from tests.unit.sdn.test_review21k_router_link_local_taken import _SOURCE_LL, nd_frame, neighbor_advert
from tests.unit.sdn.test_review21u_transit_copies_budget import PACKET_IN_RATE, scale_packet_in_budgets
from tests.unit.sdn.test_sdn_proactive_flows import certify, trusted_ring

VM = "02:aa:00:00:00:07"  # a MAC T announced beside its interface's: a VM on one of its leaf ports


def storm(rate: float, source: str | None, seconds: float = 3.0) -> dict[str, int]:
    """H = ids[5] sends at T = ids[0], `rate` a second, unicast NSs from T's fd00::1 to ids[2]'s certified MAC with
    Ethernet source `source` ("vm": T's VM's MAC; "invented": a new MAC each; None: no storm), while T's host sends X
    = ids[1]'s interface a solicited NA for fd00::1 ten times a second."""
    net: FakeNetwork
    net, ids, macs, announcer = trusted_ring(6)
    told_members(net, ids)
    _certify_v6(net, ids, macs)  # fd00::i is ids[i - 1]'s
    t, x, h = ids[0], ids[1], ids[5]
    announcer.announce(net, ids, extra={t: [VM]})
    net.advance(0.5)
    for nid in ids:
        scale_packet_in_budgets(net.nodes[nid].switch, PACKET_IN_RATE)
    rng = random.Random(3)
    start, t0, sent = len(net.nodes[x].received[1]), net.now + 1, 0
    asks = struct.pack("!I16s", 0, ipaddress.IPv6Address(V6.format(3)).packed)
    for i in range(int(seconds * rate)):
        net.now = t0 + i / rate
        if source is not None:
            src = VM if source == "vm" else "02:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
            net.from_neighbour(t, h, nd_frame(135, src, macs[ids[2]], V6.format(1), V6.format(3), asks,
                                              (_SOURCE_LL, src)))
        if i % int(rate / 10) == 0:
            sent += 1
            net.inject(t, 1, neighbor_advert(macs[t], macs[x], V6.format(1), macs[t], solicited=True))
    t_mac = bytes.fromhex(macs[t].replace(":", ""))
    arrived = sum(1 for f in net.nodes[x].received[1][start:] if f[6:12] == t_mac and f[12:14] == b"\x86\xdd")
    at_x = net.nodes[x].switch.drops
    return {"nas_sent": sent, "nas_arrived": arrived, "unicast_limited_at_x": at_x[Drop.UNICAST_LIMITED],
            "spoofed_at_x": at_x[Drop.CERTIFIED_ADDRESS_SPOOFED]}


def test_without_a_storm_ts_advertisements_reach_x() -> None:
    r = storm(2 * PACKET_IN_RATE, None)
    print(f"no storm: {r}")
    assert r["nas_arrived"] == r["nas_sent"] == 30


def test_a_storm_from_invented_sources_leaves_ts_advertisements_whole() -> None:
    """The honest case 0082 made: invented sources spend nobody's share, T's stays whole."""
    r = storm(2 * PACKET_IN_RATE, "invented")
    print(f"invented sources at {2 * PACKET_IN_RATE:.0f}/s: {r}")
    assert r["nas_arrived"] == r["nas_sent"]
    assert r["unicast_limited_at_x"] > 0


@pytest.mark.xfail(strict=True, reason="review21w1 finding 1: a member forging a MAC T hosts spends T's unicast share "
                                       "at T's neighbour through 0072's flows ahead; T's NAs are dropped there")
def test_a_storm_from_a_mac_t_hosts_leaves_ts_advertisements_whole() -> None:
    r = storm(2 * PACKET_IN_RATE, "vm")
    print(f"T's VM's MAC at {2 * PACKET_IN_RATE:.0f}/s: {r}")
    assert r["nas_arrived"] == r["nas_sent"]


def through_a_chord(storm: bool) -> dict[str, int]:
    """Attack A: H = ids[4] reaches T = ids[0] by a chord and sends, at 200/s, NSs from T's fd00::1 with V = ids[5]'s
    interface MAC as their source (`storm`), while V's host sends X = ids[1]'s interface a solicited NA for fd00::6
    ten times a second; V's way to X runs through T, H's does not run through V."""
    net, ids = ring_network(6)
    net.connect(ids[4], ids[0])
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    Announcer().announce(net, ids)
    macs = certify(net, ids)
    told_members(net, ids)
    _certify_v6(net, ids, macs)
    net.advance(0.5)
    t, x, v, h = ids[0], ids[1], ids[5], ids[4]
    sx, by_t = net.nodes[x].switch, net.port_towards(x, t)
    assert sx._unicast_sender(macs[v], by_t, net.now) == v  # X places V's MAC on T's port under V
    for nid in ids:
        scale_packet_in_budgets(net.nodes[nid].switch, PACKET_IN_RATE)
    rate = 2 * PACKET_IN_RATE
    start, t0, sent = len(net.nodes[x].received[1]), net.now + 1, 0
    asks = struct.pack("!I16s", 0, ipaddress.IPv6Address(V6.format(3)).packed)
    for i in range(int(3 * rate)):
        net.now = t0 + i / rate
        if storm:
            net.from_neighbour(t, h, nd_frame(135, macs[v], macs[ids[2]], V6.format(1), V6.format(3), asks,
                                              (_SOURCE_LL, macs[v])))
        if i % int(rate / 10) == 0:
            sent += 1
            net.inject(v, 1, neighbor_advert(macs[v], macs[x], V6.format(6), macs[v], solicited=True))
    v_mac = bytes.fromhex(macs[v].replace(":", ""))
    arrived = sum(1 for f in net.nodes[x].received[1][start:] if f[6:12] == v_mac and f[12:14] == b"\x86\xdd"
                  and f[54] == 136)
    return {"nas_sent": sent, "nas_arrived": arrived, "unicast_limited_at_x": sx.drops[Drop.UNICAST_LIMITED],
            "spoofed_at_x": sx.drops[Drop.CERTIFIED_ADDRESS_SPOOFED],
            "unicast_limited_at_t": net.nodes[t].switch.drops[Drop.UNICAST_LIMITED]}


def test_without_a_storm_vs_advertisements_reach_x_through_t() -> None:
    r = through_a_chord(storm=False)
    print(f"no storm: {r}")
    assert r["nas_arrived"] == r["nas_sent"] == 30


@pytest.mark.xfail(strict=True, reason="review21w1 finding 1: a member forging V's MAC through T spends V's unicast "
                                       "share at X (0082) from off V's way; V's NAs are dropped there")
def test_a_storm_in_vs_name_through_t_leaves_vs_advertisements_whole() -> None:
    r = through_a_chord(storm=True)
    print(f"H's NSs with V's MAC at {2 * PACKET_IN_RATE:.0f}/s: {r}")
    assert r["nas_arrived"] == r["nas_sent"]


@pytest.mark.xfail(strict=True, reason="review21w1 finding 1: a signed documents' unicast H forges in V's name through "
                                       "T is handed to X's daemon as V's (0043's share of V's checks)")
def test_a_document_unicast_in_vs_name_through_t_is_not_counted_as_vs() -> None:
    """The same forgery of V's MAC, as a unicast of the signed documents' flood (0x88B5) to X's interface: T's table 0
    has a flow only for its own MACs, so the flow ahead carries it; X's table 0 brings it to the controller, which
    hands it to the daemon as sent by V (`DocumentUnicast.sender`), whose document flood charges its check to V's
    share (decision 0043 amended for review21r)."""
    net, ids = ring_network(6)
    net.connect(ids[4], ids[0])
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    Announcer().announce(net, ids)
    macs = certify(net, ids)
    told_members(net, ids)
    net.advance(0.5)
    t, x, v, h = ids[0], ids[1], ids[5], ids[4]
    handed = net.nodes[x].switch.document_unicasts
    before = len(list(handed))
    net.from_neighbour(t, h, eth(macs[x], macs[v], 0x88B5, payload=b"junk" * 20))
    got = list(handed)[before:]
    print(f"handed to X's daemon: {[(d.peer == t, d.sender == v) for d in got]} (by T's tunnel, as V's)")
    assert len(got) == 1
    assert got[0].sender != v
