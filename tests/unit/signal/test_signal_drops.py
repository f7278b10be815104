"""Drop accounting, reconnect backoff and the typed event registry."""

from __future__ import annotations

import random

import pytest

from evio.backoff import backoff_delay
from evio.signal.drops import DropAccounting, DropReason
from evio.signal.events import Connected, Disconnected, EventRegistry, PeerAdded


def test_counts_every_drop_logs_once_per_peer_per_interval() -> None:
    d = DropAccounting(log_interval=60.0)
    assert d.record(DropReason.MALFORMED, "a@x/r", now=0.0) is True
    assert d.record(DropReason.NOT_MEMBER, "a@x/r", now=1.0) is False  # same peer, any reason
    assert d.record(DropReason.MALFORMED, "b@x/r", now=2.0) is True  # another peer
    assert d.record(DropReason.MALFORMED, "a@x/r", now=59.9) is False
    assert d.record(DropReason.MALFORMED, "a@x/r", now=60.0) is True  # next interval
    assert d.count(DropReason.MALFORMED) == 4
    assert d.count(DropReason.NOT_MEMBER) == 1
    assert d.count(DropReason.OVERSIZED) == 0
    assert d.total == 5
    assert d.counts == {DropReason.MALFORMED: 4, DropReason.NOT_MEMBER: 1}


def test_log_memory_is_bounded() -> None:
    d = DropAccounting(log_interval=10.0, max_tracked_peers=3)
    assert all(d.record(DropReason.MALFORMED, f"p{i}", now=0.0) for i in range(3))
    assert d.record(DropReason.MALFORMED, "p3", now=1.0) is False  # table full of recent peers: quiet
    assert d.record(DropReason.MALFORMED, "p4", now=20.0) is True  # old entries forgotten
    assert d.count(DropReason.MALFORMED) == 5


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    rng = random.Random(3)
    assert backoff_delay(0, rng, 0.5, 30.0) == 0.0
    for attempt, nominal in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (7, 30.0), (50, 30.0), (10_000, 30.0)]:
        for _ in range(50):
            delay = backoff_delay(attempt, rng, base=0.5, cap=30.0)
            assert nominal / 2 <= delay <= nominal


def test_event_registry_is_typed_and_isolates_failures() -> None:
    reg = EventRegistry()
    got: list[object] = []
    sub = reg.subscribe(PeerAdded, got.append)

    def broken(_: Connected) -> None:
        raise RuntimeError("subscriber bug")

    reg.subscribe(Connected, broken)
    reg.subscribe(Connected, got.append)
    reg.publish(PeerAdded("ov1", 1, "a@x/r"))
    reg.publish(Connected("me@x/r"))  # the broken subscriber does not stop the next one
    reg.publish(Disconnected("gone"))  # nobody subscribed: fine
    assert got == [PeerAdded("ov1", 1, "a@x/r"), Connected("me@x/r")]
    sub.cancel()
    sub.cancel()
    reg.publish(PeerAdded("ov1", 2, "b@x/r"))
    assert len(got) == 2
    with pytest.raises(TypeError):
        reg.subscribe(str, print)  # type: ignore[type-var]
