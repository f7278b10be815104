"""FlowBook: flows booked on behalf of the port whose frame caused them, capped per port."""

from __future__ import annotations

from evio.sdn.flow_actions import FlowMatch
from evio.sdn.flow_book import FlowBook

LEAF, HOSTILE, HONEST = 1, 2, 3


def pair(port: int, src: str, dst: str, out: int) -> tuple[FlowMatch, FlowMatch]:
    """A flow entering by `port` and its way back, entering by `out`."""
    return FlowMatch(port, src, dst), FlowMatch(out, dst, src)


def test_a_way_back_is_charged_to_the_port_that_caused_it_and_only_its_additions_evict_it() -> None:
    book = FlowBook(max_per_port=4)
    honest, honest_back = pair(HONEST, "02:00:00:00:00:01", "02:00:00:00:00:10", LEAF)
    assert book.add(honest, LEAF) == [] and book.add(honest_back, HONEST, charged_to=HONEST) == []
    evicted = []
    for i in range(10):  # a member reaching the leaf from invented sources: 2 flows a frame
        flow, back = pair(HOSTILE, f"02:66:00:00:00:{i:02x}", "02:00:00:00:00:10", LEAF)
        evicted += book.add(flow, LEAF) + book.add(back, HOSTILE, charged_to=HOSTILE)
    assert book.count(HOSTILE) == 4 and book.count(HONEST) == 2 and book.count(LEAF) == 0
    assert len(evicted) == 16 and honest not in evicted and honest_back not in evicted
    assert len(book) == 6


def test_a_flow_installed_again_the_same_way_keeps_its_charge_and_becomes_the_newest() -> None:
    book = FlowBook(max_per_port=2)
    flow, back = pair(LEAF, "02:00:00:00:00:01", "02:00:00:00:00:02", HONEST)
    book.add(flow, HONEST)
    book.add(back, LEAF, charged_to=LEAF)
    assert book.add(back, LEAF) == []  # the answer's own packet-in (after its flow idled out, say)
    assert book.count(LEAF) == 2 and book.count(HONEST) == 0
    # Leading elsewhere now: booked anew, on behalf of the port it enters by (no charge given).
    assert book.add(back, LEAF + 10) == [] and book.count(LEAF) == 1 and book.count(HONEST) == 1


def test_a_port_that_goes_takes_the_ways_back_it_caused_and_those_through_it() -> None:
    book = FlowBook(max_per_port=8)
    flow, back = pair(HOSTILE, "02:66:00:00:00:01", "02:00:00:00:00:10", LEAF)
    book.add(flow, LEAF, charged_to=HOSTILE)
    book.add(back, HOSTILE, charged_to=HOSTILE)
    book.forget_port(HOSTILE)
    assert len(book) == 0 and book.count(HOSTILE) == 0


def test_a_way_back_says_its_source_speaks_only_once_it_outlived_its_idle_timeout() -> None:
    """A flow from a MAC vouches for the MAC's place (decision 0034); a way back was installed before any frame
    of its source came, so only its still being there after its idle timeout says that frame came. Else a
    member sending to a host that left would keep the host's old place speaking, and its move refused."""
    book = FlowBook(max_per_port=8)
    remote, local = "02:66:00:00:00:01", "02:00:00:00:00:10"
    flow, back = pair(LEAF, local, remote, HONEST)
    book.add(flow, HONEST)
    book.add(back, LEAF, charged_to=LEAF, proves_from=17.0)  # installed at 10, idles out 5 s after its last use
    assert not book.sends_from(remote, HONEST, 16.9)
    assert book.sends_from(remote, HONEST, 17.0)
    book.add(back, LEAF, charged_to=LEAF, proves_from=27.0)  # installed again at 20: its idle timer restarts
    assert not book.sends_from(remote, HONEST, 26.0)
    own = FlowMatch(HONEST, remote, "02:00:00:00:00:11")  # installed by the remote MAC's own frame
    book.add(own, LEAF)
    assert book.sends_from(remote, HONEST, 20.0)
