import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evio.config.model import LogForm, default_long_distance
from evio.overlay.symphony import Ring, SelectionError, draw_offset, select_links, too_close_distance


class FixedRandom(random.Random):
    """rand() returns the given values in turn (then repeats the last one)."""

    def __init__(self, *values: float) -> None:
        super().__init__(0)
        self._values = list(values)

    def random(self) -> float:
        return self._values.pop(0) if len(self._values) > 1 else self._values[0]


def ring_of(n: int) -> Ring:
    # ids 10, 20, ..., so ranks and ids are easy to tell apart
    return Ring(10 * (i + 1) for i in range(n))


def test_default_k_is_floor_log2_n() -> None:
    assert [default_long_distance(n) for n in (1, 2, 8, 127, 128, 1024, 10000)] == [0, 1, 3, 6, 7, 10, 13]


@pytest.mark.parametrize("n", [2, 3, 8, 100, 128, 1000, 10000])
def test_too_close_is_one_position_in_ln_form(n: int) -> None:
    # eq. (2) with ln: floor(n * e^-ln n) = floor(1); floating point must not turn it into 0
    assert too_close_distance(n, LogForm.LN) == 1


@pytest.mark.parametrize("n", [8, 32, 128, 1024])
def test_too_close_in_log10_form_is_n_to_the_0_566(n: int) -> None:
    assert too_close_distance(n, LogForm.LOG10) == math.floor(n ** (1 - 1 / math.log(10)))
    assert too_close_distance(128, LogForm.LOG10) == 15


def test_draw_offset_follows_eq_1() -> None:
    # x = exp(log(n) * (r - 1)); offset n * x
    assert draw_offset(100, LogForm.LN, FixedRandom(0.5)) == pytest.approx(10.0)
    assert draw_offset(100, LogForm.LOG10, FixedRandom(0.5)) == pytest.approx(100 / math.e)
    assert draw_offset(128, LogForm.LN, FixedRandom(0.0)) == pytest.approx(1.0)
    assert draw_offset(128, LogForm.LOG10, FixedRandom(0.0)) == pytest.approx(128 * math.exp(-math.log10(128)))


def test_ring_positions_are_ranks_with_wrap() -> None:
    ring = Ring([50, 10, 40, 20, 30, 10])
    assert len(ring) == 5 and list(ring) == [10, 20, 30, 40, 50]
    assert ring.distance(40, 10) == 2 and ring.distance(10, 40) == 3 and ring.distance(30, 30) == 0
    assert ring.peer_at(40, 1) == 50 and ring.peer_at(40, 2) == 10 and ring.peer_at(40, 7) == 10
    with pytest.raises(SelectionError):
        ring.rank(35)


def test_successors_are_the_nearest_clockwise_with_wrap() -> None:
    sel = select_links(ring_of(10), 90, 3, 0, LogForm.LN, random.Random(1))
    assert sel.successors == (100, 10, 20)
    assert sel.long_distance == ()


def test_a_draw_picks_the_peer_at_floor_of_the_target_offset() -> None:
    ring = ring_of(100)
    # ln: 100 ** 0.52 = 10.96 positions from id 10 (rank 0): rank 10 = id 110
    assert select_links(ring, 10, 2, 1, LogForm.LN, FixedRandom(0.52)).long_distance == (110,)
    # log10: 100 / e = 36.8 -> 36 positions -> id 370
    assert select_links(ring, 10, 2, 1, LogForm.LOG10, FixedRandom(0.5)).long_distance == (370,)


def test_draws_on_self_successors_and_duplicates_are_drawn_again() -> None:
    ring = ring_of(100)
    # 100 ** 0.1 = 1.58 -> rank 1 (a successor); then 10.96 twice (duplicate); then 100 ** 0.7 = 25.1
    rng = FixedRandom(0.1, 0.52, 0.52, 0.7)
    sel = select_links(ring, 10, 2, 2, LogForm.LN, rng)
    assert sel.long_distance == (110, 260)


def test_gives_up_after_a_bounded_number_of_draws() -> None:
    ring = ring_of(100)
    sel = select_links(ring, 10, 2, 3, LogForm.LN, FixedRandom(0.1))  # always a successor
    assert sel.long_distance == ()


def test_kept_links_survive_while_valid() -> None:
    ring = ring_of(128)
    keep = [10 * 41, 10 * 2, 10 * 3, 99999]  # rank 40 (valid), a successor, a successor, unknown
    sel = select_links(ring, 10, 2, 1, LogForm.LN, FixedRandom(0.9), keep=keep)
    assert sel.long_distance == (410,)


