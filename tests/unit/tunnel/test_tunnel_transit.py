"""The transit fast path in the data path: its table, and frames going tunnel to tunnel past the TAPs.

Two tunnel pairs over fake TAPs and socketpairs stand for a transit node M
between X and Y: X <-> M.a and M.b <-> Y. With an entry (M.a, dst, src) -> M.b
a frame X sends comes out of Y's TAP and never out of M's. M's data paths are
the Python and the native ones in turn (the native one notes frames by their
entry in its receive pass and the egress's native ring seals each run, 0069;
a build without routes hands them back to the hook, filtered by destination).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evio.sdn.frb import ETH_TYPE_FRB
from evio.testing.datapath_pair import (
    MTU,
    Pair,
    close,
    collected,
    make_pair,
    make_vnet_pair,
)
from evio.testing.virtual_clock import ManualTime
from evio.testing.waiting import wait_until
from evio.tunnel.datapath.native import NativeFdDatapath
from evio.tunnel.datapath.transit_table import TransitPort, TransitTable

DST = bytes.fromhex("020000000002")
SRC = bytes.fromhex("020000000001")
OTHER = bytes.fromhex("0200000000ff")


def frame(i: int, dst: bytes = DST, src: bytes = SRC, ethertype: int = 0x0800, size: int = 200) -> bytes:
    return (dst + src + ethertype.to_bytes(2, "big") + i.to_bytes(4, "big")).ljust(size, b"\xab")


class Egress:
    def __init__(self, takes: bool = True) -> None:
        self.takes = takes
        self.frames: list[bytes] = []
        self.flushes = 0

    def accept_plain(self, frame: memoryview) -> bool:
        if self.takes:
            self.frames.append(bytes(frame))
        return self.takes

    def flush_plain(self) -> None:
        self.flushes += 1


# -- the table alone ------------------------------------------------------------------------------


def test_a_frame_takes_the_entry_keyed_like_the_flow_and_nothing_else() -> None:
    clock = ManualTime()
    table = TransitTable(excluded_ethertypes=(ETH_TYPE_FRB,), clock=clock)
    out = Egress()
    hook = table.attach("a", Egress())
    table.attach("b", out)
    assert table.add("a", DST, SRC, "b", deadline=clock.now + 10)
    assert hook(memoryview(frame(1)))
    assert not hook(memoryview(frame(2, src=OTHER)))  # another source: another flow
    assert not hook(memoryview(frame(3, dst=OTHER)))
    assert not hook(memoryview(frame(4, ethertype=ETH_TYPE_FRB)))  # the bridge gives FRBs to the controller
    assert table.attach("c", Egress())(memoryview(frame(5))) is False  # another ingress
    table.flush()
    assert [f[14:18] for f in out.frames] == [(1).to_bytes(4, "big")]
    assert out.flushes == 1
    assert table.counters().forwarded == 1


def test_group_destinations_and_unattached_ingress_are_refused() -> None:
    table = TransitTable()
    table.attach("a", Egress())
    assert not table.add("a", bytes.fromhex("ffffffffffff"), SRC, "b", 1e9)
    assert not table.add("a", bytes.fromhex("01005e000001"), SRC, "b", 1e9)
    assert table.counters().refused_group == 2
    assert not table.add("nowhere", DST, SRC, "b", 1e9)
    assert not table.add("a", DST, SRC, "a", 1e9)  # never back out of the way it came
    assert len(table) == 0


def test_the_table_is_bounded() -> None:
    table = TransitTable(max_entries=3)
    table.attach("a", Egress())
    added = [table.add("a", DST, i.to_bytes(6, "big"), "b", 1e9) for i in range(2, 7)]
    assert added == [True, True, True, False, False]
    assert table.counters().refused_full == 2
    assert table.add("a", DST, (2).to_bytes(6, "big"), "c", 1e9)  # an existing entry may change
    assert len(table) == 3


def test_an_entry_past_its_deadline_leaves_the_frame_to_the_bridge_but_counts_the_hit() -> None:
    clock = ManualTime()
    table = TransitTable(clock=clock)
    hook = table.attach("a", Egress())
    table.attach("b", Egress())
    table.add("a", DST, SRC, "b", deadline=clock.now + 5)
    assert hook(memoryview(frame(1)))
    clock.now += 5
    assert not hook(memoryview(frame(2)))
    route = table.get("a", DST, SRC)
    assert route is not None and route.hits == 2
    assert table.counters().expired == 1


def test_an_egress_gone_or_refusing_leaves_the_frame_to_the_bridge() -> None:
    table = TransitTable()
    hook = table.attach("a", Egress())
    refusing = Egress(takes=False)
    table.attach("b", refusing)
    table.add("a", DST, SRC, "b", 1e9)
    assert not hook(memoryview(frame(1)))
    table.detach("b", refusing)
    assert table.get("a", DST, SRC) is None  # detaching an egress takes the entries towards it
    assert table.counters().no_egress == 1


def test_removals_by_flow_port_destination_and_all() -> None:
    table = TransitTable()
    for tap in ("a", "b", "c"):
        table.attach(tap, Egress())
    table.add("a", DST, SRC, "b", 1e9)
    table.add("c", DST, SRC, "b", 1e9)
    table.add("a", OTHER, SRC, "c", 1e9)
    table.add("b", SRC, DST, "a", 1e9)
    assert table.remove("a", OTHER, SRC) and not table.remove("a", OTHER, SRC)
    assert table.remove_dst(DST) == 2
    assert table.remove_port("a") == 1
    table.add("a", DST, SRC, "b", 1e9)
    assert table.clear() == 1
    assert len(table) == 0 and list(table.entries()) == []


def test_a_newer_data_path_on_the_same_tap_is_not_detached_by_the_old_one() -> None:
    table = TransitTable()
    old, new = Egress(), Egress()
    table.attach("b", old)
    hook = table.attach("a", Egress())
    table.attach("b", new)
    table.add("a", DST, SRC, "b", 1e9)
    table.detach("b", old)
    assert hook(memoryview(frame(1)))
    table.flush()
    assert len(new.frames) == 1


def test_the_prefilter_moves_with_the_destinations_only() -> None:
    table = TransitTable()
    table.attach("a", Egress())
    table.attach("b", Egress())
    changed = table.destinations("a")
    first = changed(-1)
    assert first is not None and first[1] == b""
    assert changed(first[0]) is None
    table.add("a", DST, SRC, "b", 1e9)
    table.add("a", DST, OTHER, "b", 1e9)
    table.add("b", OTHER, SRC, "a", 1e9)  # another ingress's destination is not a's
    now = changed(first[0])
    assert now is not None and now[1] == DST
    table.add("a", DST, SRC, "b", 2e9)  # a refresh moves the deadline, not the destinations
    assert changed(now[0]) is None
    table.remove_port("a")
    after = changed(now[0])
    assert after is not None and after[1] == b""


def test_a_run_of_one_entry_is_checked_and_counted_as_its_frames_one_by_one() -> None:
    """``run`` (a native ingress's runs, 0069): no entry, expired or no egress -> 0, take not asked;
    otherwise what the egress took, the rest counted as refused."""
    clock = ManualTime()
    table = TransitTable(clock=clock)
    hook = table.attach("a", Egress())
    out = Egress()
    table.attach("b", out)
    asked: list[object] = []

    def take(n: int) -> Callable[[object], int]:
        def taking(egress: object) -> int:
            asked.append(egress)
            return n

        return taking

    key = DST + SRC
    assert hook.run(key, 5, take(5)) == 0 and asked == []  # type: ignore[attr-defined]
    table.add("a", DST, SRC, "b", deadline=clock.now + 10)
    assert hook.run(key, 5, take(5)) == 5 and asked == [out]  # type: ignore[attr-defined]
    assert hook.run(key, 4, take(3)) == 3  # type: ignore[attr-defined]
    table.flush()
    assert out.flushes == 1
    clock.now += 11
    assert hook.run(key, 2, take(2)) == 0 and len(asked) == 2  # type: ignore[attr-defined]
    counters = table.counters()
    assert (counters.forwarded, counters.no_egress, counters.expired) == (8, 1, 2)
    assert table.get("a", DST, SRC).hits == 11  # type: ignore[union-attr]
    keys = table.destinations("a").keys(-1)  # type: ignore[attr-defined]
    assert keys is not None and keys[1] == [key]


def _held(ring: object) -> int:
    """What a native ring holds for the fast path: its keys where the build has routes, else destinations."""
    return int(getattr(ring, "transit_routes", getattr(ring, "transit_destinations", 0)))


# -- through real data paths ----------------------------------------------------------------------


async def _transit_node(implementation: str, vnet: bool, prefilter: bool = True) -> tuple[Pair, Pair, TransitTable]:
    """X <-> M.a and M.b <-> Y; M's two data paths share one table. M's ends are the pairs' client
    ends (``a``: the native ones under the native implementation); ``prefilter``: the hook comes with
    the table's destinations, as a session sets it (without, a native pass hands back every frame)."""
    if vnet:
        left, right = await make_vnet_pair(implementation, True, True), await make_vnet_pair(implementation, True, True)
    else:
        left, right = await make_pair(implementation), await make_pair(implementation)
    table = TransitTable(excluded_ethertypes=(ETH_TYPE_FRB,))
    for tap, end in (("ma", left.a), ("mb", right.a)):
        assert isinstance(end.datapath, TransitPort)
        end.datapath.set_transit(table.attach(tap, end.datapath), table.flush,
                                 table.destinations(tap) if prefilter else None)  # fmt: skip
    return left, right, table


@pytest.mark.parametrize("prefilter", [True, False], ids=["prefilter", "no-prefilter"])
@pytest.mark.parametrize("vnet", [False, True], ids=["plain-taps", "vnet-taps"])
async def test_transit_frames_skip_the_middle_taps_until_the_entry_goes(implementation: str, vnet: bool, prefilter: bool) -> None:
    """With vnet TAPs (tunnel.offload) too: the records carry frames of the MTU, so the fast path sees
    frames, never super-frames, and the TAPs at the ends join and cut as they always do."""
    from evio.tunnel.datapath.offload import VNET_HDR_LEN

    left, right, table = await _transit_node(implementation, vnet, prefilter)
    x, m_in, m_out, y = left.b, left.a, right.a, right.b
    assert m_in.datapath.implementation == m_out.datapath.implementation == implementation
    header = bytes(VNET_HDR_LEN) if vnet else b""
    try:
        table.add("ma", DST, SRC, "mb", 1e18)
        sent = [frame(i) for i in range(40)]
        got: list[bytes] = []
        for i in range(0, 40, 10):  # bursts of 10: a socketpair holds fewer datagrams than a TAP queue
            for f in sent[i : i + 10]:
                x.tap.send_frame(header + f)
            await wait_until(collected(y.tap, got, i + 10))
        assert got == [header + f for f in sent]
        assert m_in.tap.frames() == []
        s_in, s_out = m_in.datapath.stats(), m_out.datapath.stats()
        assert (s_in.rx_frames, s_in.transit_frames, s_in.tap_writes) == (40, 40, 0)
        assert s_out.tx_frames == 40 and s_out.tap_reads == 0
        assert table.counters().forwarded == 40
        # Opened once, its replay window moved once: a second open would have counted a replay.
        assert not s_in.drops and not s_out.drops

        # To the same destination from another source (no entry), and to another destination: M's TAP.
        x.tap.send_frame(header + frame(50, src=OTHER))
        x.tap.send_frame(header + frame(51, dst=OTHER))
        to_tap: list[bytes] = []
        await wait_until(collected(m_in.tap, to_tap, 2))
        # (A native pass writes its own frames of a burst before those it handed back: compare as sets.)
        assert sorted(to_tap) == sorted([header + frame(50, src=OTHER), header + frame(51, dst=OTHER)])
        s_in = m_in.datapath.stats()
        assert (s_in.rx_frames, s_in.transit_frames, s_in.tap_writes, s_in.drops) == (42, 40, 2, {})
        if implementation == "native" and prefilter:
            native_ring = m_in.datapath._native_rx  # type: ignore[attr-defined]
            assert _held(native_ring.native) == 1

        # The entry goes (its flow was deleted): the next frames take M's TAP, as before.
        assert table.remove("ma", DST, SRC)
        for i in range(5):
            x.tap.send_frame(header + frame(100 + i))
        through_bridge: list[bytes] = []
        await wait_until(collected(m_in.tap, through_bridge, 5))
        assert m_in.datapath.stats().transit_frames == 40
        assert y.tap.frames() == []
        if implementation == "native" and prefilter:
            assert _held(native_ring.native) == 0
    finally:
        close(left)
        close(right)


async def test_a_native_pass_without_a_hook_hands_nothing_back(implementation: str) -> None:
    """set_transit(None) after a hook: every frame goes to the TAP natively again."""
    left, right, table = await _transit_node(implementation, False, prefilter=False)
    try:
        table.add("ma", DST, SRC, "mb", 1e18)
        left.a.datapath.set_transit(None)
        left.b.tap.send_frame(frame(1))
        got: list[bytes] = []
        await wait_until(collected(left.a.tap, got, 1))
        assert left.a.datapath.stats().transit_frames == 0 and table.counters().forwarded == 0
        if isinstance(left.a.datapath, NativeFdDatapath):
            assert left.a.datapath._native_rx is not None
            assert _held(left.a.datapath._native_rx.native) == 0
    finally:
        close(left)
        close(right)


async def test_a_frame_larger_than_the_egress_carries_goes_to_the_tap(implementation: str) -> None:
    left, right, table = await _transit_node(implementation, False)
    try:
        small = right.a.datapath
        small._max_frame = 100  # an egress tunnel with a smaller MTU than the ingress one
        small.set_path_mtu(None)  # its largest frame, in its native ring too
        table.add("ma", DST, SRC, "mb", 1e18)
        left.b.tap.send_frame(frame(1, size=MTU))
        got: list[bytes] = []
        await wait_until(collected(left.a.tap, got, 1))
        assert table.counters().no_egress == 1
        assert left.a.datapath.stats().transit_frames == 0
    finally:
        close(left)
        close(right)


async def test_without_a_hook_every_frame_goes_to_the_tap() -> None:
    pair = await make_pair()
    try:
        pair.a.tap.send_frame(frame(1))
        got: list[bytes] = []
        await wait_until(collected(pair.b.tap, got, 1))
        stats = pair.b.datapath.stats()
        assert (stats.transit_frames, stats.tap_writes) == (0, 1)
    finally:
        close(pair)


def test_switched_off_the_table_drops_its_entries_and_takes_none_until_switched_on() -> None:
    table = TransitTable()
    hook = table.attach("a", Egress())
    table.attach("b", Egress())
    table.add("a", DST, SRC, "b", 1e9)
    table.set_enabled(False)
    assert len(table) == 0 and not hook(memoryview(frame(1)))
    assert not table.add("a", DST, SRC, "b", 1e9)
    table.set_enabled(True)
    assert table.add("a", DST, SRC, "b", 1e9) and hook(memoryview(frame(2)))


@pytest.mark.usefixtures("native_built")
def test_the_native_prefilter_is_bounded_and_checked() -> None:
    """The destinations come from the table (at most MAX_ENTRIES); anything else is refused."""
    from evio.tunnel.datapath.native import _NativeRecvRing
    from evio.tunnel.datapath.transit_table import MAX_ENTRIES

    ring = _NativeRecvRing(4, 2048).native
    ring.set_transit(DST + OTHER + DST)
    assert ring.transit_destinations == 2
    for bad in (DST[:5], bytes(6 * (MAX_ENTRIES + 1))):
        with pytest.raises(ValueError):
            ring.set_transit(bad)
    ring.set_transit(b"".join(i.to_bytes(6, "big") for i in range(MAX_ENTRIES)))
    assert ring.transit_destinations == MAX_ENTRIES


@pytest.mark.usefixtures("native_built")
async def test_native_runs_keep_frb_out_rekey_midway_and_fall_back_to_a_python_egress() -> None:
    """Routes (0069): an FRB with an entry's key goes to the bridge; an egress whose record limit
    falls inside a run rekeys and goes on (every frame arrives, none replayed); a Python egress takes
    the run frame by frame."""
    left, right = await make_pair("native"), await make_pair("native")
    python_right = await make_pair("python")
    table = TransitTable(excluded_ethertypes=(ETH_TYPE_FRB,))
    try:
        m_in = left.a.datapath
        assert isinstance(m_in, NativeFdDatapath) and m_in._native_rx is not None
        for tap, dp in (("ma", m_in), ("mb", right.a.datapath), ("mp", python_right.b.datapath)):
            assert isinstance(dp, TransitPort)
            dp.set_transit(table.attach(tap, dp), table.flush, table.destinations(tap))
        if not hasattr(m_in._native_rx.native, "set_transit_routes"):
            pytest.skip("evio_native older than 0069: run scripts/build-native")
        table.add("ma", DST, SRC, "mb", 1e18)
        egress = right.a.datapath
        egress._tx_limit = egress._tx_counter + 7  # the next epoch midway through the first run
        sent = [frame(i) for i in range(30)]
        got: list[bytes] = []
        for i in range(0, 30, 10):
            for f in sent[i : i + 10]:
                left.b.tap.send_frame(f)
            await wait_until(collected(right.b.tap, got, i + 10))
        assert got == sent
        assert egress._tx_secret is not None and egress._tx_secret.epoch >= 1
        assert not right.b.datapath.stats().drops and not egress.stats().drops
        assert m_in.stats().transit_frames == 30 and left.a.tap.frames() == []

        left.b.tap.send_frame(frame(40, ethertype=ETH_TYPE_FRB))
        bridge: list[bytes] = []
        await wait_until(collected(left.a.tap, bridge, 1))
        assert bridge == [frame(40, ethertype=ETH_TYPE_FRB)] and m_in.stats().transit_frames == 30

        table.add("ma", DST, OTHER, "mp", 1e18)  # another source, to the Python egress
        for i in range(5):
            left.b.tap.send_frame(frame(50 + i, src=OTHER))
        to_python: list[bytes] = []
        await wait_until(collected(python_right.a.tap, to_python, 5))
        assert to_python == [frame(50 + i, src=OTHER) for i in range(5)]
        assert table.counters().forwarded == 35 and table.counters().no_egress == 0
    finally:
        for pair in (left, right, python_right):
            close(pair)
