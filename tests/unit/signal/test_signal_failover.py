"""Several XMPP servers of one service (issue 22 item 3, issue 24 item 2): the order, the moves, the waits."""

from __future__ import annotations

import random

import pytest

from evio.backoff import backoff_delay
from evio.signal.failover import ServerRotation
from evio.signal.pacing import SPREAD_PER_MEMBER

A, B, C = ("xmpp1.test", 5222), ("xmpp2.test", 5222), ("10.0.0.3", 5223)
BASE, CAP = 0.5, 30.0


def test_logins_go_to_the_first_server_until_it_fails() -> None:
    rotation = ServerRotation((A, B, C))
    assert rotation.current == A and rotation.moves == 0


def test_a_failed_login_moves_to_the_next_at_once_and_a_failed_round_backs_off() -> None:
    rng = random.Random(1)
    rotation = ServerRotation((A, B, C))
    assert rotation.login_failed(rng, BASE, CAP) == 0.0 and rotation.current == B
    assert rotation.login_failed(rng, BASE, CAP) == 0.0 and rotation.current == C
    # All three failed in a row: back to the first, after the backoff of one failure.
    first_round = rotation.login_failed(rng, BASE, CAP)
    assert rotation.current == A and BASE / 2 <= first_round <= BASE
    delays = [rotation.login_failed(rng, BASE, CAP) for _ in range(3)]
    assert delays[:2] == [0.0, 0.0] and BASE <= delays[2] <= 2 * BASE  # the second round doubles
    assert rotation.moves == 6


def test_one_server_backs_off_as_before() -> None:
    """The single-server config: every failed login waits `backoff_delay(failures in a row)`, as it did."""
    rotation, rng, same = ServerRotation((A,)), random.Random(7), random.Random(7)
    for failures in range(1, 8):
        assert rotation.login_failed(rng, BASE, CAP) == backoff_delay(failures, same, BASE, CAP)
        assert rotation.current == A
    assert rotation.moves == 0


def test_a_dropped_session_moves_on_spread_and_forgets_the_failures() -> None:
    rng = random.Random(3)
    rotation = ServerRotation((A, B))
    rotation.login_failed(rng, BASE, CAP)  # A refused, B took us
    assert rotation.current == B
    delays = []
    for _ in range(200):
        delays.append(rotation.session_ended(rng, 0.05, 1000, BASE, CAP))
        assert rotation.failed == 0
    # Members of a dead cluster node arrive at the others spread out, as after a server restart.
    assert max(delays) <= 1000 * SPREAD_PER_MEMBER and max(delays) > 20.0
    assert rotation.current == B  # 200 moves between two servers: back where it was
    assert rotation.session_ended(rng, 0.05, 3, BASE, CAP) <= BASE and rotation.current == A  # a small overlay


def test_a_session_we_ended_to_log_in_again_stays_on_its_server() -> None:
    rotation = ServerRotation((A, B, C))
    assert rotation.session_ended(random.Random(1), 0.05, 10, BASE, CAP, by_us=True) == 0.0
    assert rotation.current == A and rotation.moves == 0


def test_no_servers_is_refused() -> None:
    with pytest.raises(ValueError):
        ServerRotation(())
