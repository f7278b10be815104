"""review21v1 finding 2: a member naming a member behind it as the root of its floods spends that member's flood share
at the node after the next one, and the member's own floods stop there.

The flood budget (0033, `flood_shares.FloodShares`, review21b) shares the floods passed on for one ingress port among
their roots, each root at most `FLOOD_RATE` (100 a second). The root is the FRB's word. A member may name any member
behind it on the ring as its floods' root (`frb_receive._plausible`); decision 0033's F6 amendments stop such copies
where the next node is the root's peer (`_detours_its_root`), and limit the MACs new there they can bring
(`_contested`, `CONTESTED_ROOT`), but a copy from a MAC already known is passed on within (its port, the named root)'s
share. Where the root's own floods reach the next node another way (a chord: Symphony's long links), that node keeps
the two apart, by port, and passes both on by the same port to the node after it, where they are one root's: the
forgeries take the root's share there, and the root's own floods are delivered there but go no further
(`FLOOD_LIMITED`).

Attack (10-node ring, chords ids[3]-ids[6] and ids[4]-ids[7], hostile A = ids[4], victim R = ids[3], behind A). R's
floods go 3 -> 6 -> 7 -> 8 -> 9 -> 0 ... A sends ids[7] broadcasts rooted at R (plausible: A lies on the arc from R to
ids[7]; R is no peer of ids[7]), all from one invented MAC, 200 a second (a fifth of A's packet-in budget there).
ids[7] passes A's on within (A's port, R), 100 a second, and R's own within (ids[6]'s port, R), both to ids[8], where
they share R's 100 a second.

Measured on main (fake network, real switch logic and flows, virtual clock, 3 s; the same with and without trust, and
with R's own MAC as the forgeries' source): of R's 30 broadcasts (10 a second) ids[7] and ids[8] got 30, ids[9] and
ids[0] 2 (30 `FLOOD_LIMITED` at ids[8]); A at 120 a second: 9 of 30; A at 1,000 a second: 4 of 30. A flooding as
much under its own root: 30 of 30 (below). Every kind of R's broadcast is cut past ids[8]: its host's ARP, DHCP
and ND, its signed host claims (0055: held 30 min, sent every 10, so its MACs can lapse there), its document floods' HAVEs (0043:
revocation), a named router's statements and RAs (0081).

Severity: medium (one member silences another member's floods for part of the overlay, from off the victim's path,
at a fraction of its own budget). Not 0033's F6 residual (the learning table, which `_contested` bounds): the flood
shares behind the node where the two ways meet. Suggested fix, at that node (ids[7]), which alone sees two ports bring
floods under one root: what it passes on under a root shares one budget across its ingress ports, the held way's
copies first (a contested way's copies pass on only from what the held way leaves, a reserve kept for it), so the
copies a forger adds cannot take the root's own share further on. Thinning a contested way outright (as
`CONTESTED_ROOT` does new MACs) would thin an honest root for up to a MAC's max age after its tree moved (0033's
"Honest cost").

Closed (decision 0033, amended): ids[7] passes a contested way's copies on only from what R's share on the held way
leaves (a reserve kept) and within the share a node after it gives R: 30 of 30 in every variant below.
"""

from __future__ import annotations

import pytest

from evio.sdn import frb
from evio.sdn.switch import Drop
from evio.testing.fake_flow_table import FakeNetwork, host_mac, ring_network
from evio.testing.frames import arp_request, eth
from evio.testing.host_claims import Announcer
from tests.unit.sdn.test_review21_flood_roots import told_members
from tests.unit.sdn.test_sdn_port_bounds import BROADCAST, forged
from tests.unit.sdn.test_sdn_proactive_flows import certify

INVENTED = "02:66:00:00:00:01"
EXPERIMENTAL = 0x88B7  # a broadcast type no guard or node acts on


def chorded_ring(trusted: bool = True) -> tuple[FakeNetwork, list[int]]:
    """A 10-ring with chords ids[3]-ids[6] and ids[4]-ids[7], the members told to every switch; `trusted`: the
    members' host claims (0055) and certified addresses (0062) told too."""
    net, ids = ring_network(10)
    net.connect(ids[3], ids[6])
    net.connect(ids[4], ids[7])
    for nid in ids:
        net.inject(nid, 1, arp_request(host_mac(net, nid)))
    if trusted:
        Announcer().announce(net, ids)
        certify(net, ids)
    told_members(net, ids)
    net.advance(0.5)
    return net, ids


