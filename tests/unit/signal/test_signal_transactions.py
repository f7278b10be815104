"""Outstanding requests with a fake clock."""

from __future__ import annotations

import random

import pytest

from evio.signal.transactions import TransactionLimit, TransactionTable


def table(max_outstanding: int = 1024) -> TransactionTable[str]:
    return TransactionTable(random.Random(7), max_outstanding)


def test_response_matches_only_the_asked_peer_and_overlay() -> None:
    t = table()
    p = t.start("ov1", 5, "act", now=100.0, timeout=2.0, waiter="w")
    assert t.resolve(p.txid, "ov1", 6) is None  # another member cannot answer for the peer
    assert t.resolve(p.txid, "ov2", 5) is None
    assert t.resolve("nope", "ov1", 5) is None
    assert t.resolve(p.txid, "ov1", 5) is p
    assert t.resolve(p.txid, "ov1", 5) is None  # answered once only
    assert len(t) == 0


def test_deadlines_with_fake_clock() -> None:
    t = table()
    a = t.start("ov1", 1, "a", now=0.0, timeout=5.0, waiter="a")
    b = t.start("ov1", 2, "b", now=1.0, timeout=1.0, waiter="b")
    c = t.start("ov1", 3, "c", now=1.5, timeout=10.0, waiter="c")
    assert t.next_deadline() == 2.0
    assert t.expire(1.999) == []
    assert t.expire(2.0) == [b]
    assert t.next_deadline() == 5.0
    assert t.resolve(a.txid, "ov1", 1) is a
    assert t.next_deadline() == 11.5  # the answered one no longer counts
    assert t.expire(11.0) == []
    assert t.expire(100.0) == [c]
    assert t.next_deadline() is None


def test_txids_unique_and_unpredictable_across_restarts() -> None:
    t1, t2 = TransactionTable[str](random.Random(1)), TransactionTable[str](random.Random(2))
    ids = {t1.start("o", 1, "a", 0, 1, "w").txid for _ in range(500)}
    assert len(ids) == 500
    assert t2.start("o", 1, "a", 0, 1, "w").txid not in ids


def test_limit() -> None:
    t = table(max_outstanding=2)
    t.start("o", 1, "a", 0, 1, "w")
    p = t.start("o", 1, "a", 0, 1, "w")
    with pytest.raises(TransactionLimit):
        t.start("o", 1, "a", 0, 1, "w")
    t.cancel(p.txid)
    t.start("o", 1, "a", 0, 1, "w")


def test_fail_peer_and_close_all() -> None:
    t = table()
    a = t.start("ov1", 1, "a", 0, 9, "a")
    t.start("ov1", 2, "b", 0, 9, "b")
    c = t.start("ov2", 1, "c", 0, 9, "c")
    assert t.fail_peer("ov1", 1) == [a]
    assert t.get(c.txid) is c
    assert {p.waiter for p in t.close_all()} == {"b", "c"}
    assert len(t) == 0 and t.next_deadline() is None and t.expire(1e9) == []
