import pytest
from hypothesis import given
from hypothesis import strategies as st

from evio.tunnel.datapath.replay import ACCEPT, REPLAYED, STALE, ReplayWindow


def test_in_order_accepted_once() -> None:
    w = ReplayWindow(128)
    for c in range(1000):
        assert w.check(c) == ACCEPT
        w.update(c)
        assert w.check(c) == REPLAYED


def test_reordered_within_window_accepted_and_older_stale() -> None:
    w = ReplayWindow(128)
    w.update(1000)
    assert w.check(1000 - 127) == ACCEPT
    assert w.check(1000 - 128) == STALE
    w.update(999)
    assert w.check(999) == REPLAYED
    assert w.check(998) == ACCEPT


def test_big_jump_clears_everything() -> None:
    w = ReplayWindow(64)
    for c in range(64):
        w.update(c)
    w.update(10**12)
    assert w.check(10**12 - 1) == ACCEPT
    assert w.check(10**12 - 64) == STALE
    assert w.check(10**12) == REPLAYED


def test_check_does_not_change_the_window() -> None:
    w = ReplayWindow(64)
    assert w.check(5) == ACCEPT
    assert w.check(5) == ACCEPT
    assert w.top == -1


@pytest.mark.parametrize("size", [0, 63, 100, -64])
def test_size_must_be_multiple_of_64(size: int) -> None:
    with pytest.raises(ValueError):
        ReplayWindow(size)


@given(
    size=st.sampled_from([64, 128, 1024]),
    counters=st.lists(st.integers(0, 5000), max_size=400),
)
def test_matches_reference_model(size: int, counters: list[int]) -> None:
    w = ReplayWindow(size)
    seen: set[int] = set()
    top = -1
    for c in counters:
        if c in seen and top - c < size:
            expected = REPLAYED
        elif c <= top - size:
            expected = STALE
        else:
            expected = ACCEPT
        assert w.check(c) == expected, (c, top)
        if expected == ACCEPT:
            w.update(c)
            seen.add(c)
            top = max(top, c)
