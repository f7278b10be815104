"""Property test 3: the native and the Python receive paths give the same verdicts on the same record
streams, and the sending side never seals two records under one (key, nonce).

A real data path sends (the Python one, its sealing instrumented, or the native one): frames through its
TAP, control records, epoch changes (through the epoch byte's wrap from 255 to 0), moves to another
underlay. What it puts on the wire, together with replays, forgeries, truncations, foreign datagrams and
records of epochs far away, is delivered in the same bursts to a Python and a native receiver, which
also move paths (a second underlay whose first authentic record moves them) and run a transit hook.
After every burst both must have written the same frames (as a multiset: the native pass writes the
frames it opens before those it hands back), handed the hook the same frames, taken the same control
messages, counted the same drops by reason and passed the same datagrams to the socket's owner.
"""

from __future__ import annotations

import os
import select
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evio.config.model import Cipher
from evio.testing.datapath_pair import RAPID_EPOCHS
from evio.testing.fake_tunnel import FakeTap, FakeUnderlay
from evio.tunnel.datapath import native
from evio.tunnel.datapath.fd_datapath import FdDatapath
from evio.tunnel.datapath.keys import (
    EXPORTER_LEN,
    RekeyPolicy,
    SessionSecrets,
    TrafficSecret,
    make_aead,
    split_exporter,
)
from evio.tunnel.datapath.record import KIND_FRAME, ControlMessage, ControlOpcode, seal

MTU = 1428
WINDOW = 64  # the smallest the native window takes: replays beyond it are cheap to reach
TRANSIT_MAC = bytes.fromhex("02000000ee01")

pytestmark = pytest.mark.skipif(not native.available(), reason="evio_native is not built (scripts/build-native)")


class _RecordingAead:
    """The sender's AEAD with every (key, nonce) it seals under written down."""

    def __init__(self, aead: Any, key: bytes, sealed: list[tuple[bytes, bytes]]) -> None:
        self._aead, self._key, self._sealed = aead, key, sealed

    def encrypt_into(self, nonce: Any, data: Any, aad: Any, out: Any) -> Any:
        self._sealed.append((self._key, bytes(nonce)))
        return self._aead.encrypt_into(nonce, data, aad, out)

    def encrypt(self, nonce: Any, data: Any, aad: Any) -> bytes:
        self._sealed.append((self._key, bytes(nonce)))
        return bytes(self._aead.encrypt(nonce, data, aad))


class _InstrumentedSender(FdDatapath):
    """The Python sending path, unchanged but for the AEAD it seals with."""

    sealed: list[tuple[bytes, bytes]]

    def _set_tx(self, secret: TrafficSecret) -> None:
        super()._set_tx(secret)
        if not hasattr(self, "sealed"):
            self.sealed = []
        self._tx_aead = _RecordingAead(self._tx_aead, secret.keys().key, self.sealed)  # type: ignore[assignment]
        self._tx_seal = self._tx_aead.encrypt_into


def _advanced(secret: TrafficSecret, epochs: int) -> TrafficSecret:
    for _ in range(epochs):
        secret = secret.next()
    return secret


def _secrets(material: bytes, client: bool, epoch: int) -> SessionSecrets:
    base = split_exporter(material, Cipher.AES_256_GCM, client)
    return SessionSecrets(base.cipher, _advanced(base.tx, epoch), _advanced(base.rx, epoch))


def _readable(sock: Any) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _frame(i: int, size: int, transit: bool) -> bytes:
    dst = TRANSIT_MAC if transit else bytes.fromhex("020000000001")
    return (dst + bytes.fromhex("020000000002") + b"\x08\x00" + i.to_bytes(4, "big")).ljust(size, b"\xab")


