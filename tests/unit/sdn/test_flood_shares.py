"""FloodShares: one port's floods never exceed its total, and a root flooding less than its share is never refused."""

from __future__ import annotations

import random

from evio.ratelimit import Rate
from evio.sdn.flood_shares import FloodShares

PORT = Rate(400.0, 800)
ROOT = Rate(100.0, 200)


def storm(roots: int, seconds: float = 5.0, seed: int = 1) -> tuple[int, int, int]:
    """One port: a storm at 1000/s cycling over `roots` roots, and an honest root flooding 10/s among them.
    Returns (storm floods passed, honest sent, honest passed)."""
    shares = FloodShares[int](PORT, ROOT)
    rng = random.Random(seed)
    passed = honest_sent = honest_passed = 0
    for i in range(int(seconds * 1000)):
        now = i / 1000
        if shares.allow(1, rng.randrange(roots), now):
            passed += 1
        if i % 100 == 50:
            honest_sent += 1
            honest_passed += shares.allow(1, -1, now)
    return passed, honest_sent, honest_passed


def test_a_storm_over_many_roots_gets_the_port_total_and_an_honest_root_all_its_floods() -> None:
    for roots in (1, 5, 25):
        passed, sent, got = storm(roots)
        print(f"{roots} storm roots: {passed} passed in 5 s (total allows {PORT.burst + 5 * PORT.per_second:.0f}),"
              f" honest {got}/{sent}")
        assert passed <= PORT.burst + 5 * PORT.per_second
        assert got == sent


def test_one_root_alone_gets_its_own_rate_and_no_more() -> None:
    shares = FloodShares[int](PORT, ROOT)
    passed = sum(shares.allow(1, 7, i / 1000) for i in range(5000))
    assert ROOT.per_second * 5 * 0.9 <= passed <= ROOT.per_second * 5 + ROOT.burst


def test_ports_do_not_share() -> None:
    shares = FloodShares[int](PORT, ROOT)
    for i in range(2000):
        shares.allow(1, i % 30, i / 1000)
    assert shares.allow(2, 0, 2.0)
    shares.forget(2)
    assert len(shares) == 1


def held_and_contested(contested_rate: float, held_rate: float, seconds: float = 5.0) -> tuple[int, int, int]:
    """One root: its floods by port 1 (the way held) at `held_rate`, a contested way's by port 2 at `contested_rate`
    (review21v1 finding 2). Returns (contested passed, held sent, held passed)."""
    shares = FloodShares[int](PORT, ROOT)
    contested = held_sent = held_passed = 0
    for i in range(int(seconds * 1000)):
        now = i / 1000
        if i % max(1, round(1000 / contested_rate)) == 0:
            contested += shares.allow(2, 7, now, held=1)
        if held_rate and i % round(1000 / held_rate) == 3:
            held_sent += 1
            held_passed += shares.allow(1, 7, now)
    return contested, held_sent, held_passed


def test_a_contested_way_passes_only_what_the_held_way_leaves_of_its_roots_share() -> None:
    for contested_rate in (120.0, 200.0, 1000.0):
        contested, sent, got = held_and_contested(contested_rate, held_rate=10.0)
        print(f"contested way at {contested_rate:.0f}/s: {contested} passed in 5 s, held way {got}/{sent}")
        assert got == sent  # the held way's copies first
        assert contested + got <= ROOT.burst + 5 * ROOT.per_second  # one root's share, whichever ports bring it


def test_a_contested_way_alone_passes_at_its_roots_rate() -> None:
    """A tree that moved: the held way is silent, and the new one (contested until the old lapses) keeps the root's
    rate, its burst less the held way's reserve."""
    contested, _, _ = held_and_contested(1000.0, held_rate=0.0)
    assert ROOT.per_second * 5 * 0.9 <= contested <= ROOT.per_second * 5 + ROOT.burst


def test_a_moved_trees_lone_copy_by_its_new_way_passes_at_once() -> None:
    """The old way silent for a window (its share gone), a root's next flood comes by its new way, contested until
    the old lapses: it goes on (a reserve as big as a new share refused each of the Symphony churn fleet's)."""
    shares = FloodShares[int](PORT, ROOT)
    assert shares.allow(1, 7, 0.0)
    assert shares.allow(2, 7, 5.0, held=1)
    assert shares.allow(2, 7, 10.0, held=1)
