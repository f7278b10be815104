"""A tunnel's buffers cost memory where traffic wrote them, stay bounded, and go back when it stops."""

from __future__ import annotations

import mmap
import os

import pytest

from evio.config.model import Cipher
from evio.testing.datapath_pair import MTU, frame
from evio.testing.fake_tunnel import DatagramWire, FakeTap, FakeUnderlay
from evio.testing.waiting import wait_until
from evio.tunnel.datapath import native
from evio.tunnel.datapath.buffers import LAZY_MIN, release, resident, zeroed
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.fd_state import TRIM_AFTER
from evio.tunnel.datapath.keys import EXPORTER_LEN, split_exporter
from evio.tunnel.datapath.offload import VNET_HDR_LEN

KIB = 1024


def test_a_large_buffer_is_resident_only_where_written_and_released() -> None:
    assert isinstance(zeroed(LAZY_MIN - 1), bytearray)
    buffer = zeroed(1024 * KIB)
    assert isinstance(buffer, mmap.mmap) and len(buffer) == 1024 * KIB
    assert resident(buffer) == 0
    buffer[0] = 1
    buffer[300 * KIB] = 2
    assert resident(buffer) == 2 * mmap.PAGESIZE
    release(buffer)
    assert resident(buffer) == 0
    assert buffer[0] == 0 and buffer[300 * KIB] == 0  # usable again, zeroed
    buffer.close()


def make_datapath(implementation: str, trim_after: float = TRIM_AFTER) -> FdDatapath:
    if implementation == "native":
        return native.NativeFdDatapath(MTU, replay_window=128, gro=True, trim_after=trim_after)
    return FdDatapath(MTU, replay_window=128, gro=True, trim_after=trim_after)


@pytest.mark.parametrize("vnet", [False, True])
async def test_an_idle_tunnel_holds_a_few_pages_of_its_buffers_and_none_once_stopped(implementation: str, vnet: bool) -> None:
    """GRO on (real UDP sockets on loopback): the receive ring is 16 slots of 64 KiB, the send ring 64
    records; a few small frames each way touch a few pages of them. One receive ring per data path:
    the native one replaces Python's, it is not made beside it. With ``vnet``, TAP reads and writes carry
    a virtio-net header (and the TAP read buffers are 64 KiB)."""
    header = bytes(VNET_HDR_LEN) if vnet else b""
    material = os.urandom(EXPORTER_LEN)
    taps, underlays, ends = [], [], []
    for is_client in (True, False):
        tap, underlay = FakeTap(), FakeUnderlay()
        dp = make_datapath(implementation)
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, is_client), lambda m: None, vnet_hdr=vnet)
        taps.append(tap)
        underlays.append(underlay)
        ends.append(dp)
    wire = DatagramWire(underlays[0], underlays[1])
    wire.start()
    try:
        for direction in ((0, 1), (1, 0)):
            sent = [frame(i, 80 + i) for i in range(20)]
            for f in sent:
                taps[direction[0]].send_frame(header + f)
            got: list[bytes] = []
            await wait_until(lambda d=direction, g=got: len(g.__iadd__(taps[d[1]].frames())) >= 20)  # type: ignore[misc]
            assert got == [header + f for f in sent]
        for dp in ends:
            buffers = dp.buffers()
            mapped = sum(len(b) for b in buffers)
            # The rings at full size: a burst at full rate still fits (16 x 64 KiB received, 64 records sent) ...
            assert mapped >= 16 * 64 * KIB + 64 * MTU
            # ... but not twice over (a native receive ring beside Python's was 1 MiB more per tunnel).
            assert mapped <= 1536 * KIB
            # 40 small frames touched a few pages: at most 16 slot starts received, 20 slots sent, a page of each
            # TAP buffer (each buffer zeroed up front was all of it: over 1 MiB).
            assert sum(resident(b) for b in buffers) <= 192 * KIB
        for dp in ends:
            buffers = dp.buffers()
            dp.stop()
            assert sum(resident(b) for b in buffers) == 0
    finally:
        wire.stop()
        for dp, tap, underlay in zip(ends, taps, underlays, strict=True):
            dp.stop()
            tap.close()
            underlay.close()


async def test_a_tunnel_idle_after_a_burst_hands_its_pages_back_and_carries_traffic_after(implementation: str) -> None:
    """Full frames both ways fill pages of the rings; two maintain ticks without a frame in between
    (trim_after 0) release them; frames cross again, sealed and opened as before."""
    material = os.urandom(EXPORTER_LEN)
    taps, underlays, ends = [], [], []
    for is_client in (True, False):
        tap, underlay = FakeTap(), FakeUnderlay()
        dp = make_datapath(implementation, trim_after=0.0)
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, is_client), lambda m: None)
        taps.append(tap)
        underlays.append(underlay)
        ends.append(dp)
    wire = DatagramWire(underlays[0], underlays[1])
    wire.start()

    async def cross(first: int, count: int, size: int) -> None:
        for direction in ((0, 1), (1, 0)):
            for at in range(first, first + count, 20):  # 20 at a time: the fake TAP's socket buffer is small
                sent = [frame(i, size) for i in range(at, at + 20)]
                for f in sent:
                    taps[direction[0]].send_frame(f)
                got: list[bytes] = []
                await wait_until(lambda d=direction, g=got: len(g.__iadd__(taps[d[1]].frames())) >= 20)  # type: ignore[misc]
                assert got == sent

    try:
        await cross(0, 100, MTU)
        busy = [sum(resident(b) for b in dp.buffers()) for dp in ends]
        assert all(r >= 16 * mmap.PAGESIZE for r in busy), busy
        # The native send ring (Rust's own mapping, 64 records): bursts of 20 full frames wrote slots 0-19.
        native_rings = [dp._native_tx for dp in ends if isinstance(dp, native.NativeFdDatapath)]
        assert all(ring.resident() >= 4 * mmap.PAGESIZE for ring in native_rings)
        for dp in ends:
            dp.maintain()  # frames moved since the last look: busy
            dp.maintain()  # none since: trimmed
        assert [sum(resident(b) for b in dp.buffers()) for dp in ends] == [0, 0]
        assert [ring.resident() for ring in native_rings] == [0] * len(native_rings)
        await cross(1000, 40, MTU)  # the sizes seen before: slots whose headers went with the pages
        await cross(2000, 40, 300)
    finally:
        wire.stop()
        for dp, tap, underlay in zip(ends, taps, underlays, strict=True):
            dp.stop()
            tap.close()
            underlay.close()