class _Receiver:
    def __init__(self, implementation: str, secrets: SessionSecrets) -> None:
        self.tap = FakeTap()
        self.main = FakeUnderlay()
        self.side: FakeUnderlay | None = None
        self.underlays = [self.main]
        self.controls: list[ControlMessage] = []
        self.hooked: list[bytes] = []
        cls = native.NativeFdDatapath if implementation == "native" else FdDatapath
        # Senders here move on every few records, through the wrap: followed, not bounded (keys.py, PEER_EPOCHS).
        self.dp = cls(MTU, replay_window=WINDOW, rekey=RekeyPolicy(peer_epochs=RAPID_EPOCHS))
        self.dp.start(self.tap.fd, self.main, secrets, self.controls.append)
        self.path = self.main  # where the next datagrams arrive

    def transit(self, on: bool) -> None:
        def hook(frame: memoryview) -> bool:
            if bytes(frame[:6]) == TRANSIT_MAC:
                self.hooked.append(bytes(frame))
                return True
            return False

        self.dp.set_transit(hook if on else None, lambda: None, (lambda seen: None if seen == 1 else (1, TRANSIT_MAC)) if on else None)

    def add_path(self) -> None:
        """A second path (the direct one, found after the relay): the first authentic record by it moves."""
        side = FakeUnderlay()
        self.underlays.append(side)
        self.dp.add_underlay(side)
        self.side = side
        self.path = side

    def deliver(self, datagrams: list[bytes]) -> dict[str, Any]:
        dp = self.dp
        drops = dict(dp._drops)
        before = (dp._rx_frames, len(self.controls), dp._foreign, dp._path_moves, len(self.hooked))
        for datagram in datagrams:
            self.path.send_to_datapath(datagram)
        # Every path the data path reads, until none has anything left.
        for _ in range(1000):
            busy = False
            if _readable(dp._underlay.sock):  # type: ignore[union-attr]
                dp._sock_reader()
                busy = True
            if dp._side is not None and _readable(dp._side.sock):
                dp._side_pass()
                busy = True
            if not busy:
                break
        else:
            raise AssertionError("the receive passes never drained the sockets")
        frames = self.tap.frames()
        controls = self.controls[before[1] :]
        return {
            "frames": Counter(frames),
            "hooked": Counter(self.hooked[before[4] :]),
            "controls": Counter((c.opcode, c.flags, c.token) for c in controls),
            "drops": {r: n - drops[r] for r, n in dp._drops.items() if n != drops[r]},
            "rx_frames": dp._rx_frames - before[0],
            "foreign": dp._foreign - before[2],
            "moves": dp._path_moves - before[3],
            "rx_epoch": dp._rx.epoch if dp._rx else None,  # type: ignore[union-attr]
        }

    def close(self) -> None:
        self.dp.stop()
        self.tap.close()
        for underlay in self.underlays:
            underlay.close()


_OPS = st.one_of(
    st.tuples(st.just("frames"), st.sampled_from([1, 3, 20, 63, 64, 65, 90]), st.sampled_from([14, 60, 200, 1442]), st.booleans()),
    st.tuples(st.just("control"), st.sampled_from(list(ControlOpcode))),
    st.tuples(st.just("rekey"), st.integers(1, 3)),
    st.tuples(st.just("replay"), st.sampled_from([1, 2, 30, 63, 64, 65, 66, 100, 129, 500, 10**6]), st.integers(1, 8)),
    st.tuples(st.just("forge"), st.integers(0, 10**6), st.integers(0, 8 * 1500)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.integers(0, 60)),
    st.tuples(st.just("foreign"), st.binary(min_size=0, max_size=80)),
    st.tuples(st.just("far-epoch"), st.integers(2, 200)),
    st.tuples(st.just("sender-moves")),
    st.tuples(st.just("receivers-move")),
    st.tuples(st.just("transit"), st.booleans()),
    st.tuples(st.just("stragglers"), st.integers(1, 30)),
)


# Streams that reach what random ones rarely do, always run: the window's edge, the epoch byte's
# wrap with stragglers of the epoch before, sender-driven rekeys mid-burst, moves, transit.
_EDGE = [("frames", 90, 60, False), ("replay", 63, 1), ("replay", 64, 1), ("replay", 65, 2), ("replay", 129, 1)]
_WRAP = [("frames", 20, 200, True), ("rekey", 1), ("frames", 20, 200, False), ("stragglers", 30), ("rekey", 1),
         ("control", ControlOpcode.KEEPALIVE), ("frames", 5, 60, False), ("replay", 40, 8), ("rekey", 2),
         ("frames", 3, 60, False), ("far-epoch", 3)]
_MOVES = [("transit", True), ("frames", 30, 200, True), ("receivers-move",), ("sender-moves",), ("frames", 30, 1442, True),
          ("stragglers", 10), ("transit", False), ("sender-moves",), ("frames", 10, 14, True), ("forge", 3, 100),
          ("truncate", 5, 3), ("foreign", b"\x00\x01\x00\x00"), ("foreign", b"\x16\xfe\xfd"), ("foreign", b"")]


@example(sender="python", start_epoch=0, max_records=None, ops=_EDGE)
@example(sender="native", start_epoch=253, max_records=None, ops=_WRAP)
@example(sender="python", start_epoch=253, max_records=7, ops=_WRAP + _EDGE)
@example(sender="native", start_epoch=254, max_records=50, ops=_MOVES + _EDGE)
@example(sender="python", start_epoch=0, max_records=7, ops=_MOVES + _WRAP)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sender=st.sampled_from(["python", "native"]), start_epoch=st.sampled_from([0, 253]),
       max_records=st.sampled_from([None, 7, 50]), ops=st.lists(_OPS, min_size=10, max_size=40))  # fmt: skip
