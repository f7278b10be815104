"""Review21s finding 2 (low): a listed member cycling one session's presence (available, unavailable, available, ...)
has every available answered with our directed presence, identity element and all: review21q Q2's echo, back by
the session's end instead of by the hint.

Attack (presence to linked peers only, decision 0059; fix of Q2, decision 0080): `_answer_presence` answers a
session's first presence at once and keeps what it answered in `_told[<full JID>]`; `_presence_unavailable` pops
that entry, so the session's next available is a "first" again. Member b sends available (its claim and proof for
its own resource) and unavailable in turn. Each pair is two stanzas of the per-account budget (`SENDER_RATE`,
20/s after a burst of 200: decision 0080), so one account draws 10 answers a second and 100 at once. Decision 0080's
"Not done" counts this by the stanzas b sends ("two stanzas of its own per answer, within its budget"); what each
answer costs the victim is the bytes it sends: Q2 measured ours at up to 13 KB with one long revocation list, so
100 answers are 1.3 MB queued on the victim's own c2s stream, about 5 s of the server's shaper (256 kB/s in the
configs `evio server init` writes) during which its offers and answers to every other member wait, and 130 KB/s
after that, half the shaper, per hostile account.

Measured (FakeSignalHub client in links mode, b listed and proven, as Q2's test): 200 pairs from `b@x.test/r1`
with the same hint, 200 directed presences back, no drop counted.

Suggested fix: keep the time of the last answer per bare account across the session's end (`_told` by account,
or a `TokenBucket` per account of a few answers, then one per `HINT_ANSWER_INTERVAL`), so a new session of an
account answered a moment ago waits for the interval (held back and owed, as 0080 does for a changed hint); an
honest member logging in again twice within 10 s is rare, and its recontact round covers the wait.

Fixed (decision 0080, amended): the last answer's time is kept per account past the session's end; an answer
within the interval is held back, counted and owed, and a timer sends it when the interval ends if the session is
still there. 200 pairs: 1 answer.
"""

from __future__ import annotations

from pathlib import Path

from evio.signal.endpoint import HINT_ANSWER_INTERVAL
from evio.testing.virtual_clock import VirtualClock
from tests.unit.signal.test_review21q_directed_presence_echo import _node_and_member

CYCLES = 200


async def test_a_member_cycling_its_presence_is_not_answered_every_time(tmp_path: Path) -> None:
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[str] = []
    node._send_directed = lambda to, answer: answered.append(to)  # type: ignore[method-assign]
    for _ in range(CYCLES):
        presence({"ov1": 3})
        node._presence_unavailable("b@x.test/r1")
    print(f"{CYCLES} available/unavailable pairs from one session: {len(answered)} directed presences back, "
          f"hint_answer_rate {node.drop_counts().get('hint_answer_rate', 0)}")
    assert len(answered) <= 10
    assert node.drop_counts().get("hint_answer_rate", 0) == CYCLES - 1, "each held back is counted"
    # Cycling on for a minute, a pair every 0.1 s: one answer per interval, not one per pair.
    for _ in range(600):
        presence({"ov1": 3})
        node._presence_unavailable("b@x.test/r1")
        await clock.advance(0.1)
    print(f"600 more pairs over {600 * 0.1:.0f} s: {len(answered)} directed presences back in all")
    assert len(answered) <= 2 + 60 / HINT_ANSWER_INTERVAL
    assert len(node._answered) <= 1 and not node._owed


async def test_an_honest_member_restarting_gets_its_answer_within_the_interval(tmp_path: Path) -> None:
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[tuple[float, str]] = []
    node._send_directed = lambda to, answer: answered.append((clock.now(), to))  # type: ignore[method-assign]
    started = clock.now()
    presence({"ov1": 3})  # its first session: answered at once
    assert answered == [(started, "b@x.test/r1")]
    await clock.advance(2.0)
    node._presence_unavailable("b@x.test/r1")  # it restarts
    await clock.advance(1.5)
    presence({"ov1": 3})  # its new session, 3.5 s after the last answer: owed
    assert len(answered) == 1
    await clock.advance(HINT_ANSWER_INTERVAL)
    assert answered[1:] == [(started + HINT_ANSWER_INTERVAL, "b@x.test/r1")], "answered when the interval ended"
    # A member that starts a session long after its last answer is answered at once, as before.
    node._presence_unavailable("b@x.test/r1")
    await clock.advance(HINT_ANSWER_INTERVAL)
    presence({"ov1": 3})
    assert answered[2:] == [(clock.now(), "b@x.test/r1")]
    assert not node._answered or clock.now() - next(iter(node._answered.values())) < HINT_ANSWER_INTERVAL


async def test_what_is_owed_to_a_session_that_left_is_not_sent(tmp_path: Path) -> None:
    clock = VirtualClock()
    node, presence = await _node_and_member(tmp_path, clock)
    answered: list[str] = []
    node._send_directed = lambda to, answer: answered.append(to)  # type: ignore[method-assign]
    presence({"ov1": 3})
    node._presence_unavailable("b@x.test/r1")
    presence({"ov1": 3})  # owed
    node._presence_unavailable("b@x.test/r1")  # and gone before the interval ends
    await clock.advance(2 * HINT_ANSWER_INTERVAL)
    assert answered == ["b@x.test/r1"] and not node._owed and node._owed_timer is None
