"""A figure far below those measured beside it is broken, not slow."""

from __future__ import annotations

from evio.lab.outliers import BROKEN_FRACTION, far_below


def test_a_collapsed_data_path_is_far_below_and_a_slow_one_is_not() -> None:
    # The figures of issue 25's run: native 3100, Python 700, Python without offloads 300, a collapse at 0.057.
    mbit = {"native": 3100.0, "python": 700.0, "python-no-offload": 300.0, "collapsed": 0.057}
    assert far_below(mbit) == {"collapsed": 500.0}
    assert far_below({k: v for k, v in mbit.items() if k != "collapsed"}) == {}


def test_the_fraction_is_of_the_median_and_nothing_is_compared_alone() -> None:
    assert far_below({"a": 100.0, "b": 100.0, "c": 100 * BROKEN_FRACTION}) == {}  # at the line: not under it
    assert far_below({"a": 100.0, "b": 100.0, "c": 4.9}) == {"c": 100.0}
    assert far_below({"only": 0.0}) == {}
    assert far_below({}) == {}
