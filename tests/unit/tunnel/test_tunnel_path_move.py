"""FdDatapath moving from one underlay to another under a running session (relay first, then direct).

Two wires stand for the two paths: ``relay`` carries ChannelData, ``direct``
plain records. The sending side moves (``move_underlay``), the other follows
its first authenticated record on the new path (``add_underlay``); frames sent
all the while, both ways, must all arrive.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from evio.config.model import Cipher
from evio.testing.fake_tunnel import DatagramWire, FakeTap, FakeUnderlay
from evio.testing.waiting import wait_until
from evio.tunnel.datapath import native
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.interface import DropReason
from evio.tunnel.datapath.keys import EXPORTER_LEN, split_exporter
from evio.tunnel.datapath.record import KIND_FRAME, ControlMessage, ControlOpcode

MTU = 1428
CHANNEL = 0x4001


def frame(i: int) -> bytes:
    return (b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + i.to_bytes(4, "big")).ljust(120, b"\xab")


def sequence_numbers(frames: list[bytes]) -> list[int]:
    return [int.from_bytes(f[14:18], "big") for f in frames]


@dataclass
class Paths:
    taps: tuple[FakeTap, FakeTap]
    datapaths: tuple[FdDatapath, FdDatapath]
    relay: tuple[FakeUnderlay, FakeUnderlay]
    direct: tuple[FakeUnderlay, FakeUnderlay]
    relay_wire: DatagramWire
    direct_wire: DatagramWire


@pytest.fixture(params=["python", "native"])
async def paths(request: pytest.FixtureRequest) -> AsyncIterator[Paths]:
    """Both data paths: the native one moves with the same code (its rings are rebuilt on a move)."""
    kind: Callable[..., FdDatapath] = FdDatapath
    if request.param == "native":
        if not native.available():
            pytest.skip("the native data path is not built (test_tunnel_native.py says why)")
        kind = native.NativeFdDatapath
    material = os.urandom(EXPORTER_LEN)
    relay = (FakeUnderlay(CHANNEL), FakeUnderlay(CHANNEL))
    direct = (FakeUnderlay(), FakeUnderlay())
    taps = (FakeTap(), FakeTap())
    datapaths = (kind(MTU, replay_window=256), kind(MTU, replay_window=256))
    for i, dp in enumerate(datapaths):
        dp.start(taps[i].fd, relay[i], split_exporter(material, Cipher.AES_256_GCM, i == 0), lambda m: None)
    relay_wire, direct_wire = DatagramWire(*relay), DatagramWire(*direct)
    relay_wire.start()
    direct_wire.start()
    yield Paths(taps, datapaths, relay, direct, relay_wire, direct_wire)
    relay_wire.stop()
    direct_wire.stop()
    for dp in datapaths:
        dp.stop()
    for thing in (*taps, *relay, *direct):
        thing.close()


async def send_both_ways(p: Paths, start: int, count: int, got: tuple[list[bytes], list[bytes]]) -> None:
    """``count`` frames each way, in bursts a socketpair holds, each burst awaited at the other end."""
    for i in range(start, start + count, 10):
        for n in range(i, i + 10):
            p.taps[0].send_frame(frame(n))
            p.taps[1].send_frame(frame(n))

        def arrived(upto: int = i + 10) -> bool:
            got[0].extend(p.taps[0].frames())
            got[1].extend(p.taps[1].frames())
            return len(got[0]) >= upto and len(got[1]) >= upto

        await wait_until(arrived)


async def test_move_to_direct_loses_no_frame_both_ways(paths: Paths) -> None:
    p = paths
    got: tuple[list[bytes], list[bytes]] = ([], [])
    await send_both_ways(p, 0, 50, got)
    a, b = p.datapaths
    b.add_underlay(p.direct[1])
    assert p.direct[1].owner_paused  # the data path reads it now
    relayed_before = len(p.relay_wire.a_to_b)
    # Frames still in flight on the relay at the move (held here) arrive after records sent on the direct path.
    held: list[bytes] = []

    def hold(datagram: bytes) -> list[bytes]:
        held.append(datagram)
        return []

    p.relay_wire.filter_a_to_b = hold
    for n in range(50, 60):
        p.taps[0].send_frame(frame(n))
        p.taps[1].send_frame(frame(n))
    await wait_until(lambda: len(held) == 10)
    a.move_underlay(p.direct[0])
    a.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 0))
    await wait_until(lambda: b.stats().path_moves == 1)
    for d in held:
        p.relay_wire.deliver_to_b(d)

    def sixty_each() -> bool:
        got[0].extend(p.taps[0].frames())
        got[1].extend(p.taps[1].frames())
        return len(got[0]) >= 60 and len(got[1]) >= 60

    await wait_until(sixty_each)
    await send_both_ways(p, 60, 100, got)
    assert a.stats().path_moves == 1 and b.stats().path_moves == 1
    assert sorted(sequence_numbers(got[1])) == list(range(160))
    assert sorted(sequence_numbers(got[0])) == list(range(160))
    # After the move both sides send on the direct path only.
    relayed_after = len(p.relay_wire.a_to_b)
    assert relayed_after - relayed_before == 10
    assert len(p.direct_wire.a_to_b) >= 100 and len(p.direct_wire.b_to_a) >= 100
    assert not a.stats().drops and not b.stats().drops
    # The relay is given back to its owner when released.
    assert a.release_side() is p.relay[0] and not p.relay[0].owner_paused
    assert b.release_side() is p.relay[1] and not p.relay[1].owner_paused
    assert a.release_side() is None


async def test_only_an_authentic_new_record_moves(paths: Paths) -> None:
    p = paths
    a, b = p.datapaths
    p.taps[0].send_frame(frame(1))
    await wait_until(lambda: b.stats().rx_frames == 1)
    captured = p.relay_wire.a_to_b[-1][4:]  # the record inside the ChannelData
    b.add_underlay(p.direct[1])
    forged = bytes([KIND_FRAME, 0]) + (7).to_bytes(8, "big") + os.urandom(130)
    p.direct_wire.deliver_to_b(forged)
    p.direct_wire.deliver_to_b(captured)  # authentic, but replayed
    await wait_until(lambda: b.stats().dropped(DropReason.REPLAYED) == 1 and b.stats().dropped(DropReason.FORGED) == 1)
    assert b.stats().path_moves == 0
    # Not a record: the owner's (STUN and the like), and no move.
    stun = b"\x00\x01\x00\x00\x21\x12\xa4\x42" + bytes(12)
    p.direct_wire.deliver_to_b(stun)
    await wait_until(lambda: p.direct[1].foreign == [stun])
    assert b.stats().path_moves == 0
    # Until the move b still sends on the relay.
    p.taps[1].send_frame(frame(2))
    await wait_until(lambda: a.stats().rx_frames == 1)
    assert len(p.direct_wire.b_to_a) == 0


async def test_side_path_channel_data_is_unwrapped_and_checked(paths: Paths) -> None:
    """After a move the relay is read as the side path: ChannelData there is opened too, and a short one counted."""
    p = paths
    a, b = p.datapaths
    a.move_underlay(p.direct[0])
    b.add_underlay(p.direct[1])
    a.send_control(ControlMessage(ControlOpcode.KEEPALIVE, 0))
    await wait_until(lambda: b.stats().path_moves == 1)
    # b's relay is now its side path; a record arriving there late is still delivered.
    p.relay_wire.filter_a_to_b = lambda d: []
    a.move_underlay(p.relay[0])  # a moves back (a test of the mechanism, not something the session does)
    p.taps[0].send_frame(frame(9))
    await wait_until(lambda: len(p.relay_wire.a_to_b) >= 1)
    late = p.relay_wire.a_to_b[-1]
    p.relay_wire.deliver_to_b(late)
    p.relay_wire.deliver_to_b(late[:4] + late[4:20])  # shorter than its ChannelData length says
    await wait_until(lambda: b.stats().dropped(DropReason.TRUNCATED) == 1)
    await wait_until(lambda: b.stats().rx_frames == 1)
    assert sequence_numbers(p.taps[1].frames()) == [9]
    assert b.stats().path_moves == 1  # the side path left behind never moves it back


async def test_stop_gives_both_paths_back(paths: Paths) -> None:
    p = paths
    a, _ = p.datapaths
    a.move_underlay(p.direct[0])
    assert p.relay[0].owner_paused and p.direct[0].owner_paused
    a.stop()
    assert not p.relay[0].owner_paused and not p.direct[0].owner_paused