def test_kept_links_that_became_too_close_are_dropped() -> None:
    ring = ring_of(128)
    d_c = too_close_distance(128, LogForm.LOG10)  # 15
    keep = [10 * (1 + d_c - 1), 10 * (1 + d_c)]  # rank distance 14 (too close) and 15 (fine)
    sel = select_links(ring, 10, 2, 2, LogForm.LOG10, FixedRandom(0.99), keep=keep)
    assert 10 * (1 + d_c - 1) not in sel.long_distance
    assert sel.long_distance[0] == 10 * (1 + d_c)


def test_excluded_peers_are_not_drawn() -> None:
    ring = ring_of(100)
    sel = select_links(ring, 10, 2, 1, LogForm.LN, FixedRandom(0.52, 0.7), exclude={110})
    assert sel.long_distance == (260,)


def test_small_rings() -> None:
    assert select_links(Ring([5]), 5, 2, None, LogForm.LN, random.Random(0)).successors == ()
    sel = select_links(Ring([5, 9]), 5, 2, None, LogForm.LN, random.Random(0))
    assert sel.successors == (9,) and sel.long_distance == ()


def test_bad_inputs_raise() -> None:
    with pytest.raises(SelectionError):
        select_links(ring_of(4), 15, 1, 1, LogForm.LN, random.Random(0))
    with pytest.raises(SelectionError):
        select_links(ring_of(4), 10, -1, 1, LogForm.LN, random.Random(0))


def test_ln_form_is_log_uniform_and_log10_form_is_not() -> None:
    n = 1024
    ln = [draw_offset(n, LogForm.LN, random.Random(seed)) for seed in range(4000)]
    below_sqrt_n = sum(1 for off in ln if off < math.sqrt(n)) / len(ln)
    assert 0.45 < below_sqrt_n < 0.55  # half the mass below sqrt(n): harmonic
    log10 = [draw_offset(n, LogForm.LOG10, random.Random(seed)) for seed in range(4000)]
    assert min(log10) >= n * math.exp(-math.log10(n)) - 1e-9
    assert sum(1 for off in log10 if off < math.sqrt(n)) == 0


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    s=st.integers(min_value=0, max_value=4),
    k=st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
    form=st.sampled_from(list(LogForm)),
    seed=st.integers(min_value=0, max_value=2**32),
    id_seed=st.integers(min_value=0, max_value=2**32),
)
def test_selection_invariants(n: int, s: int, k: int | None, form: LogForm, seed: int, id_seed: int) -> None:
    id_rng = random.Random(id_seed)
    ids = list({id_rng.getrandbits(128) for _ in range(n)})
    ring = Ring(ids)
    me = ids[0]
    sel = select_links(ring, me, s, k, form, random.Random(seed))
    again = select_links(ring, me, s, k, form, random.Random(seed))
    assert sel == again  # deterministic for a given generator
    size = len(ring)
    assert sel.successors == tuple(ring.peer_at(me, d) for d in range(1, min(s, size - 1) + 1))
    wanted = default_long_distance(size) if k is None else k
    assert len(sel.long_distance) <= wanted
    assert len(set(sel.long_distance)) == len(sel.long_distance)
    assert me not in sel.long_distance
    assert not set(sel.long_distance) & set(sel.successors)
    d_c = too_close_distance(size, form)
    assert all(ring.distance(me, p) >= d_c for p in sel.long_distance)


def test_whole_number_offsets_are_not_lost_to_rounding() -> None:
    # exp(ln(100) * -0.5) * 100 computes as 9.999...; the target is 10 positions
    assert select_links(ring_of(100), 10, 2, 1, LogForm.LN, FixedRandom(0.5)).long_distance == (110,)


@pytest.mark.parametrize("form", list(LogForm))
def test_selection_draws_exactly_the_offsets_of_eq_1(form: LogForm) -> None:
    # select_links inlines eq. (1) with log n taken once; it must draw what draw_offset draws.
    import math
    import random

    ring = Ring(range(0, 5000, 5))
    for seed in range(5):
        picked = select_links(ring, 0, 0, 6, form, random.Random(seed))
        twin = random.Random(seed)
        expected: list[int] = []
        while len(expected) < 6:
            distance = math.floor(draw_offset(len(ring), form, twin) + 1e-9)
            peer = ring.peer_at(0, distance)
            if distance >= too_close_distance(len(ring), form) and peer not in expected and peer != 0:
                expected.append(peer)
        assert picked.long_distance == tuple(expected)