async def test_native_and_python_receivers_agree_and_no_nonce_is_sealed_twice(
    sender: str, start_epoch: int, max_records: int | None, ops: list[tuple[Any, ...]]
) -> None:
    """``max_records``: the sender moves to the next epoch by itself, in the middle of a burst."""
    material = os.urandom(EXPORTER_LEN)
    tx_tap = FakeTap()
    tx_paths = [FakeUnderlay()]
    policy = RekeyPolicy(max_records=max_records)
    sending = (native.NativeFdDatapath(MTU, rekey=policy, replay_window=WINDOW) if sender == "native"
               else _InstrumentedSender(MTU, rekey=policy, replay_window=WINDOW))  # fmt: skip
    sending.start(tx_tap.fd, tx_paths[0], _secrets(material, True, start_epoch), lambda m: None)
    receivers = [_Receiver("python", _secrets(material, False, start_epoch)), _Receiver("native", _secrets(material, False, start_epoch))]
    wire: list[bytes] = []  # every record the sender put on the wire, in order
    far = _secrets(material, True, start_epoch)
    try:
        frame_no = 0
        for op in ops:
            burst: list[bytes] = []
            kind = op[0]
            if kind == "frames":
                _, count, size, transit = op
                for _ in range(count):
                    frame_no += 1
                    tx_tap.send_frame(_frame(frame_no, size, transit and frame_no % 2 == 0))
                while sending._readers()[1]():
                    pass
            elif kind == "control":
                sending.send_control(ControlMessage(op[1], 1, 7, b"x" if op[1] is ControlOpcode.OVERLAY_SIGNAL else b""))
            elif kind == "rekey":
                for _ in range(op[1]):
                    sending.rekey()
            elif kind == "replay" and wire:
                at = max(0, len(wire) - op[1])  # so far back: inside the window, at its edge, beyond it
                burst += wire[at : at + op[2]]
            elif kind == "forge" and wire:
                record = bytearray(wire[op[1] % len(wire)])
                bit = op[2] % (8 * len(record))
                record[bit // 8] ^= 1 << (bit % 8)
                burst.append(bytes(record))
            elif kind == "truncate" and wire:
                record = wire[op[1] % len(wire)]
                burst.append(record[: max(0, len(record) - 1 - op[2])])
            elif kind == "foreign":
                burst.append(op[1])
            elif kind == "far-epoch":
                # Sealed under the right secret of an epoch the receivers do not hold (nor derive).
                secret = _advanced(far.tx, op[1])
                keys = secret.keys()
                burst.append(seal(make_aead(Cipher.AES_256_GCM, keys.key), keys.iv, KIND_FRAME, secret.epoch & 0xFF, 1, _frame(0, 100, False)))
            elif kind == "sender-moves":
                path = FakeUnderlay()
                tx_paths.append(path)
                sending.move_underlay(path)
            elif kind == "receivers-move":
                for receiver in receivers:
                    if receiver.side is None:
                        receiver.add_path()
            elif kind == "transit":
                for receiver in receivers:
                    receiver.transit(op[1])
            elif kind == "stragglers" and wire:
                burst += wire[-op[1] :]
            # What the sender sent, from every path it ever had, in the order sent.
            for path in tx_paths:
                while True:
                    try:
                        record = path.wire_end.recv(65536)
                    except BlockingIOError:
                        break
                    wire.append(record)
                    burst.append(record)
            if not burst:
                continue
            python, native_ = (receiver.deliver(burst) for receiver in receivers)
            assert python == native_, (op, python, native_)
        # Every record the sender sealed is on the wire once: its (epoch, counter) pins its key and nonce.
        headers = [(r[1], int.from_bytes(r[2:10], "big")) for r in wire]
        epochs_seen = Counter(h for h in headers)
        assert not [h for h, n in epochs_seen.items() if n > 1], "a (key, nonce) sealed twice"
        if sender == "python":
            sealed = sending.sealed  # type: ignore[attr-defined]
            assert len(sealed) == len(set(sealed)), "a (key, nonce) sealed twice"
            assert len(sealed) >= len(wire)
    finally:
        sending.stop()
        tx_tap.close()
        for path in tx_paths:
            path.close()
        for receiver in receivers:
            receiver.close()
