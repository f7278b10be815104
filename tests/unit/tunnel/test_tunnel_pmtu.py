"""The path MTU search (evio.tunnel.pmtu) against simulated paths: what it finds, when it changes the MTU in
use, and what it does on a black hole, a larger path later, and a peer that never answers."""

from __future__ import annotations

import random

import pytest

from evio.tunnel import pmtu
from evio.tunnel.pmtu import MAX_PROBES, PathMtu, PmtuSource, Probe

TICK = 0.375  # the supervisor's tick when up (keepalive / 4)
LARGEST = 1496


class Path:
    """Acks every probe that fits ``mtu`` at once (None: the peer answers nothing); records what was sent."""

    def __init__(self, mtu: int | None) -> None:
        self.mtu = mtu
        self.sent: list[Probe] = []

    def run(self, machine: PathMtu, start: float, seconds: float) -> float:
        now = start
        while now < start + seconds:
            for probe in machine.tick(now):
                self.sent.append(probe)
                if self.mtu is not None and probe.size <= self.mtu:
                    machine.on_ack(now, probe.token)
            now += TICK
        return now


def test_a_path_that_takes_the_largest_datagram_is_probed_in_one_round() -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(1)), Path(1500)
    path.run(machine, 0.0, 1.0)
    assert (machine.mtu, machine.source, machine.searching) == (LARGEST, PmtuSource.PROBED, False)
    assert sorted(p.size for p in path.sent) == [576, 1280, 1400, 1450, LARGEST]


def test_a_1280_link_is_found_and_the_sizes_above_fail_only_after_max_probes_losses() -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(2)), Path(1280)
    path.run(machine, 0.0, 60.0)
    assert (machine.mtu, machine.source, machine.searching) == (1280, PmtuSource.PROBED, False)
    for size in (1400, 1450, LARGEST):
        assert sum(p.size == size for p in path.sent) == MAX_PROBES
    # The gap 1280-1400 was searched, to within REFINE_STEP, and nothing in it passed.
    assert any(1280 < p.size < 1400 for p in path.sent)


@pytest.mark.parametrize("link", [1350, 1420, 1492])
def test_a_link_between_the_ladders_sizes_is_found_within_the_refine_step(link: int) -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(link)), Path(link)
    path.run(machine, 0.0, 120.0)
    assert machine.mtu is not None and link - pmtu.REFINE_STEP <= machine.mtu <= link
    assert not machine.searching


def test_the_mtu_in_use_changes_only_when_a_round_closes_never_on_the_first_small_ack() -> None:
    machine = PathMtu(LARGEST, 0.0, random.Random(3))
    probes = machine.tick(0.0)
    small = next(p for p in probes if p.size == pmtu.MIN_PROBE)
    machine.on_ack(0.01, small.token)
    assert machine.mtu is None and machine.source is PmtuSource.ASSUMED
    assert machine.tick(0.5) == []  # the round is still open
    machine.tick(pmtu.ROUND_SECONDS + 0.01)
    assert machine.mtu == pmtu.MIN_PROBE


def test_a_peer_that_answers_no_probe_leaves_the_mtu_assumed_and_is_left_alone_until_the_raise() -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(4)), Path(None)
    end = path.run(machine, 0.0, 30.0)
    assert (machine.mtu, machine.source, machine.searching) == (None, PmtuSource.ASSUMED, False)
    assert len(path.sent) == MAX_PROBES * 5
    path.sent.clear()
    path.run(machine, end, pmtu.RAISE_INTERVAL - 40.0)
    assert path.sent == []


def test_a_black_hole_lowers_the_mtu_to_a_size_confirmed_before_and_the_search_finds_the_new_path() -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(5)), Path(1500)
    now = path.run(machine, 0.0, 5.0)
    assert machine.mtu == LARGEST
    path.mtu = 1280  # the route changed under the tunnel
    now = path.run(machine, now, pmtu.CONFIRM_INTERVAL + MAX_PROBES * 2 + 1)
    assert machine.black_holes == 1
    assert machine.mtu is not None and machine.mtu < LARGEST
    path.run(machine, now, 60.0)
    assert (machine.mtu, machine.searching) == (1280, False)


def test_a_larger_path_is_taken_at_the_next_raise() -> None:
    machine, path = PathMtu(LARGEST, 0.0, random.Random(6)), Path(1280)
    now = path.run(machine, 0.0, 60.0)
    assert machine.mtu == 1280
    path.mtu = 1500
    path.run(machine, now, pmtu.RAISE_INTERVAL)
    assert machine.mtu == LARGEST and machine.searches == 1


def test_late_and_unknown_acks_teach_nothing() -> None:
    machine = PathMtu(LARGEST, 0.0, random.Random(7))
    probes = machine.tick(0.0)
    machine.on_ack(0.1, 12345)
    machine.tick(pmtu.ROUND_SECONDS + 0.01)  # every probe lost once
    machine.on_ack(1.5, probes[-1].token)  # an ack of the closed round
    assert machine.mtu is None


def test_a_tunnel_smaller_than_the_minimum_probe_is_refused() -> None:
    with pytest.raises(ValueError, match="below"):
        PathMtu(500, 0.0)
