"""Review21g G8 (low): the ring's replay check forgets messages still fresh once 4,096 newer ones came, so a relay
that flushed it can replay a captured offer within its 60 s.

Attack: `ring_signal.Replay.fresh` evicts its oldest entries when it holds REPLAY_SLOTS (4,096), whatever their
age, while `open_sealed` takes a message for FRESH (60 s) after its timestamp. A member's own signed requests to
node T (any action: each is checked and entered before anything else in `RingSignaling._take`) at 4,096 per minute,
68/s, fit in the chunk rate of four of T's neighbours (20/s each). Once they pushed out the (src, kind, txid) of an
offer P sent T less than 60 s ago, which the same member carried as a relay (sealed: it cannot read it, but it can
send the same chunks again), T takes the copy as new. A copy of the offer that made P's current tunnel is answered
again harmlessly (review21f F7); but if P set up again within that minute (its first tunnel failed), the copy of
the earlier offer replaces the current tunnel ("replaced by a new offer from the peer"), and P, which waits for no
such answer, is cut off from T until it sets up again. Contrived, hence low.

Measured (the Replay class itself): after 4,096 other fresh messages within one second, the first message was
taken again (`fresh` True). The end-to-end replay was not run; the rate argument is above.

Fixed: full, the table forgets the oldest entry of the sender holding the most (per-sender quotas). Proposed at the review: never evict an entry younger than 2 * FRESH; when full, refuse new messages (counted as
RATE_LIMITED) or keep per-sender quotas (a sender's entries beyond REPLAY_SLOTS / 8 evict only its own).
"""

from __future__ import annotations

from evio.overlay.ring_signal import REPLAY_SLOTS, Replay, RingMessage


def _message(src: int, txid: str) -> RingMessage:
    return RingMessage("request", "ov1", src, 7, txid, 1000.0, "tunnel.offer", {})


def test_a_fresh_message_stays_refused_however_many_come_after_it() -> None:
    replay = Replay()
    offer = _message(1, "offer-of-p")
    assert replay.fresh(offer, 1000.0)
    for i in range(REPLAY_SLOTS):  # an attacker's own signed requests, all within one second
        replay.fresh(_message(2, f"junk{i}"), 1000.0 + i / REPLAY_SLOTS)
    assert not replay.fresh(offer, 1001.0)


def test_the_table_stays_bounded_and_a_flooding_sender_forgets_only_its_own() -> None:
    replay = Replay()
    honest = [_message(10 + i, f"offer{i}") for i in range(100)]
    for i, message in enumerate(honest):
        assert replay.fresh(message, 1000.0 + i / 1000)
    for i in range(3 * REPLAY_SLOTS):
        assert replay.fresh(_message(2, f"junk{i}"), 1000.5)
    assert len(replay._seen) == REPLAY_SLOTS
    assert not any(replay.fresh(message, 1001.0) for message in honest)
    assert replay.fresh(_message(2, "junk0"), 1001.0)  # its own, pushed out by its own: no one else's harm
