"""Mutation fuzzing of every parser and receive path that takes input from the network or a file.

Each target takes bytes and either accepts them (returns None), rejects them
(returns the reason, a short string: the counter it would bump) or raises,
which is a bug: untrusted input must never escape as an exception. Inputs are
mutations of valid seeds: bit flips, interesting bytes and integers,
truncation, extension, splices of two seeds, chunk insertion, deletion and
duplication, random bytes, and, for JSON targets, mutations of the parsed
document (values replaced by other types, keys deleted, added or renamed,
nesting, duplicate keys), serialised again.

Targets (``TARGETS``):

- ``frb``: a peer port of ``BoundedFloodSwitch.packet_in`` (FRB codec, learning, flooding);
- ``records``: datagrams on a tunnel socket under ``FdDatapath`` (records, demux, TURN
  channels), direct and relayed, seeded with records sealed under the data path's keys;
- ``stun``: the same receive path seeded with STUN, on to aioice behind the ``InboundGate``
  and the guarded STUN parser, as a tunnel's socket hands it over;
- ``signal``: signaling payloads (``evio.signal.protocol.decode`` and ``decode_announcement``);
- ``offer``: tunnel offers and answers (``TunnelOffer/TunnelAnswer.from_body``);
- ``negotiation``: overlay link and release messages (``evio.overlay.negotiation``);
- ``config``: the daemon's configuration text (``loads_config``).

``benchmarks/fuzz.py`` runs them and prints the table; tests/unit run a short version.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evio.tunnel.mmsg import SlotRing

# -- mutations ----------------------------------------------------------------------------

_INTERESTING_BYTES = (0x00, 0x01, 0x03, 0x14, 0x3F, 0x40, 0x4F, 0x70, 0x71, 0x7F, 0x80, 0xC0, 0xFE, 0xFF)
_INTERESTING_INTS = (0, 1, 2, 3, 4, 7, 8, 16, 20, 28, 0x7F, 0x80, 0xFF, 0x100, 0x2112, 0x4000, 0x7FFF, 0x8000, 0xFFFF)


def _flip_bits(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 8)):
        if data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice(_INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)


def _set_int(rng: random.Random, data: bytearray) -> None:
    width = rng.choice((1, 2, 4))
    if len(data) >= width:
        at = rng.randrange(len(data) - width + 1)
        value = rng.choice(_INTERESTING_INTS + (len(data), len(data) - 20, len(data) + 4)) & ((1 << (8 * width)) - 1)
        data[at : at + width] = value.to_bytes(width, "big")


def _truncate(rng: random.Random, data: bytearray) -> None:
    del data[rng.randrange(len(data) + 1) :]


def _extend(rng: random.Random, data: bytearray) -> None:
    data += rng.randbytes(rng.choice((1, 2, 4, rng.randrange(1, 64))))


def _insert(rng: random.Random, data: bytearray) -> None:
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.randbytes(rng.randrange(1, 16))


def _delete(rng: random.Random, data: bytearray) -> None:
    if data:
        at = rng.randrange(len(data))
        del data[at : at + rng.randrange(1, 16)]


def _duplicate(rng: random.Random, data: bytearray) -> None:
    if data:
        at = rng.randrange(len(data))
        chunk = data[at : at + rng.randrange(1, 32)]
        to = rng.randrange(len(data) + 1)
        data[to:to] = chunk


_BYTE_MUTATIONS: tuple[Callable[[random.Random, bytearray], None], ...] = (
    _flip_bits, _set_byte, _set_int, _truncate, _extend, _insert, _delete, _duplicate,
)


def mutate_bytes(rng: random.Random, seeds: list[bytes]) -> bytes:
    """One input from the seeds: random bytes now and then, else a seed (or a splice) mutated 1-4 times."""
    roll = rng.random()
    if roll < 0.04:
        return rng.randbytes(rng.randrange(0, 200))
    seed = rng.choice(seeds)
    if roll < 0.12:
        other = rng.choice(seeds)
        data = bytearray(seed[: rng.randrange(len(seed) + 1)] + other[rng.randrange(len(other) + 1) :])
    else:
        data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        rng.choice(_BYTE_MUTATIONS)(rng, data)
    return bytes(data)


def _random_value(rng: random.Random, strings: list[str]) -> Any:
    pool: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: False, lambda: 0, lambda: -1, lambda: 1 << 64, lambda: -(1 << 70),
        lambda: 1.5, lambda: 1e308, lambda: "", lambda: "x" * rng.choice((1, 64, 300, 5000)),
        lambda: "\u00e9\u4e2d\U0001f600", lambda: "a\x00b", lambda: "../" * 40, lambda: [], lambda: {}, lambda: [{}], lambda: {"a": [1, {"b": None}]},
        lambda: [rng.choice(strings)] if strings else ["a"], lambda: rng.choice(strings) if strings else "a",
        lambda: (rng.choice(strings) if strings else "a")[: rng.randrange(1, 40)],
        lambda: _nested(rng.randrange(1, 60)), lambda: rng.randrange(-1000, 1 << 20),
    ]
    return rng.choice(pool)()


def _nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"n": value}
    return value


def _containers(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    yield doc, path
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, (dict, list)):
                yield from _containers(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            if isinstance(value, (dict, list)):
                yield from _containers(value, (*path, i))


def _strings(doc: Any, out: list[str]) -> list[str]:
    if isinstance(doc, str):
        out.append(doc)
    elif isinstance(doc, dict):
        for key, value in doc.items():
            out.append(key)
            _strings(value, out)
    elif isinstance(doc, list):
        for value in doc:
            _strings(value, out)
    return out


def mutate_json(rng: random.Random, doc: Any, strings: list[str]) -> str:
    """A structural mutation of a JSON document (1-3 edits), serialised."""
    doc = json.loads(json.dumps(doc))
    if not isinstance(doc, (dict, list)):
        return json.dumps(_random_value(rng, strings))
    duplicate_key = None
    for _ in range(rng.randint(1, 3)):
        containers = list(_containers(doc))
        target, _ = rng.choice(containers)
        if isinstance(target, dict):
            keys = list(target)
            op = rng.randrange(6)
            if op == 0 and keys:
                target[rng.choice(keys)] = _random_value(rng, strings)
            elif op == 1 and keys:
                del target[rng.choice(keys)]
            elif op == 2:
                target[rng.choice(strings) if strings and rng.random() < 0.5 else f"k{rng.randrange(100)}"] = _random_value(rng, strings)
            elif op == 3 and keys:
                key = rng.choice(keys)
                target[key + rng.choice(("_", "s", "X"))] = target.pop(key)
            elif op == 4 and keys:
                key = rng.choice(keys)
                target[key] = [target[key]] if rng.random() < 0.5 else {"value": target[key]}
            elif keys:
                duplicate_key = rng.choice(keys)
        elif isinstance(target, list):
            op = rng.randrange(4)
            if op == 0 and target:
                target[rng.randrange(len(target))] = _random_value(rng, strings)
            elif op == 1 and target:
                del target[rng.randrange(len(target))]
            elif op == 2:
                target.insert(rng.randrange(len(target) + 1), _random_value(rng, strings))
            elif target:
                target.extend(target[: rng.randrange(1, 40)] * rng.randrange(1, 4))
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)
    if duplicate_key is not None:
        quoted = json.dumps(duplicate_key)
        text = text.replace(quoted + ":", f"{quoted}: 1, {quoted}:", 1)
    return text


# -- targets ------------------------------------------------------------------------------


Check = Callable[[bytes], "str | None"]


@dataclass
class Target:
    name: str
    seeds: list[bytes]
    check: Check
    """None when the input is accepted, else the rejection reason; raising is a bug."""
    json_docs: list[Any] = field(default_factory=list)
    """For JSON targets: the seeds as documents, for structural mutations."""
    housekeeping: Callable[[], None] | None = None
    """Run every few thousand inputs (drains buffers the target fills)."""

    def inputs(self, rng: random.Random, count: int) -> Iterator[bytes]:
        strings = [s for doc in self.json_docs for s in _strings(doc, [])]
        for _ in range(count):
            if self.json_docs and rng.random() < 0.7:
                yield mutate_json(rng, rng.choice(self.json_docs), strings).encode("utf-8", "surrogatepass")
            else:
                yield mutate_bytes(rng, self.seeds)


_PATH = re.compile(r"/\S*")
_CUT = re.compile(r"""['"\[{(\d]|; | allowed| did you mean""")


def normalise(message: str, limit: int = 48) -> str:
    """A rejection message without the values in it, so that equal causes count together."""
    text = _PATH.sub("PATH", message)
    cut = _CUT.search(text)
    if cut is not None and cut.start() > 0:
        text = text[: cut.start()]
    return text.rstrip(" ,.:;_-")[:limit] or "?"


# Each builder returns a Target and registers what it holds open in the ExitStack.


def _frb_target(stack: ExitStack) -> Target:
    from evio.sdn import frb
    from evio.sdn.switch import BoundedFloodSwitch, Drop, PortKind, SwitchPort

    def fresh() -> BoundedFloodSwitch:
        sw = BoundedFloodSwitch(0x5000, "02:aa:00:00:50:00", max_macs=512, packet_in_rate=1e12, packet_in_burst=10**12)
        sw.port_added(SwitchPort(1, "br0", PortKind.LEAF, None, "02:00:00:00:00:01"), now=0)
        for port, peer in ((10, 0x1000), (11, 0x3000), (12, 0x7000), (13, 0x9000)):
            sw.port_added(SwitchPort(port, f"t{peer:x}", PortKind.PEER, peer), now=0)
        return sw

    switches = [fresh()]
    clock = [0.0]
    inner = bytes.fromhex("ffffffffffff02000000000a0806") + bytes(28)
    unicast = bytes.fromhex("02000000000102000000000b0800") + b"x" * 46
    seeds = [
        frb.pack(frb.broadcast(inner, 0x1000, 0x3000, 1)),
        frb.pack(frb.broadcast(unicast, 0x3000, 0x5000, 3)),
        frb.pack(frb.leaf_announce(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:10:00"), 0x1000,
                                   ["02:00:00:00:10:01", "02:00:00:00:10:02"])),
        frb.pack(frb.link_check(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:10:00"), 0x1000)),
        frb.pack(frb.link_ack(frb.BROADCAST_MAC, frb.parse_mac("02:aa:00:00:10:00"), 0x1000)),
        unicast,
        inner,
    ]

    seen_errors: Counter[Any] = Counter()

    def check(data: bytes) -> str | None:
        sw = switches[0]
        clock[0] += 0.001
        before = dict(sw.drops)
        sw.packet_in(10 + (data[-1] & 3 if data else 0), data, clock[0])
        for reason, n in sw.drops.items():
            if n != before.get(reason, 0):
                if reason is Drop.MALFORMED_FRB:
                    changed = [r for r, k in sw.frb_parse_errors.items() if k != seen_errors.get(r, 0)]
                    seen_errors.clear()
                    seen_errors.update(sw.frb_parse_errors)
                    return "frb:" + (changed[0].name if changed else "?")
                return reason.name
        return None

    def housekeeping() -> None:
        switches[0] = fresh()  # the learning table fills with what the fuzz taught it
        seen_errors.clear()

    return Target("frb", seeds, check, housekeeping=housekeeping)


class _FakeTransport:
    """Where aioice's replies go: nowhere."""

    def sendto(self, data: bytes, addr: Any = None) -> None:
        pass

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class _OneDatagram(SlotRing):
    """A ``ReceiveBatch`` that hands the data path one datagram per pass."""

    def __init__(self, slots: int, slot_size: int) -> None:
        self._slots = slots
        self._slot_size = slot_size
        self._buf = bytearray(slots * slot_size)
        self._view = memoryview(self._buf)
        self._length = 0
        self.source_addr: tuple[str, int] = ("127.0.0.1", 4000)

    def load(self, data: bytes, source: tuple[str, int]) -> None:
        n = min(len(data), self._slot_size)  # the kernel cuts a datagram to the slot, as recvmmsg does
        self._buf[:n] = data[:n]
        self._length = n
        self.source_addr = source

    def recv(self, sock: Any) -> int:
        return 1

    def length(self, slot: int) -> int:
        return self._length

    def source(self, slot: int) -> tuple[str, int]:
        return self.source_addr


PEER = ("127.0.0.1", 4000)
STRANGER = ("127.0.0.9", 5000)


class _SocketPath:
    """A tunnel socket's receive path: FdDatapath, then aioice behind the InboundGate, as in a tunnel."""

    def __init__(self, stack: ExitStack, channel: int | None) -> None:
        import aioice
        import aioice.ice

        from evio.testing.fake_tunnel import FakeTap
        from evio.tunnel import ice as evio_ice
        from evio.tunnel.fd_datapath import FdDatapath
        from evio.tunnel.keys import EXPORTER_LEN, Cipher, split_exporter
        from evio.tunnel.mmsg import SendtoBatch

        evio_ice._install_stun_guard()
        self.material = bytes(range(EXPORTER_LEN))
        self.cipher = Cipher.AES_256_GCM
        self.connection = aioice.Connection(ice_controlling=False)
        self.connection.remote_username = "peerufrag"
        self.connection.remote_password = "peerpassword0123456789"
        self.protocol = aioice.ice.StunProtocol(self.connection)
        self.protocol.connection_made(_FakeTransport())  # type: ignore[arg-type]
        self.protocol.local_candidate = aioice.Candidate("1", 1, "udp", 100, "127.0.0.2", 3000, "host")
        self.gate = evio_ice.InboundGate(self.connection, "fuzz")
        self.gate.selected = PEER
        self.gate.guard(self.protocol)
        self.tap = FakeTap()
        stack.callback(self.tap.close)
        self.underlay = _GateUnderlay(self.protocol, channel)
        stack.callback(self.underlay.close)
        self.ring: _OneDatagram | None = None

        def ring(slots: int, slot_size: int) -> _OneDatagram:
            self.ring = _OneDatagram(slots, slot_size)
            return self.ring

        self.datapath = FdDatapath(1428, replay_window=128, batch_factory=SendtoBatch, receive_batch_factory=ring)
        self.controls = 0

        def on_control(message: Any) -> None:
            self.controls += 1

        self.datapath.start(self.tap.fd, self.underlay, split_exporter(self.material, self.cipher, False), on_control)
        stack.callback(self.datapath.stop)
        self.peer_secrets = split_exporter(self.material, self.cipher, True)

    def feed(self, data: bytes, source: tuple[str, int]) -> str | None:
        from evio.tunnel import ice as evio_ice

        dp = self.datapath
        assert self.ring is not None
        drops = dict(dp._drops)
        frames, controls, foreign = dp._rx_frames, self.controls, dp._foreign
        gate_rejects = sum(self.gate.rejected.values())
        stun_rejects = dict(evio_ice.STUN_REJECTED)
        queued = self.connection._queue.qsize()
        self.ring.load(data, source)
        dp._sock_pass()
        for reason, n in dp._drops.items():
            if n != drops[reason]:
                return reason.value
        if dp._rx_frames != frames:
            return None  # a frame delivered
        if self.controls != controls:
            return None
        if dp._foreign == foreign:
            return "unhandled"  # the data path neither took nor passed it on: should not happen
        if sum(self.gate.rejected.values()) != gate_rejects:
            return next(r.value for r, n in self.gate.rejected.items() if n)
        for stun_reason, count in evio_ice.STUN_REJECTED.items():
            if count != stun_rejects.get(stun_reason, 0):
                return stun_reason.value
        if self.connection._queue.qsize() != queued:
            return None  # data for the ICE connection (DTLS, or a record the pump would inject)
        return None  # a STUN message aioice took

    def housekeeping(self) -> None:
        self.tap.frames()
        while not self.connection._queue.empty():
            self.connection._queue.get_nowait()
        self.connection._early_checks.clear()
        self.underlay.drain()


class _GateUnderlay:
    """The data path's underlay whose foreign datagrams go to a gated aioice protocol."""

    def __init__(self, protocol: Any, channel: int | None) -> None:
        import socket

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sink.bind(("127.0.0.1", 0))
        self._sink.setblocking(False)
        self._protocol = protocol
        self._channel = channel

    @property
    def sock(self) -> Any:
        return self._sock

    @property
    def peer(self) -> Any:
        return self._sink.getsockname()

    @property
    def channel(self) -> int | None:
        return self._channel

    def pause_owner(self) -> None:
        pass

    def resume_owner(self) -> None:
        pass

    def deliver_foreign(self, data: bytes, addr: Any) -> None:
        self._protocol.datagram_received(data, addr)

    def drain(self) -> None:
        while True:
            try:
                self._sink.recv(65536)
            except BlockingIOError:
                return

    def close(self) -> None:
        self._sock.close()
        self._sink.close()


def _records_and_stun_targets(stack: ExitStack) -> tuple[Target, Target]:
    import aioice.stun

    from evio.tunnel.keys import make_aead
    from evio.tunnel.record import KIND_CONTROL, KIND_FRAME, ControlOpcode, pack_control, seal

    asyncio.get_running_loop()  # the data path registers readers (never run: the fuzz calls it directly)
    direct = _SocketPath(stack, None)
    relayed = _SocketPath(stack, 0x4001)
    paths = (direct, relayed)

    tx = direct.peer_secrets.tx
    keys = tx.keys()
    aead = make_aead(direct.cipher, keys.key)
    next_keys = tx.next().keys()
    next_aead = make_aead(direct.cipher, next_keys.key)
    frame = bytes.fromhex("02000000000102000000000b0800") + b"payload" * 20
    records = [
        seal(aead, keys.iv, KIND_FRAME, 0, 1, frame),
        seal(aead, keys.iv, KIND_FRAME, 0, 2, frame[:14]),
        seal(aead, keys.iv, KIND_FRAME, 0, 3, frame * 9),
        seal(aead, keys.iv, KIND_CONTROL, 0, 4, pack_control(ControlOpcode.HELLO, 1)),
        seal(aead, keys.iv, KIND_CONTROL, 0, 5, pack_control(ControlOpcode.KEEPALIVE)),
        seal(next_aead, next_keys.iv, KIND_FRAME, 1, 1, frame),
    ]
    channel_data = [(0x4001).to_bytes(2, "big") + len(r).to_bytes(2, "big") + r for r in records[:3]]
    dtls_hello = bytes.fromhex("16fefd0000000000000000") + bytes.fromhex("0050") + bytes(80)

    def stun(method: Any, cls: Any, **attributes: Any) -> bytes:
        message = aioice.stun.Message(method, cls)
        message.attributes.update(attributes)
        if cls == aioice.stun.Class.REQUEST:
            message.add_message_integrity(direct.connection.local_password.encode())
        else:
            message.add_fingerprint()
        return bytes(message)

    Method, Class = aioice.stun.Method, aioice.stun.Class
    user = f"{direct.connection.local_username}:peerufrag"
    stuns = [
        stun(Method.BINDING, Class.REQUEST, USERNAME=user, PRIORITY=1853824767, **{"ICE-CONTROLLING": 12345, "USE-CANDIDATE": None}),
        stun(Method.BINDING, Class.RESPONSE, **{"XOR-MAPPED-ADDRESS": ("198.51.100.7", 40000)}),
        stun(Method.BINDING, Class.RESPONSE, **{"XOR-MAPPED-ADDRESS": ("2001:db8::7", 40000)}),
        stun(Method.BINDING, Class.ERROR, **{"ERROR-CODE": (487, "Role Conflict")}),
        stun(Method.DATA, Class.INDICATION, **{"XOR-PEER-ADDRESS": ("127.0.0.1", 4000), "DATA": b"\x70" * 40}),
        stun(Method.ALLOCATE, Class.RESPONSE, **{"XOR-RELAYED-ADDRESS": ("198.51.100.1", 50000), "LIFETIME": 600,
                                                  "XOR-MAPPED-ADDRESS": ("198.51.100.7", 40000)}),
        bytes.fromhex("000100082112a442" + "01" * 12 + "00240002" + "00000000"),  # the 28-byte PRIORITY of issue 9
    ]

    def make_check(path_of: Callable[[bytes], _SocketPath]) -> Check:
        def check(data: bytes) -> str | None:
            path = path_of(data)
            # Mostly from the peer's address; now and then from a third party (the gate's business).
            source = STRANGER if len(data) % 7 == 3 else PEER
            return path.feed(data, source)

        return check

    def housekeeping() -> None:
        for path in paths:
            path.housekeeping()

    pick = lambda data: paths[len(data) & 1]  # noqa: E731 - both paths, by input length
    records_target = Target("records", records + channel_data + [dtls_hello], make_check(pick), housekeeping=housekeeping)
    stun_target = Target("stun", stuns + [dtls_hello, records[0]], make_check(pick), housekeeping=housekeeping)
    return records_target, stun_target


def _signal_target(stack: ExitStack) -> Target:
    from evio.signal import protocol
    from evio.signal.errors import ProtocolError

    node_a, node_b = "a" * 32, "0123456789abcdef" * 2
    docs: list[Any] = [
        {"v": 1, "kind": "request", "overlay": "ov1", "src": node_a, "dst": node_b, "txid": "t1-abcdef",
         "action": "tunnel.offer", "body": {"k": [1, 2, {"x": None}]}},
        {"v": 1, "kind": "response", "overlay": "ov1", "src": node_b, "dst": node_a, "txid": "t1-abcdef", "body": {}},
        {"v": 1, "kind": "error", "overlay": "ov1", "src": node_b, "dst": node_a, "txid": "t1-abcdef",
         "reason": "bad-request", "text": "nope"},
        {"v": 1, "kind": "announce", "members": [{"overlay": "ov1", "node": node_a}, {"overlay": "ov2", "node": node_b}]},
    ]
    valid = []
    for doc in docs:
        text = json.dumps(doc)
        try:
            (protocol.decode_announcement if doc["kind"] == "announce" else protocol.decode)(text)
        except ProtocolError:
            continue
        valid.append(doc)
    if len(valid) < 2:
        raise RuntimeError("signal fuzz seeds no longer decode: update them")

    def check(data: bytes) -> str | None:
        text = data.decode("utf-8", "surrogateescape")
        try:
            if b'"announce"' in data:
                protocol.decode_announcement(text)
            else:
                protocol.decode(text)
        except ProtocolError as exc:
            return exc.reason.value
        return None

    return Target("signal", [json.dumps(d).encode() for d in valid], check, json_docs=valid)


def _offer_target(stack: ExitStack) -> Target:
    import datetime

    from evio.tunnel.dtls import TunnelCertificate
    from evio.tunnel.errors import OfferError
    from evio.tunnel.keys import Cipher
    from evio.tunnel.signaling import IceParameters, TunnelAnswer, TunnelOffer

    cert = TunnelCertificate.generate("fuzz", datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    ice = IceParameters("abcd", "p" * 24, ("candidate:1 1 udp 2130706431 10.0.0.1 40000 typ host",
                                           "candidate:2 1 udp 1694498815 198.51.100.7 40001 typ srflx raddr 10.0.0.1 rport 40000"))
    offer = TunnelOffer("tunnel-0001", 0xAB, cert.fingerprint, ice, None, (Cipher.AES_256_GCM, Cipher.CHACHA20_POLY1305))
    answer = TunnelAnswer("tunnel-0001", 0xCD, cert.fingerprint, None, ice, Cipher.CHACHA20_POLY1305)
    docs = [offer.to_body(), answer.to_body()]

    def check(data: bytes) -> str | None:
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            return "not-json"  # the signaling layer refuses it before an offer is parsed
        try:
            if isinstance(body, dict) and "cipher" in body:
                TunnelAnswer.from_body(body)
            else:
                TunnelOffer.from_body(body)
        except OfferError as exc:
            return f"{exc.path.split('[')[0]}: {normalise(exc.reason, 40)}"
        return None

    return Target("offer", [json.dumps(d).encode() for d in docs], check, json_docs=docs)


def _negotiation_target(stack: ExitStack) -> Target:
    from evio.overlay import negotiation as n

    first = next(iter(n.LinkType))
    docs: list[Any] = [
        n.encode_link_request(n.LinkRequest(first, existing=True, epoch=7)),
        n.encode_link_answer(n.LinkAnswer(True, held_as=first, epoch=9)),
        n.encode_link_answer(n.LinkAnswer(False, refusal=next(iter(n.LinkRefusal)))),
        n.encode_release_request(n.ReleaseRequest(first)),
        n.encode_release_answer(n.ReleaseAnswer(None)),
    ]
    decoders = (n.decode_link_request, n.decode_link_answer, n.decode_release_request, n.decode_release_answer)

    def check(data: bytes) -> str | None:
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            return "not-json"
        # Every decoder sees every input; the verdict is the one meant for this message's shape.
        verdicts: list[str | None] = []
        for decoder in decoders:
            try:
                decoder(body)
            except n.NegotiationError as exc:
                verdicts.append(normalise(str(exc), 50))
            else:
                verdicts.append(None)
        return None if None in verdicts else verdicts[len(data) % len(decoders)]

    return Target("negotiation", [json.dumps(d).encode() for d in docs], check, json_docs=docs)


def _config_target(stack: ExitStack) -> Target:
    from evio.config.loader import ConfigError, ConfigFileError, loads_config, parse_json, strip_line_comments

    base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="evio-fuzz-")))
    (base / "password").write_text("secret\n")
    example = Path(__file__).resolve().parents[2] / "config" / "evio.example.jsonc"
    minimal = {
        "overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "server": "127.0.0.1", "password_file": "password"},
                             "bridge": {"address": "10.10.0.1/24"}}},
    }
    texts = [json.dumps(minimal)]
    if example.exists():
        texts.append(example.read_text(encoding="utf-8"))
    docs = []
    for text in texts:
        try:
            loads_config(text, base)
        except ConfigError as exc:
            raise RuntimeError(f"config fuzz seed does not load: {exc}") from None
        docs.append(parse_json(strip_line_comments(text)))

    def check(data: bytes) -> str | None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "not-utf8"  # load_config reports it the same way, from the file
        try:
            loads_config(text, base)
        except ConfigFileError:
            return "not-json"
        except ConfigError as exc:
            return "schema: " + normalise(exc.problems[0].reason, 40) if exc.problems else "config"
        return None

    return Target("config", [t.encode() for t in texts], check, json_docs=docs)


