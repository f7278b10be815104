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

Fixed (decision 0078): each member's page counts are kept with when a page last stated each, for `LIFETIME`, after
the pages they dropped went (`HostClaims.dropped`): a page `p` issued before a page of its member saying the list
has `p` pages or fewer is refused, free, before any check (`refused_dropped_page`), and never taken. The tests after
the pin: the honest orders (a page 1 before its page 0, across a shrink and a regrowth) are all taken, and an old
page 0 replayed after a newer one changes nothing.

Suggested fix (the review's): in `HostClaims.take` (or before the check, in `receive`), refuse a page `p` of a member whose held
list has a page issued later than it with `pages <= p` (that page said the list ended before `p`); keep, per
member, the newest `(issued_ms, pages)` seen even after the pages went, so a page dropped cannot be taken again
while it is within `LIFETIME`.
"""

from __future__ import annotations

from evio.node import host_claims as hcf
from evio.signal import host_claims
from tests.unit.node.test_host_claims_flood import Medium, Wired, fleet
from tests.unit.node.test_review21d_host_claims_by_port import virtual_wall

MOVED = "02:00:00:00:0b:01"  # host H: V's, on page 1 of V's list, then W's


async def test_a_replayed_page_the_member_dropped_does_not_take_a_moved_host_from_its_new_node() -> None:
    medium, nodes, clock = fleet(3)
    virtual_wall(nodes, clock)  # issued times a page gap apart, as on a real node, not within one real ms
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
    assert u.counts["refused_dropped_page"] == 1  # refused before any check


HOSTS = tuple(f"02:00:00:00:0a:{k:02x}" for k in range(host_claims.MAX_MACS))  # V's page 0, full
NEW = "02:00:00:00:0b:02"  # a host V gains later: page 1 again


def spied(medium: Medium, v: Wired, away: list[Wired]) -> tuple[list[bytes], list[bytes], list[bool]]:
    """(every frame V sends; those of them held back from the nodes `away` while the flag is set; the flag)."""
    sent_by_v: list[bytes] = []
    held_back: list[bytes] = []
    hold = [False]
    deliver = medium.send

    def spy(sender: hcf.HostClaimsFlood, frame: bytes, to: bytes = hcf.BROADCAST) -> None:
        if sender is v:
            sent_by_v.append(frame)
        if sender is not v or not hold[0]:
            deliver(sender, frame, to)  # type: ignore[arg-type]
            return
        held_back.append(frame)
        for node in away:
            medium.nodes.remove(node)
        try:
            deliver(sender, frame, to)
        finally:
            medium.nodes.extend(away)

    medium.send = spy  # type: ignore[method-assign]
    return sent_by_v, held_back, hold


def page_of(frames: list[bytes], number: int, wall: float) -> bytes:
    return next(f for f in reversed(frames) if host_claims.parse("ov1", f, wall).page == number)


async def test_a_list_that_shrank_and_grew_again_is_taken_in_any_order_and_its_old_page_is_not() -> None:
    medium, nodes, clock = fleet(4)
    virtual_wall(nodes, clock)
    v, w, u, x = nodes
    sent_by_v, held_back, hold = spied(medium, v, [u, x])
    v.set_hosted((*HOSTS, MOVED))
    await clock.advance(5.0)
    old_page_1 = page_of(sent_by_v, 1, v._wall())
    v.set_hosted(HOSTS)  # one page: page 1 dropped everywhere
    await clock.advance(5.0)
    assert MOVED not in u.told[-1] and MOVED not in x.told[-1]

    hold[0] = True
    v.set_hosted((*HOSTS, NEW))  # two pages again, each signed anew: U and X miss both as they go ...
    await clock.advance(5.0)
    hold[0] = False
    assert [host_claims.parse("ov1", f, v._wall()).page for f in held_back] == [0, 1]
    assert w.told[-1].get(NEW) == v.node_id
    new_page_0, new_page_1 = held_back
    attacker = b"\x02\x66\x00\x00\x00\x09"
    # ... and U has them late, page 1 before its page 0 (a catch-up's unicast and the flood's copy crossing):
    u.receive(new_page_1, v.mac)
    await clock.advance(1.0)
    assert u.told[-1].get(NEW) == v.node_id  # page 1 taken before its page 0: it is newer than the shrink
    u.receive(new_page_0, v.mac, ingress=v.node_id, root=v.node_id)
    # X has the new page 0 only (saying two pages again) when A replays the page 1 from before the shrink: the
    # shrink still drops it, though the newest page 0 held says the list has a page 1.
    x.receive(new_page_0, v.mac, ingress=v.node_id, root=v.node_id)
    x.receive(old_page_1, attacker)
    await clock.advance(1.0)
    assert x.counts["refused_dropped_page"] == 1 and x.claims.issued_ms(v.node_id, 1) is None
    x.receive(new_page_1, v.mac)  # the new page 1, late: taken
    await clock.advance(1.0)
    for node in (u, x):
        assert node.told[-1] == {**dict.fromkeys((*HOSTS, NEW), v.node_id)}, node
        assert node.claims.issued_ms(v.node_id, 1) == w.claims.issued_ms(v.node_id, 1)


async def test_an_old_page_0_replayed_after_a_newer_one_changes_nothing_with_its_page_1_or_without() -> None:
    medium, nodes, clock = fleet(3)
    virtual_wall(nodes, clock)
    v, w, u = nodes
    sent_by_v, _, _ = spied(medium, v, [u])
    v.set_hosted((*HOSTS, MOVED))
    await clock.advance(5.0)
    old_page_0, old_page_1 = page_of(sent_by_v, 0, v._wall()), page_of(sent_by_v, 1, v._wall())
    v.set_hosted(HOSTS)
    await clock.advance(5.0)
    w.set_hosted((MOVED,))
    await clock.advance(host_claims.ALONE_HOLD + 5.0)
    assert u.told[-1].get(MOVED) == w.node_id
    told, unchanged = len(u.told), u.counts["unchanged"]

    attacker = b"\x02\x66\x00\x00\x00\x09"
    u.receive(old_page_0, attacker)  # V's list as it was, page 0 first (it said: two pages) ...
    u.receive(old_page_1, attacker)  # ... then its page 1
    await clock.advance(1.0)
    assert (u.counts["unchanged"] - unchanged, u.counts["refused_dropped_page"]) == (1, 1)
    assert len(u.told) == told and MOVED not in u.claims.disputed
    assert u.claims.issued_ms(v.node_id, 1) is None
