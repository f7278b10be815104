from evio.sdn.flooding_bounds import forward_bounds, root_bounds


def test_root_bounds_match_paper_figure_2() -> None:
    # Fig. 2: node 0 with neighbours 1, 10, 30 (and 45): NID 1 covers [1,10), NID 10 covers [10,30).
    assert root_bounds(0, [30, 1, 10, 45]) == {1: 10, 10: 30, 30: 45, 45: 0}


def test_root_bounds_wrap_clockwise_from_root() -> None:
    assert root_bounds(40, [10, 50, 30]) == {50: 10, 10: 30, 30: 40}
    assert root_bounds(40, []) == {}
    assert root_bounds(40, [40, 7]) == {7: 40}


def test_forwarder_only_uses_neighbours_inside_its_arc() -> None:
    # node 10 got bound 30: neighbours 12 and 20 are inside, 0, 30 and 45 are not.
    assert forward_bounds(10, 30, [0, 12, 20, 30, 45]) == {12: 20, 20: 30}


def test_forwarder_arc_wraps_past_zero() -> None:
    assert forward_bounds(60, 5, [62, 2, 5, 30]) == {62: 2, 2: 5}


def test_forwarder_never_sends_back_to_ingress() -> None:
    assert forward_bounds(10, 30, [12, 20], ingress=12) == {20: 30}


def test_forwarder_with_bound_at_its_successor_forwards_nothing() -> None:
    assert forward_bounds(10, 11, [11, 40]) == {}
