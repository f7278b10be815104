"""evio.ratelimit: the one token bucket and the one "log once per peer per interval"."""

from __future__ import annotations

import pytest

from evio.ratelimit import LogLimiter, PeerRateLimiter, Rate, TokenBucket


def test_a_bucket_allows_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(Rate(per_second=2.0, burst=3), now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.next_token(0.0) == pytest.approx(0.5)
    assert bucket.take(0.4) is False
    assert bucket.take(0.5) is True
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]  # refilled to the burst, no more


def test_a_rate_refuses_a_bucket_that_never_fills() -> None:
    with pytest.raises(ValueError, match="per_second > 0 and burst >= 1"):
        Rate(per_second=0.0, burst=1)
    with pytest.raises(ValueError, match="per_second > 0 and burst >= 1"):
        Rate(per_second=1.0, burst=0)


def test_each_peer_has_its_own_bucket_in_a_bounded_table() -> None:
    limiter = PeerRateLimiter[str](Rate(per_second=1.0, burst=1), max_peers=2)
    assert limiter.allow("a", 0.0) and not limiter.allow("a", 0.5)
    assert limiter.allow("b", 0.5)
    assert limiter.allow("c", 0.5)  # "a", idle longest, is forgotten
    assert len(limiter) == 2
    assert limiter.allow("a", 0.6)  # forgotten: a full bucket again


def test_a_peer_is_logged_once_per_interval() -> None:
    log = LogLimiter[str](interval=60.0)
    assert log.should_log("a", 0.0) is True
    assert log.should_log("a", 59.9) is False
    assert log.should_log("b", 1.0) is True  # another peer
    assert log.should_log("a", 60.0) is True  # the next interval
    assert log.should_log("a", 61.0) is False


def test_a_full_log_table_stays_quiet_until_its_peers_are_an_interval_old() -> None:
    log = LogLimiter[str](interval=10.0, max_peers=3)
    assert all(log.should_log(f"p{i}", 0.0) for i in range(3))
    assert log.should_log("p3", 1.0) is False  # full of peers logged this interval: a new one is not logged
    assert log.should_log("p0", 5.0) is False  # and a recent one is not forgotten to make room
    assert log.should_log("p4", 20.0) is True  # those of earlier intervals are forgotten
    assert log.should_log("p4", 21.0) is False
