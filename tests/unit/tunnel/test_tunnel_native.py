"""The native data path (evio_native) against the Python one: same records, same replay verdicts, garbage dropped.

The data path tests proper (tests/unit/tunnel/test_tunnel_datapath.py) run over both
implementations; these check the pieces the native path brings along.
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import socket
import sys
from typing import Any

import pytest

from evio.config.model import Cipher
from evio.testing.datapath_pair import MTU, close, collected, frame, make_pair
from evio.testing.fake_tunnel import DatagramWire, FakeTap, FakeUnderlay
from evio.testing.waiting import wait_until
from evio.tunnel.config import TunnelSettings
from evio.tunnel.datapath import native
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.datapath.keys import EXPORTER_LEN, make_aead, split_exporter
from evio.tunnel.datapath.record import (
    KIND_CONTROL,
    KIND_FRAME,
    ControlMessage,
    ControlOpcode,
    open_,
    pack_control,
    seal,
)
from evio.tunnel.datapath.replay import ReplayWindow
from evio.tunnel.session import default_datapath_factory

pytestmark = pytest.mark.usefixtures("native_built")  # tests/unit/tunnel/conftest.py


@pytest.mark.parametrize("cipher", list(Cipher))
def test_native_records_are_the_pure_codecs(cipher: Cipher) -> None:
    key, iv = os.urandom(32), os.urandom(12)
    ours = native.native_aead(cipher, key, iv)
    theirs = make_aead(cipher, key)
    for counter, kind, payload in ((0, KIND_FRAME, frame(1)), (2**64 - 1, KIND_CONTROL, pack_control(1)), (77, KIND_FRAME, b"")):
        record = ours.seal_record(kind, 3, counter, payload)
        assert record == seal(theirs, iv, kind, 3, counter, payload)
        assert ours.open_record(record) == payload
        assert open_(theirs, iv, record)[1] == payload


def test_native_open_rejects_garbage() -> None:
    """Fuzz-ish: random bytes, truncations and single bit flips of a good record never open and never raise."""
    rng = random.Random(7)
    key, iv = os.urandom(32), os.urandom(12)
    aead = native.native_aead(Cipher.AES_256_GCM, key, iv)
    good = aead.seal_record(KIND_FRAME, 0, 5, frame(2))
    for _ in range(2000):
        junk = rng.randbytes(rng.randrange(0, 300))
        assert aead.open_record(junk) is None
    for n in range(len(good)):
        assert aead.open_record(good[:n]) is None
    for bit in range(len(good) * 8):
        flipped = bytearray(good)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert aead.open_record(bytes(flipped)) is None
    assert aead.open_record(good) == frame(2)


def test_native_replay_window_gives_the_python_verdicts() -> None:
    rng = random.Random(11)
    for size in (64, 128, 2048):
        ours, theirs = native.module().ReplayWindow(size), ReplayWindow(size)
        counter = 0
        for _ in range(5000):
            step = rng.choice((1, 1, 1, -3, -70, -size, 5, 64, 1000, -2 * size))
            counter = max(0, counter + step)
            assert ours.check(counter) == theirs.check(counter), (size, counter)
            if theirs.check(counter) == 0 and rng.random() < 0.9:
                ours.update(counter)
                theirs.update(counter)
            assert ours.top == theirs.top
        assert ours.check(2**64 - 1) == theirs.check(2**64 - 1)
    with pytest.raises(ValueError):
        native.module().ReplayWindow(100)


async def test_garbage_datagrams_into_the_native_pass_are_dropped_and_counted() -> None:
    """Random datagrams, and mangled records of the current epoch, at a native end: counted, none reach the
    TAP, and a good frame still crosses afterwards."""
    rng = random.Random(3)
    material = os.urandom(EXPORTER_LEN)
    taps, underlays, ends = [], [], []
    for is_client in (True, False):
        tap, underlay = FakeTap(), FakeUnderlay()
        dp = native.NativeFdDatapath(MTU, replay_window=128)
        controls: list[ControlMessage] = []
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, is_client), controls.append)
        taps.append(tap), underlays.append(underlay), ends.append(dp)
    wire = DatagramWire(underlays[0], underlays[1])
    wire.start()
    try:
        b = ends[1]
        sent = 0

        def all_seen() -> bool:
            s = b.stats()
            return sum(s.drops.values()) + s.foreign + s.rx_records >= sent

        for _ in range(15):  # in bursts of 20: a socket buffer holds only so many
            for _ in range(20):
                kind = rng.choice((KIND_FRAME, KIND_CONTROL, 0x70, 0x70, 0x42, 0x16, 0x00))
                wire.deliver_to_b(bytes([kind, 0]) + rng.randbytes(rng.randrange(0, 1600)))
                sent += 1
            await wait_until(all_seen)
        assert taps[1].frames() == []
        stats = b.stats()
        assert stats.rx_frames == 0 and stats.implementation == "native"
        assert stats.dropped(DropReason.FORGED) + stats.dropped(DropReason.TRUNCATED) > 0
        taps[0].send_frame(frame(9))
        got: list[bytes] = []
        await wait_until(lambda: bool(got.extend(taps[1].frames()) or got))
        assert got == [frame(9)]
    finally:
        wire.stop()
        for dp, tap, underlay in zip(ends, taps, underlays, strict=True):
            dp.stop()
            tap.close()
            underlay.close()


def test_tunnel_datapath_setting_picks_the_implementation() -> None:
    assert isinstance(default_datapath_factory(TunnelSettings(datapath="native")), native.NativeFdDatapath)
    assert isinstance(default_datapath_factory(TunnelSettings(datapath="auto")), native.NativeFdDatapath)
    python = default_datapath_factory(TunnelSettings(datapath="python"))
    assert type(python) is FdDatapath and python.stats().implementation == "python"
    assert native.pick_implementation("auto") == "native"
    assert isinstance(default_datapath_factory(TunnelSettings(datapath="native", tso=True)), native.NativeFdDatapath)


async def test_native_end_with_vnet_taps_both_ways() -> None:
    """Behind TAPs with virtio-net headers: the native TAP pass strips them (completing a partial checksum),
    the native socket pass writes each frame behind a zero header; the Python end has plain TAPs."""
    from evio.testing.tcp_frames import parse, tcp_frame
    from evio.tunnel.datapath.offload import F_NEEDS_CSUM, VNET_HDR_LEN, VnetHeader

    material = os.urandom(EXPORTER_LEN)
    taps, underlays, ends = [], [], []
    for is_client in (True, False):
        tap, underlay = FakeTap(), FakeUnderlay()
        dp = native.NativeFdDatapath(MTU, replay_window=128, gro=True) if is_client else FdDatapath(MTU, replay_window=128)
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, is_client), lambda m: None, vnet_hdr=is_client)
        taps.append(tap), underlays.append(underlay), ends.append(dp)
    wire = DatagramWire(underlays[0], underlays[1])
    wire.start()
    try:
        sent = [frame(i, 60 + i) for i in range(20)]
        for f in sent:
            taps[0].send_frame(bytes(VNET_HDR_LEN) + f)
        partial = tcp_frame(b"q" * 500, partial=True)
        taps[0].send_frame(VnetHeader(F_NEEDS_CSUM, 0, 0, 0, 34, 16).pack() + partial)
        got: list[bytes] = []
        await wait_until(lambda: len(got.__iadd__(taps[1].frames())) >= 21)
        assert got[:20] == sent
        assert parse(got[20])["tcp_ok"]
        for f in sent:
            taps[1].send_frame(f)
        back: list[bytes] = []
        await wait_until(lambda: len(back.__iadd__(taps[0].frames())) >= 20)
        assert back == [bytes(VNET_HDR_LEN) + f for f in sent]
        a = ends[0].stats()
        assert (a.implementation, a.tap_reads, a.tx_frames, a.tap_writes, a.rx_frames) == ("native", 21, 21, 20, 20)
        assert not a.drops and not ends[1].stats().drops
    finally:
        wire.stop()
        for dp, tap, underlay in zip(ends, taps, underlays, strict=True):
            dp.stop()
            tap.close()
            underlay.close()


def test_a_native_send_ring_takes_memory_only_where_a_burst_wrote() -> None:
    """The ring is an anonymous mapping: made, it is not resident (a zeroed heap allocation was, all
    94 KiB of it, whenever the allocator reused memory); a burst writes the slots it uses; released,
    it is handed back and works as before."""
    from evio.tunnel.datapath.mmsg import sockaddr

    def rss_kib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

    before = rss_kib()
    rings = [native.module().TxRing(64, MTU, sockaddr(("127.0.0.1", 9))) for _ in range(100)]
    assert rss_kib() - before < 100 * 64 * MTU // 1024 // 4  # 100 rings of 89 KiB: not a quarter of it
    assert {ring.resident() for ring in rings} == {0}
    key, iv = os.urandom(32), os.urandom(12)
    aead = native.native_aead(Cipher.AES_256_GCM, key, iv)
    tap = FakeTap()
    sender, receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(5)
        os.set_blocking(tap.fd, False)  # as the data path has it: a pass reads until EAGAIN
        ring = native.module().TxRing(64, MTU, sockaddr(receiver.getsockname()))
        for round_ in range(2):
            sent = [frame(i, MTU - 100) for i in range(20)]
            for f in sent:
                tap.send_frame(f)
            result = ring.tap_pass(tap.fd, sender.fileno(), aead, 0, 20 * round_, 2**40, 64)
            assert result[0] == 20
            assert ring.resident() >= 19 * (MTU - 100) // 4096 * 4096
            assert [aead.open_record(receiver.recv(2048)) for _ in range(20)] == sent
            ring.release()
            assert ring.resident() == 0
    finally:
        tap.close()
        sender.close()
        receiver.close()


def test_without_the_extension_auto_means_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_native", None)
    assert native.pick_implementation("auto") == "python"
    assert type(default_datapath_factory(TunnelSettings())) is FdDatapath
    with pytest.raises(ImportError):
        default_datapath_factory(TunnelSettings(datapath="native"))


# -- the native coalescer (vnet TAPs) against TcpCoalescer -------------------------------------


def _frame_sets() -> dict[str, list[list[bytes]]]:
    """Bursts of frames (each at most the MTU, so every record opens natively) for the coalescer tests of
    test_tunnel_offload.py: runs, their ends, strays, the 64 KiB limit, garbage, a stream across bursts."""
    from evio.tcpip import ACK, PSH, SYN
    from evio.testing.tcp_frames import ETH4, cut, gso, tcp_frame

    rng = random.Random(12)

    def seg(seq: int, n: int, flags: int = ACK) -> bytes:
        return tcp_frame(bytes([seq & 0xFF]) * n, seq=seq, flags=flags)

    stream = [tcp_frame(bytes([i]) * 1000, seq=i * 1000) for i in range(6)]
    return {
        "ipv4-run": [cut(tcp_frame(rng.randbytes(30000), flags=ACK | PSH, partial=True), gso(False, 1300))],
        "ipv6-run": [cut(tcp_frame(rng.randbytes(30000), flags=ACK | PSH, ipv6=True, partial=True), gso(True, 1300))],
        "psh-short-gap": [[seg(0, 1000), seg(1000, 1000), seg(2000, 1000, ACK | PSH), seg(3000, 1000), seg(4000, 500),
                           seg(4500, 1000), seg(5500, 1000), seg(7000, 1000)]],  # fmt: skip
        "streams-and-strays": [[
            tcp_frame(b"a" * 800, seq=0), tcp_frame(b"a" * 800, seq=800), tcp_frame(b"b" * 800, seq=800, sport=40001),
            tcp_frame(b"c" * 800, seq=1600, ack=6000), tcp_frame(b"", seq=0, flags=SYN), tcp_frame(b"", seq=77),
            tcp_frame(b"d" * 10, seq=2400, total_len=20 + 32 + 5), ETH4[:12] + b"\x08\x06" + bytes(28),
            tcp_frame(b"e" * 900, seq=0, window=1), tcp_frame(b"e" * 900, seq=900, window=2),
            tcp_frame(b"f" * 700, seq=0, ip_id=1), tcp_frame(b"f" * 700, seq=700, ip_id=2),  # ids may differ
        ]],
        "up-to-64k": [[tcp_frame(bytes(1374), seq=i * 1374) for i in range(60)]],
        "garbage": [[rng.randbytes(rng.randrange(14, 160)) for _ in range(30)]
                    + [tcp_frame(b"z" * 100)[: rng.randrange(14, 160)] for _ in range(30)]],  # fmt: skip
        "across-bursts": [stream[:2], stream[2:3], stream[3:]],
    }


FRAME_SETS = _frame_sets()


async def _tap_writes(implementation: str, material: bytes, bursts: list[list[bytes]]) -> tuple[list[bytes], tuple[int, int]]:
    """What a receiving end on a vnet TAP writes for these bursts of records from a Python sender (the
    pure codec), each burst queued whole before the end reads: one receive pass per burst."""
    tap, underlay = FakeTap(), FakeUnderlay()
    dp = native.NativeFdDatapath(MTU, replay_window=128) if implementation == "native" else FdDatapath(MTU, replay_window=128)
    dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, False), lambda m: None, vnet_hdr=True)
    keys = split_exporter(material, Cipher.AES_256_GCM, True).tx.keys()
    aead = make_aead(Cipher.AES_256_GCM, keys.key)
    sent = 0
    writes: list[bytes] = []
    try:
        for burst in bursts:
            for f in burst:
                underlay.send_to_datapath(seal(aead, keys.iv, KIND_FRAME, 0, sent, f))
                sent += 1
            await wait_until(lambda sent=sent: dp.stats().rx_frames == sent)  # type: ignore[misc]  # the pass wrote the burst by then
            writes += tap.frames()
        stats = dp.stats()
        assert stats.implementation == implementation and not stats.drops
        return writes, (stats.tap_writes, stats.gro_writes)
    finally:
        dp.stop()
        tap.close()
        underlay.close()


@pytest.mark.parametrize("name", list(FRAME_SETS))
async def test_native_receiver_on_a_vnet_tap_writes_what_the_python_one_does(name: str) -> None:
    """Byte for byte, vnet headers included: the native receive pass joins TCP segments as TcpCoalescer."""
    from evio.tunnel.datapath.offload import GSO_NONE, TcpCoalescer

    bursts = FRAME_SETS[name]
    material = os.urandom(EXPORTER_LEN)
    ours, our_counts = await _tap_writes("native", material, bursts)
    theirs, their_counts = await _tap_writes("python", material, bursts)
    expected: list[bytes] = []
    coalescer = TcpCoalescer(lambda data: expected.append(bytes(data)), MTU + 14)
    for burst in bursts:
        for f in burst:
            coalescer.add(memoryview(f))
        coalescer.flush()
    assert ours == theirs == expected
    assert our_counts == their_counts == (len(expected), sum(w[1] != GSO_NONE for w in expected))
    if name != "garbage":
        assert our_counts[1] >= 1  # each of the other sets has a run to join


async def test_the_event_loop_calls_the_rings_and_a_plain_pass_runs_no_python() -> None:
    """Decision 0077: the readers the loop holds are the native rings, and a pass with nothing for Python
    (a frame record of the current epoch one way, a frame off the TAP the other) calls no Python function."""
    if not native.bound():
        pytest.skip("evio_native older than 0077: the event loop calls the Python passes")
    pair = await make_pair("native")
    try:
        a, b = pair.a, pair.b
        sender, receiver = a.datapath, b.datapath
        assert isinstance(sender, native.NativeFdDatapath) and isinstance(receiver, native.NativeFdDatapath)
        assert receiver._native_rx is not None and receiver._sock_reader is receiver._native_rx.native
        loop = asyncio.get_running_loop()
        loop.remove_reader(a.tap.fd)  # the passes below are called by hand, under the profiler
        loop.remove_reader(b.underlay.sock.fileno())
        tap_reader, sock_reader = sender._readers()[1], receiver._sock_reader
        assert tap_reader is sender._native_tx
        a.tap.send_frame(frame(1))
        await wait_until(lambda: _readable(a.tap.fd))
        calls: list[str] = []

        def profile(frame_: Any, event: str, arg: Any) -> None:
            if event == "call":
                calls.append(frame_.f_code.co_name)

        sys.setprofile(profile)
        try:
            sent = tap_reader()
        finally:
            sys.setprofile(None)
        assert sent == 1
        await wait_until(lambda: _readable(b.underlay.sock.fileno()))
        sys.setprofile(profile)
        try:
            delivered = sock_reader()
        finally:
            sys.setprofile(None)
        assert delivered == 1 and calls == []
        assert b.tap.frames() == [frame(1)]
        assert sender.stats().tx_frames == 1 and receiver.stats().rx_frames == 1
    finally:
        close(pair)


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


async def test_bound_passes_keep_the_counters_and_the_nonces() -> None:
    """What the rings send and deliver without Python is in the stats, and a control record sealed in Python
    after them takes the next counter: B opens it (a counter used twice would be dropped as replayed)."""
    if not native.bound():
        pytest.skip("evio_native older than 0077: the event loop calls the Python passes")
    pair = await make_pair("native")
    try:
        a, b = pair.a, pair.b
        got: list[bytes] = []
        for i in range(5):
            a.tap.send_frame(frame(i))
        await wait_until(collected(b.tap, got, 5))
        sa, sb = a.datapath.stats(), b.datapath.stats()
        assert (sa.tx_frames, sb.rx_frames, sa.tx_bytes, sb.rx_bytes) == (5, 5, 1000, 1000)
        assert a.datapath._tx_counter == 5
        a.datapath.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 1, 7, b""))
        await wait_until(lambda: len(b.control) == 1)
        assert b.datapath.stats().drops == {}
        a.datapath.rekey()
        a.tap.send_frame(frame(9))
        await wait_until(collected(b.tap, got, 6))
        a.tap.send_frame(frame(10))  # B moved to the new epoch in Python; its ring opens this one
        await wait_until(collected(b.tap, got, 7))
        assert got[5:] == [frame(9), frame(10)] and a.datapath.stats().tx_frames == 7
        assert b.datapath.stats().rx_frames == 7 and b.datapath.stats().drops == {}
    finally:
        close(pair)