def build_targets(stack: ExitStack) -> dict[str, Target]:
    records, stun = _records_and_stun_targets(stack)
    targets = [_frb_target(stack), records, stun, _signal_target(stack), _offer_target(stack),
               _negotiation_target(stack), _config_target(stack)]
    return {t.name: t for t in targets}


TARGETS = ("frb", "records", "stun", "signal", "offer", "negotiation", "config")


# -- running --------------------------------------------------------------------------------


@dataclass
class Result:
    target: str
    inputs: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    unexpected: Counter[str] = field(default_factory=Counter)
    examples: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    """First input and traceback of each unexpected exception."""
    seconds: float = 0.0


HOUSEKEEPING_EVERY = 2000


def run_target(target: Target, count: int, seed: int) -> Result:
    rng = random.Random(f"{target.name}-{seed}")
    result = Result(target.name)
    started = time.perf_counter()
    for i, data in enumerate(target.inputs(rng, count)):
        result.inputs += 1
        try:
            reason = target.check(data)
        except Exception as exc:  # noqa: BLE001 - the bug we are looking for
            key = f"{type(exc).__name__}: {normalise(str(exc), 50)}"
            result.unexpected[key] += 1
            if key not in result.examples:
                result.examples[key] = (data, traceback.format_exc(limit=6))
        else:
            if reason is None:
                result.accepted += 1
            else:
                result.rejected[reason] += 1
        if target.housekeeping is not None and i % HOUSEKEEPING_EVERY == HOUSEKEEPING_EVERY - 1:
            target.housekeeping()
    result.seconds = time.perf_counter() - started
    return result


@contextmanager
def fuzz_targets() -> Iterator[dict[str, Target]]:
    """Every target, with what they hold open (sockets, a temp dir) closed afterwards.

    Call it inside a running event loop (the tunnel data path needs one), and run the
    targets without awaiting in between: nothing the loop would do is part of the fuzz."""
    with ExitStack() as stack:
        yield build_targets(stack)


def quiet_logging() -> None:
    """The code under test logs its rejections (rate-limited); a million of them would drown the table."""
    import logging

    logging.disable(logging.WARNING)


def env_seed() -> int:
    return int(os.environ.get("EVIO_FUZZ_SEED", "1"))
