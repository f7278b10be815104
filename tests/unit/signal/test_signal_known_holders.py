"""Revocation of a node id that passed on to another account (issue 21, the membership gap).

An up tunnel outlives a hand-over of its node id: the holder's account speaks for another id, a second
account claims the freed one, and the tunnel made with the first stays up under the second. Removing the
first account must still close it, so the endpoint remembers every account an id passed through.
"""

from __future__ import annotations

from evio.signal.endpoint import EndpointLimits
from evio.signal.events import PeerAdded, PeerRemoved, RemovalCause
from tests.unit.signal.test_signal_fake import D, overlay, until, virtual_hub


async def test_removing_an_account_revokes_an_id_it_held_that_passed_on_to_another_member() -> None:
    hub = virtual_hub()
    a, b, c = await overlay(hub, 3)
    events: list[PeerAdded | PeerRemoved] = []
    a.subscribe(PeerRemoved, events.append)
    a.subscribe(PeerAdded, events.append)
    moved = hub.client(f"n3@{D}", {"ov1": 9}, resource="moved")  # c's account now speaks for id 9: 3 is free
    await moved.start()
    await until(hub, lambda: a.peers("ov1").get(9) == moved.full_jid and 3 not in a.peers("ov1"))
    taker = hub.client(f"n2@{D}", {"ov1": 3}, resource="taker")  # b's account takes id 3
    await taker.start()
    await until(hub, lambda: a.peers("ov1").get(3) == taker.full_jid)
    events.clear()
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}"])  # c's account removed
    revoked = [(e.node_id, e.jid) for e in events if isinstance(e, PeerRemoved)]
    assert (3, f"n3@{D}") in revoked, f"id 3, once c's, not revoked: {events}"
    assert revoked.count((3, f"n3@{D}")) == 1
    assert all(e.cause is RemovalCause.MEMBERSHIP_REVOKED for e in events if isinstance(e, PeerRemoved))
    # ... and handed back to its present holder, a member: the order tells the overlay to close, then link again.
    assert events.index(PeerAdded("ov1", 3, taker.full_jid)) > events.index(
        PeerRemoved("ov1", 3, f"n3@{D}", RemovalCause.MEMBERSHIP_REVOKED))
    assert a.peers("ov1").get(3) == taker.full_jid
    events.clear()
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}"])  # nothing new: reported once
    assert events == []
    for client in (a, b, c, moved, taker):
        await client.stop()


async def test_only_the_removal_of_an_account_an_id_passed_through_reports_it() -> None:
    """Removing a member that never held the id reports nothing for it; removing its present holder, once."""
    hub = virtual_hub()
    a, b, c, d = await overlay(hub, 4)
    events: list[PeerRemoved] = []
    a.subscribe(PeerRemoved, events.append)
    moved = hub.client(f"n3@{D}", {"ov1": 9}, resource="moved")
    taker = hub.client(f"n2@{D}", {"ov1": 3}, resource="taker")
    await moved.start()
    await until(hub, lambda: 3 not in a.peers("ov1"))
    await taker.start()
    await until(hub, lambda: a.peers("ov1").get(3) == taker.full_jid)
    events.clear()
    hub.set_group("ov1", [f"n1@{D}", f"n2@{D}", f"n3@{D}"])  # d removed: it never held id 3
    assert [e.node_id for e in events] == [4]
    events.clear()
    hub.set_group("ov1", [f"n1@{D}", f"n3@{D}"])  # the taker's account removed: id 3 (and its old id 2) once each
    assert sorted((e.node_id, e.cause) for e in events) == [(2, RemovalCause.MEMBERSHIP_REVOKED),
                                                            (3, RemovalCause.MEMBERSHIP_REVOKED)]
    assert 3 not in a.peers("ov1")
    for client in (a, b, c, d, moved, taker):
        await client.stop()


async def test_the_memory_stays_within_its_bound_as_ids_pass_between_accounts() -> None:
    hub = virtual_hub()
    a, *others = await overlay(hub, 4, limits=EndpointLimits(max_known_peers=3))
    movers = [hub.client(f"n{2 + i % 3}@{D}", {"ov1": 10 + i}, resource=f"m{i}") for i in range(12)]
    for mover in movers:  # each account cycles through new ids: one entry each, the oldest forgotten
        await mover.start()
        await until(hub, lambda m=mover: a.peers("ov1").get(m.node_id("ov1")) == m.full_jid)
    assert len(a._known) == 3
    assert sorted((k[1], k[2]) for k in a._known) == [(19, f"n2@{D}"), (20, f"n3@{D}"), (21, f"n4@{D}")]
    assert a._known_of == {("ov1", 19): {f"n2@{D}"}, ("ov1", 20): {f"n3@{D}"}, ("ov1", 21): {f"n4@{D}"}}
    for client in (a, *others, *movers):
        await client.stop()
