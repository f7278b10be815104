"""Review21v2 finding 1 (medium, roster-mode overlays): a member makes every node it links to log in again
every 5 s, for as long as it likes.

Attack (decision 0007, `evio/overlay/presence.py`, `evio/signal/client.py`): a linked peer gone from signaling
and not back after `absent_wait` (1.5 s unloaded: `revalidate_after`, or as long as our own last login took) sets
off a `CheckMembership`, and `SignalClient._refresh_membership` answers it with a new login (the only way to a
fresh roster with prosody's mod_groups), at most once per `membership_check_interval` (5 s). Nothing remembers that
the same peer set off the last check and was found still a member. Hostile member A keeps its tunnels up (they need
no signaling) and ends its XMPP session without the relogin status, waits 2 s, logs in again, and repeats every
6 s. Each round, every node A is linked to (its successors, long-distance and on-demand links: A may ask anyone
for a link) ends its own session and logs in again: its signaling is down for a login (TLS, SASL, the roster of
the whole group), offers and requests to and from it fail meanwhile, its presence goes to every member and theirs
come back (O(group) stanzas at the server per victim per round), and every member checks its new claim proof.
A pays one login per round for all of its victims.

Scope: overlays whose membership is the roster (no CA member list: `trust` without `member_list`, or no `trust`).
In links mode (decision 0059, what `evio member add` sets up) `check_membership` returns at once.

Measured (this test; virtual clock, `TrustFleet(4)`, real overlay controllers over the fake hub, node4 hostile,
10 rounds of 6 s): node1, node2 and node3 each asked for 10 membership checks, i.e. 10 logins each in a minute
(the fake hub counts the checks; the real client turns each into a login, one per 5 s at most, as
`tests/integration/signal/test_identity_prosody.py` shows on a real prosody: `check_membership()`, then a new
session). An honest peer whose session drops once is checked once. Not measured here: the login's cost on a real
server (the lab recipes give 130-160 ms for STARTTLS and SCRAM, then up to 2 s of settling before the victim's
controller evaluates again, decision 0007), so a victim spends up to a third of each round logging in and settling.

Severity: medium. One member repeatedly ends the signaling sessions of the members it links to ("ending another's
session", "crowding out another member's signaling") and multiplies its one login into O(links x group) presences
at the server; tunnels stay up, so no traffic is lost.

Fixed (decision 0007's amendment, `evio/overlay/presence.py`): a peer a check found back is given twice as long
at each absence after, up to `relogin_grace`, until it has stayed that long; per peer, so another member's removal
is seen as soon as before (`test_a_member_removed_while_another_cycles_loses_its_tunnels_within_the_bound`).

Suggested fix: a check that found the peer back (still a member) makes the next check for that peer wait longer,
doubling up to the relogin grace (30 s) or more, per peer; or checks only for peers whose session did not come back
within `relogin_grace` after a first check found them present. Revocation stays within 5 s for a peer that leaves
once (the first check is at once) and through the revocation list (trust mode).
"""

from __future__ import annotations

from evio.testing.node_fleet import DOMAIN, FLEET_TIMINGS, nid
from evio.testing.trust_fleet import REMOVAL_BOUND, TrustFleet, members
from evio.testing.waiting import wait_until

ROUNDS = 10
PERIOD = 6.0  # seconds per round: above the client's membership_check_interval (5 s), so each check is a login


async def _checks_under_cycling(rounds: int) -> dict[int, int]:
    tf = TrustFleet(4)
    hub = tf.fleet.signal_hub
    await tf.fleet.start()
    try:
        await tf.linked(4)
        before = {i: tf.client(i).membership_checks for i in (1, 2, 3)}
        attacker = tf.client(4).full_jid
        linked = {i for pair in tf.tunnels_to(4) for i in (1, 2, 3) if any(n == i << 124 for n in pair)}
        for _ in range(rounds):
            hub.kick(attacker, relogin=False)  # A's session ends, without the relogin status; its tunnels stay
            await tf.clock.advance(2.0)
            hub.relogin(attacker)
            await tf.clock.advance(PERIOD - 2.0)
            assert tf.tunnels_to(4), "the attacker's tunnels stay up"
        checks = {i: tf.client(i).membership_checks - before[i] for i in (1, 2, 3)}
        print(
            f"{rounds} rounds of node4 leaving for 2 s (every {PERIOD:g} s): membership checks (logins) per node "
            f"{checks}; nodes linked to node4: {sorted(linked)}"
        )
        assert f"node4@{DOMAIN}" in hub._groups["ov1"], "node4 stays a member throughout"
        return checks
    finally:
        await tf.fleet.stop_all()


async def test_a_member_cycling_its_session_does_not_make_its_peers_log_in_each_round() -> None:
    checks = await _checks_under_cycling(ROUNDS)
    assert max(checks.values()) <= 3, f"{checks} checks (logins) in {ROUNDS * PERIOD:g} s"


async def test_a_peer_that_leaves_once_is_checked_once() -> None:
    checks = await _checks_under_cycling(1)
    assert max(checks.values()) == 1


async def test_a_member_removed_while_another_cycles_loses_its_tunnels_within_the_bound() -> None:
    """A check is for everything, and A's backoff is A's alone: node5, removed by a group edit the server does not
    push (prosody's mod_groups edited by hand) as its session ends, while node4 cycles and is gone too, loses every
    tunnel within the bound; node4, still a member, keeps its own."""
    tf = TrustFleet(5)
    hub = tf.fleet.signal_hub
    await tf.fleet.start()
    try:
        await tf.linked(4)
        await tf.linked(5)
        attacker, honest = tf.client(4).full_jid, tf.client(5).full_jid
        honest_ids = {nid(i) for i in (1, 2, 3)}
        assert any(p & honest_ids for p in tf.tunnels_to(5)), "node5 linked to an honest node"
        before = {i: tf.client(i).membership_checks for i in (1, 2, 3)}
        for _ in range(3):  # node4's checks are backed off on every node it links to by now
            hub.kick(attacker, relogin=False)
            await tf.clock.advance(2.0)
            hub.relogin(attacker)
            await tf.clock.advance(PERIOD - 2.0)
        backed_off = {i: tf.client(i).membership_checks - before[i] for i in (1, 2, 3)}
        assert max(backed_off.values()) <= 1, f"node4 cycling: {backed_off} checks"
        hub.kick(attacker, relogin=False)  # gone again, longer than its backed-off wait this time
        hub.set_group("ov1", members(5, 5), push=False)
        hub.kick(honest, relogin=False)
        # Node4's own signaling is down too, so its tunnel to node5 waits for its next login: the honest nodes'.
        start = tf.clock.now()
        await wait_until(lambda: not [p for p in tf.tunnels_to(5) if p & honest_ids], REMOVAL_BOUND, clock=tf.clock,
                         what="every honest node's tunnel to node5 closed within the bound")  # fmt: skip
        took = tf.clock.now() - start
        print(f"node5 removed while node4 cycles: every honest node's tunnel to it closed in {took:.3f} s (virtual)")
        # As soon as with nobody cycling: node5's first absence is checked after `revalidate_after`, not after a
        # wait doubled by node4's record.
        assert took < 2 * FLEET_TIMINGS.revalidate_after
        await tf.clock.advance(REMOVAL_BOUND)
        hub.relogin(attacker)
        await tf.clock.advance(2.0)
        assert tf.tunnels_to(4), "node4, still a member, keeps its tunnels"
    finally:
        await tf.fleet.stop_all()
