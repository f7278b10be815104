"""Two data paths joined over fake underlays: the tunnel's data path tested without ICE or DTLS.

`make_pair` starts a client and a server end (each a `FakeTap` and a `FakeUnderlay`) on keys split
from one exporter secret and joins their underlays with a `DatagramWire`; `close` stops everything.
`implementation` picks the ends: ``"python"`` (`FdDatapath`) or ``"native"`` (`NativeFdDatapath`,
built by scripts/build-native; tests/unit/tunnel/conftest.py skips or fails where it is not).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from evio.config.model import Cipher
from evio.ratelimit import Rate
from evio.testing.fake_tunnel import DatagramWire, FakeTap, FakeUnderlay
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.keys import EXPORTER_LEN, RekeyPolicy, split_exporter
from evio.tunnel.datapath.mmsg import RecvfromBatch, SendtoBatch
from evio.tunnel.datapath.native import NativeFdDatapath
from evio.tunnel.datapath.record import ControlMessage

MTU = 1428
RAPID_EPOCHS = Rate(per_second=100_000.0, burst=100_000)
"""``RekeyPolicy.peer_epochs`` for tests whose senders move on every few records, far faster than any node's
(whose bound, ``PEER_EPOCHS``, is a few at once and then one a second)."""


def frame(i: int, size: int = 200) -> bytes:
    """Frame number `i`, IPv4 from 02:..:01 to 02:..:02, padded to `size` bytes."""
    return (b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02" + b"\x08\x00" + i.to_bytes(4, "big")).ljust(size, b"\xab")


def collected(tap: FakeTap, into: list[bytes], count: int) -> Callable[[], bool]:
    """A condition: ``count`` frames have come out of ``tap`` (gathered into ``into``)."""

    def check() -> bool:
        into.extend(tap.frames())
        return len(into) >= count

    return check


@dataclass
class End:
    tap: FakeTap
    underlay: FakeUnderlay
    datapath: FdDatapath
    control: list[ControlMessage]


@dataclass
class Pair:
    a: End
    b: End
    wire: DatagramWire
    material: bytes
    cipher: Cipher


def _datapath(implementation: str, is_client: bool, rekey: RekeyPolicy | None, plain_syscalls: bool) -> FdDatapath:
    """One end; with the native data path and ``plain_syscalls``, the server end is the Python one over
    one system call per datagram (a native end talking to a Python end)."""
    if implementation == "native" and (is_client or not plain_syscalls):
        return NativeFdDatapath(MTU, rekey=rekey, replay_window=128)
    if plain_syscalls:
        return FdDatapath(MTU, rekey=rekey, replay_window=128, batch_factory=SendtoBatch,
                          receive_batch_factory=RecvfromBatch)  # fmt: skip
    return FdDatapath(MTU, rekey=rekey, replay_window=128)


async def make_pair(
    implementation: str = "python", cipher: Cipher = Cipher.AES_256_GCM, channel: int | None = None,
    rekey: RekeyPolicy | None = None, plain_syscalls: bool = False,
) -> Pair:  # fmt: skip
    """A client end `a` and a server end `b`, frames crossing between them (a TURN `channel` if given)."""
    material = os.urandom(EXPORTER_LEN)
    ends = []
    for is_client in (True, False):
        tap, underlay = FakeTap(), FakeUnderlay(channel)
        dp = _datapath(implementation, is_client, rekey, plain_syscalls)
        control: list[ControlMessage] = []
        dp.start(tap.fd, underlay, split_exporter(material, cipher, is_client), control.append)
        ends.append(End(tap, underlay, dp, control))
    wire = DatagramWire(ends[0].underlay, ends[1].underlay)
    wire.start()
    return Pair(ends[0], ends[1], wire, material, cipher)


async def make_vnet_pair(implementation: str, vnet_a: bool, vnet_b: bool, tso: bool = False) -> Pair:
    """Like make_pair, with each end's TAP speaking virtio-net headers or not (the fake TAP carries them as bytes)."""
    material = os.urandom(EXPORTER_LEN)
    ends = []
    for is_client, vnet in ((True, vnet_a), (False, vnet_b)):
        tap, underlay = FakeTap(), FakeUnderlay()
        # Native: both ends; with tso A's TAP pass is Python's (which segments and seals), so B's
        # native receive pass joins the records of a Python sender into super-frames.
        dp: FdDatapath = (NativeFdDatapath(MTU, replay_window=128, gro=True, tso=tso and is_client) if implementation == "native"
                          else FdDatapath(MTU, replay_window=128, gro=True))  # fmt: skip
        control: list[ControlMessage] = []
        dp.start(tap.fd, underlay, split_exporter(material, Cipher.AES_256_GCM, is_client), control.append, vnet_hdr=vnet)
        ends.append(End(tap, underlay, dp, control))
    wire = DatagramWire(ends[0].underlay, ends[1].underlay)
    wire.start()
    return Pair(ends[0], ends[1], wire, material, Cipher.AES_256_GCM)


def close(p: Pair) -> None:
    p.wire.stop()
    for end in (p.a, p.b):
        end.datapath.stop()
        end.tap.close()
        end.underlay.close()
