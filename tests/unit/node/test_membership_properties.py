"""Property test 2 of issue 21: a membership fleet under random squats, relogins and removals.

A fleet of nodes (real overlay controllers, fake signaling and links, virtual clock, trust mode under one
overlay CA, or fingerprint-only) runs random sequences of: squat attempts (a new session of one member's account claiming another
member's node id, with no proof or with its own certificate), triggered relogins of a member (with or without
the relogin status), account deletes, group edits, relogin-status session ends followed by a group edit, and
revocation lists dropped at one member while the server withholds the group edit. After every step:

- the owner keeps its id: no node ever gives a member's node id to another account, and every member still
  in the overlay and logged in is, on every other such node, the holder of its own node id;
- every tunnel to a removed member is closed within 5 s on every node, and stays closed.

A squatting account's own node id is not protected: one account speaks through its newest session, so a
session that claims another id gives up the account's own (`evio.signal.peers`).

"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from evio.testing.node_fleet import DOMAIN, nid
from evio.testing.trust_fleet import REMOVAL_BOUND, TrustFleet, members
from evio.testing.waiting import wait_until

COUNT = 5
# Derandomized: CI explores the same 40 cases every run, so a red run is a change, not a draw.
PROPERTIES = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                      suppress_health_check=[HealthCheck.too_slow])

node = st.integers(1, COUNT)
step = st.one_of(
    st.tuples(st.just("squat"), node, node, st.booleans()),
    st.tuples(st.just("relogin"), node, st.booleans()),
    st.tuples(st.sampled_from(["delete", "group edit", "relogin status end", "revocation list"]), node),
)


async def run(steps: list[tuple], trust: bool, record: Callable[[str], None] = event) -> None:
    tf = TrustFleet(COUNT, trust)
    fleet, hub, clock = tf.fleet, tf.fleet.signal_hub, tf.clock
    removed: set[int] = set()
    squatters = []
    await fleet.start()

    def in_overlay() -> list[int]:
        return [i for i in fleet.nodes if i not in removed]

    def owners_keep_their_ids() -> bool:
        """Members whose account never squatted: nobody else holds their id, and they hold it everywhere.

        (An account speaks through its newest session: one that claims another id gives up its own, and once it
        holds the other id its own is free: by design, and only the squatter can do that to itself.)"""
        live = [i for i in in_overlay() if tf.client(i).connected]
        squatting = {s.account for s in squatters}
        for m in live:
            mine = tf.client(m)
            if mine.account in squatting:
                continue
            for o in live:
                holder = tf.client(o).peers("ov1").get(nid(m)) if o != m else None
                if holder is not None and holder.split("/")[0] != mine.account:
                    return False  # taken over
                if o != m and holder != mine.full_jid:
                    return False  # not (yet) held by its owner
        return True

    try:
        await wait_until(owners_keep_their_ids, 10.0, what="fleet up", clock=clock)
        for n, op in enumerate(steps):
            kind, victim = op[0], op[1]
            record(kind)  # hypothesis's statistics (its `event` works only inside a @given test)
            if kind == "squat":
                squatter, target, with_cert = op[1], op[2], op[3]
                if squatter in removed or squatter == target:
                    continue
                own = tf.client(squatter)._identities if with_cert else None
                session = hub.client(f"node{squatter}@{DOMAIN}", {"ov1": nid(target)}, resource=f"squat{n}",
                                     identities=own)  # fmt: skip
                squatters.append(session)
                await session.start()
            elif kind == "relogin":
                if victim in removed:
                    continue
                hub.kick(tf.client(victim).full_jid, relogin=True, status_relogin=op[2])
            else:
                if victim in removed or len(in_overlay()) <= 2:
                    continue
                removed.add(victim)
                full = tf.client(victim).full_jid
                # A removed member's id is free for the next claimant (by design), and fake links reach a node
                # by id alone, so a squatter taking it would look like the removed node's tunnel: they leave.
                for session in [s for s in squatters if s.node_id("ov1") == nid(victim)]:
                    await session.stop()
                if kind == "delete":
                    hub.delete_account(f"node{victim}@{DOMAIN}")
                elif kind == "group edit":
                    hub.set_group("ov1", members(COUNT, *removed))
                elif kind == "relogin status end":
                    hub.kick(full, relogin=False, status_relogin=True)
                    hub.set_group("ov1", members(COUNT, *removed))
                elif not trust:  # no CA, no list: the server is the authority, and it pushes the edit
                    hub.set_group("ov1", members(COUNT, *removed))
                else:
                    hub.set_group("ov1", members(COUNT, *removed), push=False)
                    holder = min(in_overlay())
                    assert tf.client(holder).receive_revocation_list(tf.revocation(*sorted(removed)), "operator")
                await wait_until(lambda v=victim: not tf.tunnels_to(v), REMOVAL_BOUND, clock=clock,
                                 what=f"step {n} {kind}: tunnels to node{victim} closed within {REMOVAL_BOUND} s")  # fmt: skip
            await clock.advance(1.0)
            await wait_until(owners_keep_their_ids, REMOVAL_BOUND, clock=clock,
                             what=f"step {n} {op}: every owner holds its id everywhere")  # fmt: skip
        await clock.advance(10.0)  # and they stay closed
        for r in removed:
            assert not tf.tunnels_to(r), f"a tunnel to removed node{r} came back"
        assert owners_keep_their_ids()
    finally:
        for session in squatters:
            await session.stop()
        await fleet.stop_all()


@PROPERTIES
@given(st.lists(step, min_size=1, max_size=8), st.booleans())
def test_owners_keep_their_ids_and_removed_members_lose_every_tunnel(steps: list[tuple], trust: bool) -> None:
    asyncio.run(run(steps, trust))


# Found by the property above (issue 21, M2): node5's own account holds a second session that claims node2's id when
# node5's session ends with the relogin status and the group edit removes the account; node5's id had passed on to
# node4's squatting session meanwhile, and a tunnel to node5 outlived the 5 s bound (it stayed for good). Closed: the
# endpoint remembers every account an id passed through (tests/unit/node/test_review21_membership_gap.py).
def test_removal_while_a_second_session_of_the_account_claims_an_id_closes_within_the_bound() -> None:
    steps = [("delete", 1), ("squat", 4, 5, False), ("squat", 5, 2, True), ("squat", 2, 1, True),
             ("squat", 2, 1, True), ("squat", 5, 5, True), ("relogin status end", 5), ("squat", 3, 2, True)]
    asyncio.run(run(steps, True, record=lambda _: None))

