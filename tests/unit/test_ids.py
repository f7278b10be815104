import pytest

from evio.ids import (
    MAX_NODE_ID,
    RING_SIZE,
    NodeIdError,
    clockwise_distance,
    format_node_id,
    parse_node_id,
    sorted_clockwise,
    strictly_between,
)


def test_parse_and_format_round_trip() -> None:
    text = "0123456789abcdef0123456789ABCDEF"
    nid = parse_node_id(text)
    assert nid == 0x0123456789ABCDEF0123456789ABCDEF
    assert format_node_id(nid) == text.lower()
    assert format_node_id(0) == "0" * 32
    assert parse_node_id("f" * 32) == MAX_NODE_ID


@pytest.mark.parametrize("bad", ["", "abc", "g" * 32, "0" * 31, "0" * 33, " " + "0" * 31, "0x" + "0" * 30])
def test_parse_rejects_malformed(bad: str) -> None:
    with pytest.raises(NodeIdError):
        parse_node_id(bad)


def test_format_rejects_out_of_range() -> None:
    with pytest.raises(NodeIdError):
        format_node_id(RING_SIZE)
    with pytest.raises(NodeIdError):
        format_node_id(-1)


def test_clockwise_distance_wraps() -> None:
    assert clockwise_distance(10, 30) == 20
    assert clockwise_distance(30, 10) == RING_SIZE - 20
    assert clockwise_distance(MAX_NODE_ID, 0) == 1
    assert clockwise_distance(5, 5) == 0


def test_sorted_clockwise_starts_after_origin_and_wraps() -> None:
    assert sorted_clockwise(30, [10, 40, 30, 63, 10]) == [30, 40, 63, 10]


def test_strictly_between_is_open_and_clockwise() -> None:
    assert strictly_between(20, 10, 30)
    assert not strictly_between(10, 10, 30)
    assert not strictly_between(30, 10, 30)
    assert strictly_between(5, 60, 10)  # wraps past zero
    assert not strictly_between(20, 60, 10)
    assert not strictly_between(20, 10, 10)  # empty arc
