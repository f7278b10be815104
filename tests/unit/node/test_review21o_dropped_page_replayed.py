"""Review21o O1: a member replays another member's old host-claims page, one that member no longer sends, and a host
that moved away from it is nobody's again at every node the replay reaches.

Attack (trust mode, host claims, decision 0055/0059; `tests/unit/node/test_host_claims_flood.py`'s fleet): member V
hosted more than `MAX_MACS` (64) MACs, so its list went in two pages, page 1 naming host H. H then moved to member
W's site: V's list shrank to one page (its page 0 with `pages=1` deletes page 1 at every receiver) and W names H;
once W was H's only claimant for `ALONE_HOLD` (600 s), every node holds H for W. A member A kept V's signed page 1
(every node receives it: it is flooded) and sends it, unchanged, to a node U's bridge MAC (a unicast is taken:
`HostClaimsFlood.receive` with no ingress, the catch-up's way). U holds no page 1 of V (`claims.issued_ms(V, 1)` is
None), so nothing compares it with V's newer page 0 that said the list has one page: it is checked (V's own
certificate and signature: it is V's), taken, and H is named by V and W again. Two holders naming a MAC hold nothing
(`HostClaims._holder`): H is disputed and leaves `owners` at U.

Code path: `HostClaimsFlood.receive` -> `self.claims.issued_ms(node_id, page)` (None for a dropped page) ->
`host_claims.check` -> `HostClaims.take` (deletes pages >= `ann.pages` only when taking a *newer* announcement; an
older page beyond the newest's `pages` is kept) -> `HostClaims.owners`.

Impact: medium (a chosen host of a chosen member, bounded, under a condition). H is unheld at every node A replays
to, one frame each, for as long as the old page is within `LIFETIME` (1800 s after V issued it; each of V's refreshes,
every 600 s, deletes it again and A sends it again). An unheld MAC is learning's (decision 0034) again: measured
with the real switches (`trusted_ring(6)` of tests/unit/sdn/test_sdn_proactive_flows.py), once H's entries had aged
out (a quiet host), one ARP A sent from H's MAC placed H under A at the four nodes other than A and W when H was
unheld, and at none of them when W held it (`mac_owners`; W's own switch took it in both runs, whose leaf entry the
run forgot too, which `HOSTED_GRACE` keeps in practice); a forged broadcast or leaf announcement while the entries
for H were live moved nothing.
So the H4 hijack comes back for a host that moved, whenever it goes quiet. The condition: V announced more than one
page within the last 30 min and H was on a page it dropped (a node bridging a LAN, a VM moving between sites).
Measured (virtual clock, 3 nodes, this test): after `ALONE_HOLD` U held H for W; one replayed frame later U held H
for nobody, disputed between V and W.

Suggested fix: in `HostClaims.take` (or before the check, in `receive`), refuse a page `p` of a member whose held
list has a page issued later than it with `pages <= p` (that page said the list ended before `p`); keep, per
member, the newest `(issued_ms, pages)` seen even after the pages went, so a page dropped cannot be taken again
while it is within `LIFETIME`.
"""

from __future__ import annotations

import pytest

from evio.node import host_claims as hcf
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import fleet

MOVED = "02:00:00:00:0b:01"  # host H: V's, on page 1 of V's list, then W's


@pytest.mark.xfail(strict=True, reason="review21o O1: a dropped page of another member's list is taken again")
async def test_a_replayed_page_the_member_dropped_does_not_take_a_moved_host_from_its_new_node() -> None:
    medium, nodes, clock = fleet(3)
    v, w, u = nodes
    sent_by_v: list[bytes] = []
    deliver = medium.send

    def spy(sender: hcf.HostClaimsFlood, frame: bytes, to: bytes = hcf.BROADCAST) -> None:
        if sender is v:
            sent_by_v.append(frame)  # what every node (the attacker's among them) receives
        deliver(sender, frame, to)  # type: ignore[arg-type]

    medium.send = spy  # type: ignore[method-assign]
    hosts = tuple(f"02:00:00:00:0a:{k:02x}" for k in range(host_claims.MAX_MACS))
    v.set_hosted((*hosts, MOVED))
    await clock.advance(5.0)
    assert u.told[-1].get(MOVED) == v.node_id
    page_1 = next(f for f in reversed(sent_by_v) if host_claims.parse("ov1", f, v._wall()).page == 1)

    v.set_hosted(hosts)  # H moved away: V's list is one page again
    await clock.advance(5.0)
    w.set_hosted((MOVED,))
    await clock.advance(host_claims.ALONE_HOLD + 5.0)
    assert u.told[-1].get(MOVED) == w.node_id  # H is W's at U (the precondition)

    u.receive(page_1, b"\x02\x66\x00\x00\x00\x09")  # A's one unicast frame: V's own signed page 1, as it was sent
    await clock.advance(1.0)
    assert MOVED not in u.claims.disputed
    assert u.told[-1].get(MOVED) == w.node_id  # fixed: the page V dropped is not taken again