def roots_broadcasts_past(
    named_root: bool, rate: float = 200.0, seconds: float = 3.0, trusted: bool = True, others_rate: float = 0.0
) -> tuple[int, int, int]:
    """A = ids[4] floods ids[7] at `rate` from one invented MAC, rooted at R = ids[3] (`named_root`) or at itself;
    R's host broadcasts 10 a second, and the hosts of ids[1], ids[2], ids[5], ids[6] and ids[7] `others_rate` each.
    Returns (R's broadcasts sent, arrived at ids[9]'s host, FLOOD_LIMITED at ids[8])."""
    net, ids = chorded_ring(trusted)
    r, a, p, c = ids[3], ids[4], ids[7], ids[9]
    others = [ids[1], ids[2], ids[5], ids[6], ids[7]]
    rmac = host_mac(net, r)
    root = r if named_root else a
    start, t0, sent = len(net.nodes[c].received[1]), net.now + 1, 0
    for i in range(int(seconds * rate)):
        net.now = t0 + i / rate
        junk = eth(BROADCAST, INVENTED, EXPERIMENTAL, payload=i.to_bytes(4, "big") + b"f" * 42)
        net.from_neighbour(p, a, forged(junk, root, root, hops=2 if named_root else 1))
        if i % int(rate / 10) == 0:
            sent += 1
            net.inject(r, 1, eth(BROADCAST, rmac, EXPERIMENTAL, payload=b"R" + sent.to_bytes(4, "big") + b"r" * 41))
        if others_rate and i % int(rate / others_rate) == 1:
            for other in others:
                net.inject(other, 1, eth(BROADCAST, host_mac(net, other), EXPERIMENTAL, payload=b"O" * 46))
    mine = frb.parse_mac(rmac)
    arrived = sum(1 for f in net.nodes[c].received[1][start:] if f[6:12] == mine and f[14:15] == b"R")
    return sent, arrived, net.nodes[ids[8]].switch.drops[Drop.FLOOD_LIMITED]


def test_a_member_flooding_under_its_own_root_leaves_the_others_floods_whole() -> None:
    sent, arrived, limited = roots_broadcasts_past(named_root=False)
    print(f"A's 200/s under its own root: R's broadcasts at ids[9] {arrived}/{sent}, FLOOD_LIMITED at ids[8] {limited}")
    assert arrived == sent


@pytest.mark.parametrize(("rate", "trusted"), [(200.0, True), (120.0, True), (1000.0, True), (200.0, False),
                                               (1000.0, False)])
def test_a_member_naming_the_root_behind_it_does_not_silence_that_roots_floods_further_on(
    rate: float, trusted: bool
) -> None:
    """ids[7] passes A's copies on only from what R's share on its held way (ids[6]'s port) leaves: what it passes on
    under R stays within one root's share, and ids[8]'s share for R, spent by the same copies, keeps room for R's."""
    sent, arrived, limited = roots_broadcasts_past(named_root=True, rate=rate, trusted=trusted)
    print(f"A's {rate:.0f}/s rooted at R ({'trust' if trusted else 'no trust'}): R's broadcasts at ids[9] "
          f"{arrived}/{sent}, FLOOD_LIMITED at ids[8] {limited}")
    assert arrived == sent
    assert limited == 0  # ids[7] sends ids[8] no more under R than R's share there


def test_the_forgers_copies_leave_room_for_the_roots_where_more_roots_share_the_next_nodes_port() -> None:
    """Five more members' hosts broadcast 10 a second: ids[8] shares its port from ids[7] among seven roots (57 a
    second each), ids[7] its port from ids[6] among four (100). Passing A's copies on from R's share on the held way
    alone let 24 of 30 of R's through; ids[7] also keeps them within the share a node after it gives R (the roots
    active here, and its own)."""
    sent, arrived, limited = roots_broadcasts_past(named_root=True, others_rate=10.0)
    print(f"A's 200/s rooted at R, 5 more roots at 10/s: R's broadcasts at ids[9] {arrived}/{sent}, "
          f"FLOOD_LIMITED at ids[8] {limited}")
    assert arrived == sent
