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
- ``config``: the daemon's configuration text (``loads_config``);
- ``native``: datagrams into the native receive pass (``evio_native`` via ``NativeFdDatapath``),
  on a plain TAP, a vnet TAP (the native coalescer) and a TURN channel; structure-aware: an input
  may be plaintext frames the target seals under fresh counters, or a record header and payload
  it seals as given (``SEAL_FRAMES``, ``SEAL_RECORD``), so mutations get past the tag;
- ``vnet``: TAP reads with a virtio-net header (segmentation, checksum offsets) into the Python
  pass and the native one;
- ``dtls``: datagrams into a DTLS server, a client that sent its ClientHello, and a connected end
  (``DtlsHandshake``, OpenSSL's parser), seeded with a real handshake's flights;
- ``control``: request lines on the control socket (``respond`` and ``Node.probe``'s checks);
- ``metrics``: request heads on the metrics port (``MetricsServer.answer``);
- ``turn``: what a TURN server sends aioice's TURN client behind the gate (Allocate answers with
  the transaction id patched in, 401/438 retries, ChannelData, Data indications);
- ``openflow``: OpenFlow 1.3 messages from the switch, through os-ken's receive loop and parser
  into the app's handlers;
- ``xmpp``: XMPP stanzas through slixmpp's parser into the signal client;
- ``claims``: signed host announcements (versions 1-3, pages, certified addresses), checked and taken;
- ``ring``: chunks of signaling routed along the ring, reassembled and opened against the overlay CA;
- ``manifest``: the signed manifests of the revocation and member-list floods, parsed and checked.

A check that raises anything (a Rust panic is a ``BaseException``: pyo3's ``PanicException``) or
runs longer than its target's ``hang_seconds`` (``Hang``) counts as unexpected.

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
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from evio.testing.fake_tunnel import FakeUnderlay
from evio.testing.tcp_frames import tcp_frame
from evio.tunnel.datapath.mmsg import SlotRing

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
    hang_seconds: float = 5.0
    """An input still running after this long counts as unexpected (``Hang``)."""

    def inputs(self, rng: random.Random, count: int) -> Iterator[bytes]:
        strings = [s for doc in self.json_docs for s in _strings(doc, [])]
        # The seeds as they are first: whether a mutation of a signed seed stays valid depends on where its
        # random key's bytes fall, so without them a run could accept nothing and test nothing.
        yield from self.seeds[:count]
        for _ in range(count - min(count, len(self.seeds))):
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
        from evio.tunnel.datapath.fd_datapath import FdDatapath
        from evio.tunnel.datapath.keys import EXPORTER_LEN, Cipher, split_exporter
        from evio.tunnel.datapath.mmsg import SendtoBatch
        from evio.tunnel.path import aioice_patches, inbound_gate

        aioice_patches._install_stun_guard()
        self.material = bytes(range(EXPORTER_LEN))
        self.cipher = Cipher.AES_256_GCM
        self.connection = aioice.Connection(ice_controlling=False)
        self.connection.remote_username = "peerufrag"
        self.connection.remote_password = "peerpassword0123456789"
        self.protocol = aioice.ice.StunProtocol(self.connection)
        self.protocol.connection_made(_FakeTransport())  # type: ignore[arg-type]
        self.protocol.local_candidate = aioice.Candidate("1", 1, "udp", 100, "127.0.0.2", 3000, "host")
        self.gate = inbound_gate.InboundGate(self.connection, "fuzz")
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
        from evio.tunnel.path import aioice_patches

        dp = self.datapath
        assert self.ring is not None
        drops = dict(dp._drops)
        frames, controls, foreign = dp._rx_frames, self.controls, dp._foreign
        gate_rejects = sum(self.gate.rejected.values())
        stun_rejects = dict(aioice_patches.STUN_REJECTED)
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
        for stun_reason, count in aioice_patches.STUN_REJECTED.items():
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


class _GateUnderlay(FakeUnderlay):
    """The data path's underlay whose foreign datagrams go to a gated aioice protocol."""

    def __init__(self, protocol: Any, channel: int | None) -> None:
        super().__init__(channel)
        self._protocol = protocol

    def deliver_foreign(self, data: bytes, addr: Any) -> None:
        self._protocol.datagram_received(data, addr)

    def drain(self) -> None:
        """Drop what the data path sent to the peer."""
        while True:
            try:
                self.wire_end.recv(65536)
            except BlockingIOError:
                return


def _records_and_stun_targets(stack: ExitStack) -> tuple[Target, Target]:
    import aioice.stun

    from evio.tunnel.datapath.keys import make_aead
    from evio.tunnel.datapath.record import KIND_CONTROL, KIND_FRAME, ControlOpcode, pack_control, seal

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

    from evio.tunnel.datapath.keys import Cipher
    from evio.tunnel.errors import OfferError
    from evio.tunnel.path.dtls import TunnelCertificate
    from evio.tunnel.path.offer_answer import IceParameters, TunnelAnswer, TunnelOffer

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
    example = resources.files("evio.config").joinpath("example.jsonc")  # the one `evio config example` prints
    minimal = {
        "overlays": {"ov1": {"signal": {"jid": "n1@overlay.test", "server": "127.0.0.1", "password_file": "password"},
                             "bridge": {"address": "10.10.0.1/24"}}},
    }
    texts = [json.dumps(minimal)]
    if example.is_file():
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


# -- the native data path, the TAP side (vnet headers) ---------------------------------------------

# The native target's inputs are datagrams, or (marked by their first byte) plaintext the target seals
# first with the peer's keys: blind mutations of a sealed record never get past its tag, these do.
SEAL_FRAMES = 0xEE
"""``0xEE`` then frames, each ``len(2, BE) | frame``: sealed as frame records of the current epoch under
fresh counters, queued together, one receive pass (runs for the coalescer)."""
SEAL_RECORD = 0xED
"""``0xED | kind | epoch | counter(8)`` then the payload: one record sealed with those header fields
under the key of epoch 0 or 1 (the low bit of ``epoch``), whatever the header says."""


class _NativeEnd:
    """A native data path on a FakeTap (plain or vnet) and a loopback underlay, fed datagrams by the test end."""

    def __init__(self, vnet: bool, channel: int | None, material: bytes) -> None:
        from evio.testing.fake_tunnel import FakeTap, FakeUnderlay
        from evio.tunnel.datapath.keys import Cipher, split_exporter
        from evio.tunnel.datapath.native import NativeFdDatapath

        self.tap = FakeTap()
        self.underlay = FakeUnderlay(channel)
        self.controls = 0
        self.dp = NativeFdDatapath(1428, replay_window=128)

        def on_control(message: Any) -> None:
            self.controls += 1

        self.dp.start(self.tap.fd, self.underlay, split_exporter(material, Cipher.AES_256_GCM, False), on_control, vnet_hdr=vnet)
        self.channel = channel
        self.counter = 1 << 20  # frames sealed by the target: above any counter a seed names

    def send(self, record: bytes) -> bool:
        if self.channel is not None:
            record = self.channel.to_bytes(2, "big") + len(record).to_bytes(2, "big") + record
        try:
            self.underlay.send_to_datapath(record)
        except OSError:
            return False  # larger than a UDP datagram can be
        return True

    def feed(self) -> str | None:
        dp = self.dp
        drops = dict(dp._drops)
        frames, controls, foreign = dp._rx_frames, self.controls, len(self.underlay.foreign)
        dp._sock_pass_native()
        for reason, n in dp._drops.items():
            if n != drops[reason]:
                return reason.value
        if dp._rx_frames != frames or self.controls != controls:
            return None
        if len(self.underlay.foreign) != foreign:
            return "for the owner"  # STUN, DTLS, TURN: not the data path's
        return "unhandled"

    def close(self) -> None:
        self.dp.stop()
        self.tap.close()
        self.underlay.close()


def _native_target(stack: ExitStack) -> Target:
    from evio.tunnel.datapath import native
    from evio.tunnel.datapath.keys import EXPORTER_LEN, Cipher, make_aead, split_exporter
    from evio.tunnel.datapath.record import KIND_CONTROL, KIND_FRAME, ControlOpcode, pack_control, seal

    if not native.available():
        raise RuntimeError("evio_native is not installed (scripts/build-native): the native target cannot run")
    material = bytes(range(EXPORTER_LEN))
    tx = split_exporter(material, Cipher.AES_256_GCM, True).tx
    keys = [tx.keys(), tx.next().keys()]
    aeads = [make_aead(Cipher.AES_256_GCM, k.key) for k in keys]
    ends: list[_NativeEnd] = []

    def fresh() -> None:
        for end in ends:
            end.close()
        ends[:] = [_NativeEnd(False, None, material), _NativeEnd(True, None, material), _NativeEnd(True, 0x4001, material)]

    fresh()

    def close_all() -> None:
        for end in ends:
            end.close()

    stack.callback(close_all)

    def framed(*frames: bytes) -> bytes:
        return bytes([SEAL_FRAMES]) + b"".join(len(f).to_bytes(2, "big") + f for f in frames)

    def header(kind: int, epoch: int, counter: int) -> bytes:
        return bytes([SEAL_RECORD, kind, epoch]) + counter.to_bytes(8, "big")

    plain = bytes.fromhex("02000000000102000000000b0800") + b"payload" * 20
    stream = [tcp_frame(bytes([i]) * 1000, seq=i * 1000) for i in range(4)]
    stream6 = [tcp_frame(bytes([i]) * 900, seq=i * 900, ipv6=True) for i in range(3)]
    seeds = [
        framed(plain), framed(*stream), framed(*stream6), framed(stream[0], plain, stream[1], stream[1]),
        framed(tcp_frame(b"", flags=0x02), tcp_frame(b"x" * 10, flags=0x18)),
        header(KIND_FRAME, 0, 5) + plain, header(KIND_FRAME, 1, 5) + plain, header(KIND_FRAME, 0, 1) + stream[0],
        header(KIND_CONTROL, 0, 6) + pack_control(ControlOpcode.HELLO, 1),
        header(KIND_CONTROL, 0, 7) + pack_control(ControlOpcode.KEEPALIVE),
        seal(aeads[0], keys[0].iv, KIND_FRAME, 0, 3, plain),
        seal(aeads[0], keys[0].iv, KIND_FRAME, 0, 4, stream[2]),
        bytes.fromhex("16fefd0000000000000000") + bytes.fromhex("0050") + bytes(80),
        bytes.fromhex("000100082112a442" + "01" * 12 + "00240002" + "00000000"),
    ]

    def check(data: bytes) -> str | None:
        end = ends[len(data) % 3]
        if data[:1] == bytes([SEAL_FRAMES]):
            at, sent = 1, 0
            while at + 2 <= len(data):
                n = int.from_bytes(data[at : at + 2], "big")
                frame = data[at + 2 : at + 2 + n]
                at += 2 + n
                end.counter += 1
                sent += end.send(seal(aeads[0], keys[0].iv, KIND_FRAME, 0, end.counter, frame))
            if not sent:
                return "no frame in it"
        elif data[:1] == bytes([SEAL_RECORD]) and len(data) >= 11:
            epoch = data[2]
            record = seal(aeads[epoch & 1], keys[epoch & 1].iv, data[1], epoch, int.from_bytes(data[3:11], "big"), data[11:])
            if not end.send(record):
                return "too large to send"
        elif not end.send(data):
            return "too large to send"
        verdict = end.feed()
        end.tap.frames()
        return verdict

    return Target("native", seeds, check, housekeeping=fresh)


class _TapEnd:
    """A data path reading frames with vnet headers from a FakeTap, its records going to a loopback socket."""

    def __init__(self, implementation: str, material: bytes) -> None:
        from evio.testing.fake_tunnel import FakeTap, FakeUnderlay
        from evio.tunnel.datapath.fd_datapath import FdDatapath
        from evio.tunnel.datapath.keys import Cipher, split_exporter
        from evio.tunnel.datapath.native import NativeFdDatapath

        self.tap = FakeTap()
        self.underlay = FakeUnderlay()
        dp = NativeFdDatapath(1428, replay_window=128) if implementation == "native" else FdDatapath(1428, replay_window=128)
        dp.start(self.tap.fd, self.underlay, split_exporter(material, Cipher.AES_256_GCM, True), lambda m: None, vnet_hdr=True)
        self.dp = dp
        self.pass_ = dp._readers()[1]

    def feed(self, data: bytes) -> str | None:
        dp = self.dp
        try:
            self.tap.send_frame(data)
        except OSError:
            return "too large for the tap"
        drops = dict(dp._drops)
        frames = dp._tx_frames
        self.pass_()
        while True:
            try:
                self.underlay.wire_end.recv(65536)
            except BlockingIOError:
                break
        for reason, n in dp._drops.items():
            if n != drops[reason]:
                return reason.value
        return None if dp._tx_frames != frames else "nothing sent"

    def close(self) -> None:
        self.dp.stop()
        self.tap.close()
        self.underlay.close()


def _vnet_target(stack: ExitStack) -> Target:
    """A TAP's reads with a virtio-net header, into the Python pass (segmentation, checksums) and the native one."""
    from evio.tunnel.datapath import native
    from evio.tunnel.datapath.keys import EXPORTER_LEN
    from evio.tunnel.datapath.offload import F_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6, GSO_UDP, VnetHeader

    material = bytes(range(EXPORTER_LEN))
    ends = [_TapEnd("python", material)]
    if native.available():
        ends.append(_TapEnd("native", material))
    for end in ends:
        stack.callback(end.close)

    def vnet(flags: int, gso: int, size: int, start: int, offset: int) -> bytes:
        return VnetHeader(flags, gso, 0, size, start, offset).pack()

    plain = bytes.fromhex("02000000000102000000000b0806") + bytes(28)
    seeds = [
        vnet(0, GSO_NONE, 0, 0, 0) + plain,
        vnet(0, GSO_NONE, 0, 0, 0) + tcp_frame(b"a" * 100),
        vnet(F_NEEDS_CSUM, GSO_NONE, 0, 34, 16) + tcp_frame(b"b" * 300, partial=True),
        vnet(F_NEEDS_CSUM, GSO_NONE, 0, 54, 16) + tcp_frame(b"c" * 301, ipv6=True, partial=True),
        vnet(F_NEEDS_CSUM, GSO_TCPV4, 1300, 34, 16) + tcp_frame(bytes(range(256)) * 40, flags=0x18, partial=True),
        vnet(F_NEEDS_CSUM, GSO_TCPV6, 1200, 54, 16) + tcp_frame(b"d" * 5000, ipv6=True, partial=True),
        vnet(F_NEEDS_CSUM, GSO_TCPV4 | GSO_ECN, 1000, 34, 16) + tcp_frame(b"e" * 3001, flags=0x99, partial=True),
        vnet(F_NEEDS_CSUM, GSO_UDP, 1000, 34, 6) + plain,
    ]

    def check(data: bytes) -> str | None:
        return ends[len(data) % len(ends)].feed(data)

    return Target("vnet", seeds, check)


# -- DTLS, the control socket, metrics HTTP --------------------------------------------------------


def _dtls_target(stack: ExitStack) -> Target:
    """Datagrams into a DTLS server (its first flight), a client that sent its ClientHello, and a
    connected end (alerts, retransmitted flights): the handshake parser of OpenSSL behind ``DtlsHandshake``."""
    import datetime

    from evio.tunnel.path.dtls import DtlsHandshake, DtlsRole, DtlsState, TunnelCertificate

    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    ours, theirs = TunnelCertificate.generate("fuzz-a", now), TunnelCertificate.generate("fuzz-b", now)

    def server() -> DtlsHandshake:
        return DtlsHandshake(ours, DtlsRole.SERVER, theirs.fingerprint)

    def client() -> DtlsHandshake:
        end = DtlsHandshake(ours, DtlsRole.CLIENT, theirs.fingerprint)
        end.start()
        return end

    def connected() -> tuple[DtlsHandshake, list[bytes], list[bytes]]:
        """A handshake run to the end: our server, and the flights each side sent."""
        ours_, peer = server(), DtlsHandshake(theirs, DtlsRole.CLIENT, ours.fingerprint)
        from_peer, from_ours = peer.start(), []
        for _ in range(8):
            answer = [d for datagram in from_peer for d in ours_.receive(datagram)]
            from_ours += answer
            from_peer_next = [d for datagram in answer for d in peer.receive(datagram)]
            if not from_peer_next:
                break
            seeds_from_peer.extend(from_peer_next)
            from_peer = from_peer_next
        if ours_.state is not DtlsState.CONNECTED or peer.state is not DtlsState.CONNECTED:
            raise RuntimeError("dtls fuzz: the seed handshake did not complete")
        seeds_from_peer.extend(peer.close())
        return ours_, seeds_from_peer, from_ours

    seeds_from_peer: list[bytes] = [DtlsHandshake(theirs, DtlsRole.CLIENT, ours.fingerprint).start()[0]]
    end, from_peer, from_ours = connected()
    # The ClientHello and the server's first flight weigh more: most of the parsing is behind them.
    seeds = from_peer[:1] * 3 + from_ours[:1] * 2 + from_peer + from_ours
    ends: list[Any] = [server(), client(), end]

    def check(data: bytes) -> str | None:
        # By the handshake message of the first record: ClientHello to the server, the server's
        # flight to the client, anything else (alerts, finished flights, junk) to any of the three.
        kind = data[13] if len(data) > 13 and data[0] == 22 else -1
        which = 0 if kind == 1 else 1 if kind in (2, 3, 11, 12, 13, 14) else len(data) % 3
        dtls = ends[which]
        state = dtls.state
        out = dtls.receive(data)
        # Replaced once it moved on: every input meets the same state (a connected end is
        # replaced only when the input closed or failed it).
        if (dtls.state is not state or out) and (which < 2 or dtls.state is not DtlsState.CONNECTED):
            ends[which] = (server, client, lambda: connected()[0])[which]()
        if dtls.state is DtlsState.FAILED:
            return "failed: " + normalise(dtls.failure or "?", 40)
        if dtls.state is DtlsState.CLOSED:
            return "closed by peer"
        return None if out or dtls.state is not state else "ignored"

    return Target("dtls", seeds, check)


def _control_target(stack: ExitStack) -> Target:
    """Request lines on the daemon's control socket, as ``ControlServer`` answers them (``probe`` with its
    argument checks, by ``Node.probe`` on a fake node)."""
    import types

    from evio.node import control
    from evio.node.node import Node

    class Stack:
        async def probe(self, peer: int, timeout: float) -> dict[str, Any]:
            return {"result": "pong", "peer": f"{peer:032x}", "timeout": timeout}

    node = types.SimpleNamespace(overlays={"ov1": Stack()})
    handlers = {"status": lambda: {"version": 1, "overlays": {}}}
    request_handlers = {"probe": lambda request: Node.probe(node, request)}  # type: ignore[arg-type]
    docs: list[Any] = [
        {"request": "status"}, {"request": "ping"},
        {"request": "probe", "overlay": "ov1", "peer": "0123456789abcdef" * 2, "timeout": 2.5},
        {"request": "probe", "peer": "a" * 32},
    ]

    def check(data: bytes) -> str | None:
        # What _serve does with a line: the size check, then respond_async (run to its end here:
        # the fake probe never suspends; respond_async's wait_for is the only await it adds).
        line = data.split(b"\n", 1)[0] + b"\n"
        if len(line) > control.MAX_REQUEST_BYTES:
            return "request too large"
        request = control.parse_request(line)
        if not isinstance(request, str) and request["request"] == "probe":
            coro = request_handlers["probe"](request)
            try:
                coro.send(None)
            except StopIteration as done:
                answer = {"ok": True, "probe": done.value}
            except control.ControlError as exc:
                answer = {"ok": False, "error": str(exc)}
            else:
                coro.close()
                raise AssertionError("the fake probe suspended")
        else:
            answer = control.respond(line, handlers, request_handlers)
        json.dumps(answer, separators=(",", ":"))  # what _serve writes back
        return None if answer["ok"] else normalise(answer["error"], 40)

    return Target("control", [json.dumps(d).encode() + b"\n" for d in docs], check, json_docs=docs)


def _metrics_target(stack: ExitStack) -> Target:
    """Request heads on the metrics port, as ``MetricsServer`` reads and answers them."""
    from evio.node.metrics import MAX_REQUEST_HEAD, MetricsServer

    server = MetricsServer("127.0.0.1", 0, lambda: {"node_id": "0" * 32, "overlays": {}})
    seeds = [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /metrics?name[]=evio_links HTTP/1.0\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", b"GET / HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n",
    ]

    def check(data: bytes) -> str | None:
        # reader.readuntil(b"\r\n\r\n") with limit=MAX_REQUEST_HEAD: a longer head is refused unread.
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return "no head"
        if end > MAX_REQUEST_HEAD:
            return "head too large"
        status, content_type, body = server.answer(data[: end + 4])
        (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n").encode()
        return None if status.startswith("200") else status

    return Target("metrics", seeds, check)


# -- TURN responses --------------------------------------------------------------------------------

_TURN_SERVER = ("198.51.100.1", 3478)
_SEED_TID = bytes(range(1, 13))


class _Recorder(asyncio.DatagramProtocol):
    """What the TURN client hands on (relayed datagrams): counted."""

    def __init__(self) -> None:
        self.received = 0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received += 1


def _no_task(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Future[None]:
    coro.close()
    done = loop.create_future()
    done.set_result(None)
    return done


def _turn_target(stack: ExitStack) -> Target:
    """What a TURN server (or whoever forges its address) sends aioice's TURN client, as evio's ICE uses it:
    behind the InboundGate's guard, the STUN parser guarded. Each input answers an Allocate in flight
    (its transaction id patched in when it carries the seeds'), driving ``connect`` through its 401/438
    retries; and goes to an allocated client with a bound channel (ChannelData, Data indications)."""
    import aioice
    import aioice.stun
    import aioice.turn

    from evio.tunnel.path import aioice_patches, inbound_gate

    aioice_patches._install_stun_guard()
    connection = aioice.Connection(ice_controlling=False)
    gate = inbound_gate.InboundGate(connection, "fuzz-turn")
    loop = asyncio.get_running_loop()

    def client() -> tuple[Any, Callable[[bytes, Any], None], _Recorder]:
        proto = aioice.turn.TurnClientUdpProtocol(_TURN_SERVER, username="user", password="pw", lifetime=600,
                                                  channel_refresh_time=300)  # fmt: skip
        proto.connection_made(_FakeTransport())  # type: ignore[arg-type]
        receiver = _Recorder()
        proto.receiver = receiver
        # As InboundGate.guard (aioice_patches.intercept_datagrams) wraps the TURN client protocol of a relayed candidate.
        outer = types.SimpleNamespace(transport=types.SimpleNamespace(_TurnTransport__inner_protocol=proto),
                                      datagram_received=lambda data, addr: None)  # fmt: skip
        gate.guard(outer)  # type: ignore[arg-type]
        return proto, proto.datagram_received, receiver

    allocated, allocated_receive, relayed = client()
    allocated.channel_to_peer[0x4001] = PEER
    allocated.peer_to_channel[PEER] = 0x4001

    def message(method: Any, cls: Any, **attributes: Any) -> bytes:
        m = aioice.stun.Message(method, cls, transaction_id=_SEED_TID)
        m.attributes.update(attributes)
        return bytes(m)  # no FINGERPRINT: it would not survive the transaction id patched in

    Method, Class = aioice.stun.Method, aioice.stun.Class
    ok = {"XOR-RELAYED-ADDRESS": ("198.51.100.1", 50000), "XOR-MAPPED-ADDRESS": ("203.0.113.7", 40000), "LIFETIME": 600}
    seeds = [
        message(Method.ALLOCATE, Class.RESPONSE, **ok),
        message(Method.ALLOCATE, Class.RESPONSE, **{k: v for k, v in ok.items() if k != "LIFETIME"}),
        message(Method.ALLOCATE, Class.ERROR, **{"ERROR-CODE": (401, "Unauthorized"), "REALM": "evio", "NONCE": b"n0nce"}),
        message(Method.ALLOCATE, Class.ERROR, **{"ERROR-CODE": (438, "Stale Nonce"), "REALM": "evio", "NONCE": b"n1"}),
        message(Method.ALLOCATE, Class.ERROR, **{"ERROR-CODE": (486, "Allocation Quota Reached")}),
        message(Method.ALLOCATE, Class.ERROR),
        message(Method.DATA, Class.INDICATION, **{"XOR-PEER-ADDRESS": PEER, "DATA": b"\x70" * 40}),
        (0x4001).to_bytes(2, "big") + (40).to_bytes(2, "big") + b"\x70" * 40,
        (0x4002).to_bytes(2, "big") + (3).to_bytes(2, "big") + b"abc\x00",
    ]

    def check(data: bytes) -> str | None:
        rejected = sum(gate.rejected.values())
        received = relayed.received
        stun_rejects = dict(aioice_patches.STUN_REJECTED)
        allocated_receive(data, _TURN_SERVER)
        proto, receive, _ = client()
        connect = proto.connect()
        try:
            connect.send(None)  # the Allocate goes out; its transaction waits for an answer
            tid = next(iter(proto.transactions))
            if len(data) >= 20 and data[8:20] == _SEED_TID:
                data = data[:8] + tid + data[20:]
            receive(data, _TURN_SERVER)
            if not proto.transactions[tid]._Transaction__future.done():
                verdict: str | None = "ignored by the allocation"
            else:
                # An allocation starts its refresh task: never run here, so none is made (a million
                # cancelled tasks would wait in the loop's queue).
                loop.set_task_factory(_no_task)  # type: ignore[arg-type]
                try:
                    connect.send(None)
                except StopIteration:
                    verdict = None  # allocated
                except ConnectionError as exc:
                    verdict = "ConnectionError: " + normalise(str(exc), 40)
                except aioice.stun.TransactionFailed as exc:
                    verdict = f"TransactionFailed: {exc.response.error_code}"
                else:
                    verdict = "retried with credentials"
                finally:
                    loop.set_task_factory(None)
        finally:
            connect.close()
        if sum(gate.rejected.values()) != rejected:
            return next(r.value for r in gate.rejected)
        if verdict == "ignored by the allocation":
            if relayed.received != received:
                return None  # relayed data for the allocated client
            for stun_reason, count in aioice_patches.STUN_REJECTED.items():
                if count != stun_rejects.get(stun_reason, 0):
                    return "stun: " + stun_reason.value
        return verdict

    return Target("turn", seeds, check)


# -- OpenFlow from the switch ----------------------------------------------------------------------


class _FakeDatapath:
    """What the app needs of an os-ken Datapath: the OF 1.3 codec, an id, and send_msg (which encodes)."""

    def __init__(self, dpid: int) -> None:
        from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

        self.ofproto = ofproto_v1_3
        self.ofproto_parser = ofproto_v1_3_parser
        self.id = dpid
        self.sent = 0

    def send_msg(self, msg: Any) -> None:
        msg.set_xid(1)
        msg.serialize()
        self.sent += 1

    def set_xid(self, msg: Any) -> None:
        msg.set_xid(1)


def _openflow_target(stack: ExitStack) -> Target:
    """OpenFlow 1.3 messages as the switch (ovs-vswitchd) sends them, read as os-ken's receive loop reads
    them (``Datapath._recv_loop``: header, length, ``ofproto_parser.msg``) and dispatched to the app's
    handlers, unwrapped: a handler's exception, which ``_contained`` would count and log, counts here as
    unexpected. Where os-ken itself raises (an unknown version, a truncated message) it drops the
    connection and the switch reconnects: a rejection, named so."""
    import importlib
    import struct

    importlib.import_module("evio.sdn.ofapp")  # first: it loads os-ken as the daemon does (1.3 only, guarded)
    from os_ken.controller import ofp_event
    from os_ken.ofproto import ofproto_common, ofproto_parser, ofproto_v1_3, ofproto_v1_3_parser
    from os_ken.ofproto.ofproto_v1_3 import OFPMP_FLOW, OFPMP_PORT_DESC

    from evio.sdn import frb
    from evio.sdn.boundary import CollectingSink, ControllerChannel
    from evio.sdn.ofapp import BoundedFloodApp, ControllerConfig
    from evio.sdn.openflow_messages import EVIO_COOKIE

    ofp, parser = ofproto_v1_3, ofproto_v1_3_parser
    clock = [100.0]
    sink = CollectingSink()
    channel = ControllerChannel(sink)
    app = BoundedFloodApp(evio_controller=ControllerConfig(channel, clock=lambda: clock[0]))
    dp = _FakeDatapath(0xF022)
    channel.commands.attach("ov1", dp.id, node_id=0x100)
    channel.commands.peer_up("ov1", "evot200", 0x200)
    local_mac, peer_mac = "02:00:00:00:01:00", "02:00:00:00:02:00"

    def header(msg_type: int, body: bytes) -> bytes:
        return struct.pack("!BBHI", ofp.OFP_VERSION, msg_type, 8 + len(body), 7) + body

    def match(**fields: Any) -> bytes:
        buf = bytearray()
        parser.OFPMatch(**fields).serialize(buf, 0)
        return bytes(buf)

    def port(no: int, name: str, mac: str) -> bytes:
        return struct.pack("!I4x6s2x16sIIIIIIII", no, bytes.fromhex(mac.replace(":", "")), name.encode(), 0, 0, 0, 0, 0, 0, 0, 0)

    def multipart(kind: int, body: bytes, more: bool = False) -> bytes:
        return header(ofp.OFPT_MULTIPART_REPLY, struct.pack("!HH4x", kind, ofp.OFPMPF_REPLY_MORE if more else 0) + body)

    def flow_stats(cookie: int, byte_count: int, **fields: Any) -> bytes:
        m = match(**fields)
        instructions = b""
        body = struct.pack("!BxIIHHHH4xQQQ", 0, 10, 0, 10, 30, 0, 0, cookie, 3, byte_count) + m + instructions
        return struct.pack("!H", 2 + len(body)) + body

    def packet_in(in_port: int, data: bytes) -> bytes:
        return header(ofp.OFPT_PACKET_IN, struct.pack("!IHBBQ", ofp.OFP_NO_BUFFER, len(data), 0, 0, 0) + match(in_port=in_port)
                      + b"\x00\x00" + data)  # fmt: skip

    def flow_removed(cookie: int, **fields: Any) -> bytes:
        return header(ofp.OFPT_FLOW_REMOVED, struct.pack("!QHBBIIHHQQ", cookie, 10, 0, 0, 5, 0, 30, 0, 4, 400) + match(**fields))

    arp = bytes.fromhex("ffffffffffff" + local_mac.replace(":", "") + "0806") + bytes(28)
    unicast = bytes.fromhex(peer_mac.replace(":", "") + local_mac.replace(":", "") + "0800") + b"x" * 46
    broadcast = frb.pack(frb.broadcast(arp, 0x200, 0x200, 1))
    flow = {"in_port": 2, "eth_src": peer_mac, "eth_dst": local_mac}
    ports = port(ofp.OFPP_LOCAL, "evoov1", local_mac) + port(2, "evot200", "02:00:00:00:00:99")
    seeds = [
        packet_in(ofp.OFPP_LOCAL, arp), packet_in(2, unicast), packet_in(2, broadcast),
        header(ofp.OFPT_PORT_STATUS, struct.pack("!B7x", ofp.OFPPR_ADD) + port(3, "evot300", "02:00:00:00:00:98")),
        header(ofp.OFPT_PORT_STATUS, struct.pack("!B7x", ofp.OFPPR_DELETE) + port(2, "evot200", "02:00:00:00:00:99")),
        multipart(OFPMP_PORT_DESC, ports),
        multipart(OFPMP_FLOW, flow_stats(EVIO_COOKIE, 5000, **flow) + flow_stats(1, 7, in_port=1)),
        multipart(OFPMP_FLOW, flow_stats(EVIO_COOKIE, 90, **flow), more=True),
        flow_removed(EVIO_COOKIE, **flow), flow_removed(0, in_port=1),
        header(ofp.OFPT_ECHO_REQUEST, b"ping"), header(ofp.OFPT_ERROR, struct.pack("!HH", 1, 2) + b"x" * 20),
    ]
    # Handlers by event, unwrapped (see the docstring); connected as os-ken would after the handshake.
    handlers: dict[type, Callable[[BoundedFloodApp, Any], None]] = {
        ofp_event.EventOFPPacketIn: BoundedFloodApp.packet_in.__wrapped__,
        ofp_event.EventOFPPortStatus: BoundedFloodApp.port_status.__wrapped__,
        ofp_event.EventOFPPortDescStatsReply: BoundedFloodApp.port_desc_reply.__wrapped__,
        ofp_event.EventOFPFlowRemoved: BoundedFloodApp.flow_removed.__wrapped__,
        ofp_event.EventOFPFlowStatsReply: BoundedFloodApp.flow_stats_reply.__wrapped__,
    }

    def connect() -> None:
        features = types.SimpleNamespace(msg=types.SimpleNamespace(datapath=dp))
        app.switch_features(features)
        app.port_desc_reply(ofp_event.EventOFPPortDescStatsReply(ofproto_parser.msg(
            dp, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, len(seeds[5]), 7, bytearray(seeds[5]))))  # fmt: skip
        if app.overlays["ov1"].switch.ports.get(2) is None:
            raise RuntimeError("openflow fuzz: the switch did not take its ports")

    connect()
    min_len = ofproto_common.OFP_HEADER_SIZE

    def check(data: bytes) -> str | None:
        from os_ken import exception as osken_exception

        clock[0] += 0.01
        buf = bytearray(data)
        if len(buf) < min_len:
            return "incomplete header (waits for more)"
        version, msg_type, msg_len, xid = ofproto_parser.header(buf)
        msg_len = max(msg_len, min_len)  # as _recv_loop: "someone isn't playing nicely"
        if len(buf) < msg_len:
            return "incomplete message (waits for more)"
        try:
            msg = ofproto_parser.msg(dp, version, msg_type, msg_len, xid, buf[:msg_len])
        except (osken_exception.OFPUnknownVersion, osken_exception.OFPTruncatedMessage) as exc:
            return f"os-ken drops the connection: {type(exc).__name__}"
        if hung():
            # os-ken's msg() caught the Hang with its bare except: a parser that loops on a
            # zero-length element (instructions, queues); its receive thread would spin forever.
            raise Hang(f"os-ken's parser of message type {msg_type} loops (zero-length element)")
        if msg is None:
            return "os-ken: unparsable (logged)"
        handler = handlers.get(type(ofp_event.ofp_msg_to_ev(msg)))
        if handler is None:
            return "no handler: " + type(msg).__name__
        errors = app.handler_errors
        with app._lock:
            handler(app, ofp_event.ofp_msg_to_ev(msg))
        if app.handler_errors != errors:
            raise AssertionError("a handler failed inside")
        return None

    def housekeeping() -> None:
        # Port deletions and additions pile up; a fresh connection as the switch would make after a restart.
        app.switch_gone(types.SimpleNamespace(datapath=dp))
        connect()

    # A short limit: os-ken's endless loops are found by it, and each costs that long. CPU time of the whole
    # process (threads of earlier tests included), so not so short that their work could fill it.
    return Target("openflow", seeds, check, housekeeping=housekeeping, hang_seconds=1.0)


# -- XMPP stanzas ----------------------------------------------------------------------------------

_STREAM_HEADER = (b"<?xml version='1.0'?><stream:stream xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams'"
                  b" from='overlay.test' id='fuzz' version='1.0' xml:lang='en'>")  # fmt: skip


def _xmpp_target(stack: ExitStack) -> Target:
    """Stanza XML from the XMPP server, through slixmpp's stream parser (``XMLStream.data_received``)
    into the handlers ``SignalClient`` registers for a session (presence, roster pushes, messages with
    the evio payload, bounces), on a client whose roster makes one peer a member. The handlers are
    called through wrappers that keep what they raise: slixmpp would log it and answer an error, here
    it counts as unexpected. A stream the parser gave up on is started again (slixmpp disconnects)."""
    from slixmpp.xmlstream.handler import Callback
    from slixmpp.xmlstream.matcher import StanzaPath

    from evio.ratelimit import PeerRateLimiter, Rate
    from evio.signal import protocol
    from evio.signal.client import SignalClient, SignalSettings

    me, peer = "n1@overlay.test", "n2@overlay.test/evio-" + "2" * 32
    node_a, node_b = "1" * 32, "2" * 32
    raised: list[BaseException] = []

    def kept(handler: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(stanza: Any) -> None:
            try:
                handler(stanza)
            except Exception as exc:  # noqa: BLE001 - kept for the check to raise
                raised.append(exc)

        return run

    state: dict[str, Any] = {}

    def session() -> None:
        client = SignalClient(SignalSettings(jid=me, server="127.0.0.1", memberships={"ov1": int(node_a, 16)},
                                             password="pw", insecure_plaintext=True))  # fmt: skip
        # Every input comes from one peer: its stanza budget (SENDER_RATE) would leave all but the first 200 unread.
        client._sender_budget = PeerRateLimiter[str](Rate(1.0, 1 << 40))
        xmpp = client._make_xmpp()
        xmpp.exception = raised.append  # type: ignore[method-assign]  # event handlers' exceptions
        xmpp.add_filter("in", client._count_in)
        xmpp.add_event_handler("presence_available", kept(client._on_presence_available))
        xmpp.add_event_handler("presence_unavailable", kept(client._on_presence_unavailable))
        xmpp.add_event_handler("roster_update", kept(lambda _: client._sync_membership(xmpp)))
        xmpp.add_event_handler("message_error", kept(client._on_message_error))
        xmpp.register_handler(Callback("evio signal", StanzaPath("message/evio"), kept(client._on_message)))
        client._membership_changed({peer.split("/")[0]: frozenset({"ov1"})})
        state.update(client=client, xmpp=xmpp)
        restart()

    def restart() -> None:
        xmpp = state["xmpp"]
        xmpp.init_parser()
        xmpp.data_received(_STREAM_HEADER)

    def message(doc: Any, kind: str = "normal") -> bytes:
        text = json.dumps(doc).replace("&", "&amp;").replace("<", "&lt;")
        return (f"<message from='{peer}' to='{me}/r' type='{kind}' id='m1'><evio xmlns='{protocol.NAMESPACE}'>{text}"
                f"</evio></message>").encode()  # fmt: skip

    request = {"v": 1, "kind": "request", "overlay": "ov1", "src": node_b, "dst": node_a, "txid": "t1-abcdef",
               "action": "tunnel.offer", "body": {"k": 1}}  # fmt: skip
    announce = {"v": 1, "kind": "announce", "members": [{"overlay": "ov1", "node": node_b}]}
    seeds = [
        message(request), message(request | {"kind": "response", "body": {}}),
        f"<presence from='{peer}' to='{me}'><evio xmlns='{protocol.NAMESPACE}'>{json.dumps(announce)}</evio></presence>".encode(),
        f"<presence from='{peer}' to='{me}' type='unavailable'><status>relogin</status></presence>".encode(),
        f"<message from='{peer}' to='{me}/r' type='error' id='m9'><error type='cancel'>"
        "<service-unavailable xmlns='urn:ietf:params:xml:ns:xmpp-stanzas'/></error></message>".encode(),
        f"<iq type='set' id='push1' to='{me}/r'><query xmlns='jabber:iq:roster'><item jid='{peer.split('/')[0]}'"
        " subscription='both'><group>ov1</group></item></query></iq>".encode(),
        b"<iq type='get' id='ping1' from='overlay.test'><ping xmlns='urn:xmpp:ping'/></iq>",
        b"<stream:error><conflict xmlns='urn:ietf:params:xml:ns:xmpp-streams'/></stream:error>",
    ]
    session()

    def check(data: bytes) -> str | None:
        xmpp, client = state["xmpp"], state["client"]
        before = (client.stanzas_in, dict(client.drops.counts))
        try:
            xmpp.data_received(data)
        finally:
            # A fresh stream for the next input: after a parse error slixmpp disconnects (and
            # the parser stays broken), an open element would swallow the next input.
            restart()
        if raised:
            exc = raised.pop()
            raised.clear()
            raise exc
        if client.stanzas_in == before[0]:
            return "no stanza (parse error, incomplete, or the stream ended)"
        for reason, n in client.drops.counts.items():
            if n != before[1].get(reason, 0):
                return "signal: " + reason.value
        return None

    def housekeeping() -> None:
        session()  # what the fuzz taught the endpoint (pending requests, presence) goes with it

    return Target("xmpp", seeds, check, housekeeping=housekeeping)


def _claims_target(stack: ExitStack) -> Target:
    """Signed host announcements (decision 0055: versions 1-3, pages, certified addresses) as a switch's
    flood hands them to the daemon: parsed, checked against the CA through the certificate cache, and taken."""
    import datetime
    import ipaddress

    from evio.signal import host_claims as hc
    from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
    from evio.tunnel.path.trust import TrustAnchor

    overlay, now = "fuzzov", 1_800_000_000.0
    when = datetime.datetime.fromtimestamp(now, datetime.UTC)
    ca_key, ca = make_overlay_ca(overlay, when, 30)
    anchor = TrustAnchor(overlay, (ca,))
    address = ipaddress.IPv4Address("10.254.0.1")
    key, cert = issue_node_certificate(ca_key, ca, [overlay], 0xA1 << 120, when, 30, addresses={overlay: [address]})
    macs = [f"02:00:00:00:{i // 256:02x}:{i % 256:02x}" for i in range(70)]
    ms = int(now * 1000)
    seeds = [hc.pack(key, cert, overlay, 0xA1 << 120, ms, macs[:3]),
             hc.pack(key, cert, overlay, 0xA1 << 120, ms, macs[:2], [(address, macs[0])]),
             hc.pack(key, cert, overlay, 0xA1 << 120, ms, macs[:64], (), 0, 2),
             hc.pack(key, cert, overlay, 0xA1 << 120, ms, macs[64:], (), 1, 2)]
    certificates = hc.Certificates()
    claims = hc.HostClaims(clock=lambda: now)

    def check(data: bytes) -> str | None:
        try:
            claims.take(hc.check(anchor, hc.parse(overlay, data, now), now, certificates))
        except hc.ClaimError as exc:
            return normalise(str(exc), 40)
        return None

    def housekeeping() -> None:
        claims.owners()  # who holds what, over everything taken so far

    return Target("claims", seeds, check, housekeeping=housekeeping)


def _ring_target(stack: ExitStack) -> Target:
    """Chunks of link requests and offers routed along the ring (decision 0064), as a tunnel's control record
    hands them over: parsed, reassembled, and opened against the overlay CA."""
    import datetime

    from evio.overlay import ring_signal as rs
    from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
    from evio.tunnel.path.trust import TrustAnchor

    overlay, now = "fuzzov", 1_800_000_000.0
    when = datetime.datetime.fromtimestamp(now, datetime.UTC)
    ca_key, ca = make_overlay_ca(overlay, when, 30)
    anchor = TrustAnchor(overlay, (ca,))
    src, dst = 0xA1 << 120, 0xB2 << 120
    key, cert = issue_node_certificate(ca_key, ca, [overlay], src, when, 30)
    dst_key, dst_cert = issue_node_certificate(ca_key, ca, [overlay], dst, when, 30)
    keys = {src: key, dst: dst_key}  # each message is sealed to its target's key (review21f F8)
    request = rs.RingMessage("request", overlay, src, dst, "tx-1", now, "tunnel_offer", {"blob": "x" * 3000})
    answer = rs.RingMessage("response", overlay, dst, src, "tx-1", now, body={"ok": True})
    seeds = (rs.chunks(rs.seal(request, cert, key, dst_key.public_key()), 7, src, dst)
             + rs.chunks(rs.seal(answer, dst_cert, dst_key, key.public_key()), 8, dst, src))  # fmt: skip
    reassembly = rs.Reassembly()
    clock = [now]

    def check(data: bytes) -> str | None:
        clock[0] += 0.01  # partial messages age out of their slots
        try:
            chunk = rs.parse_chunk(data)
            if chunk.kind != rs.DATA:
                return "unreachable notice"
            sealed = reassembly.add(chunk, clock[0])
            if sealed is None:
                return None  # accepted: held for its message's other chunks
            own = keys.get(chunk.dst)
            if own is None:
                return "not for us"  # relayed on, unopened
            rs.open_sealed(sealed, chunk.src, anchor, now, key=own, header_dst=chunk.dst)
        except rs.RingSignalError as exc:
            return exc.reason.value
        return None

    return Target("ring", seeds, check)


def _manifest_target(stack: ExitStack) -> Target:
    """Manifests of the signed-document floods (revocation and member lists, decisions 0043, 0063): a member's
    signed list of chunk hashes, parsed after the flood's header and checked against the overlay CA."""
    import datetime

    from evio.signal import host_claims as hc
    from evio.signal import revocation_manifest as rm
    from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
    from evio.tunnel.path.trust import TrustAnchor

    overlay, now = "fuzzov", 1_800_000_000.0
    when = datetime.datetime.fromtimestamp(now, datetime.UTC)
    ca_key, ca = make_overlay_ca(overlay, when, 30)
    anchor = TrustAnchor(overlay, (ca,))
    key, cert = issue_node_certificate(ca_key, ca, [overlay], 0xA1 << 120, when, 30)
    header = b"EVRL\x03\x00"  # a stand-in: the flood reads its own header before the manifest's fields
    few, many = [bytes([i]) * 300 for i in range(3)], [bytes([i % 256]) * 40 for i in range(70)]
    seeds = [rm.pack(key, cert, overlay, header, 0xA1 << 120, few), rm.pack(key, cert, overlay, header, 0xA1 << 120, many)]
    counts = {seeds[0]: len(few), seeds[1]: len(many)}
    certificates = hc.Certificates()

    def check(data: bytes) -> str | None:
        count = counts.get(data, 1 + len(data) % 80)  # the chunk count the flood's header would give
        try:
            rm.check(anchor, overlay, rm.parse(data, len(header), count), now, certificates)
        except rm.ManifestError as exc:
            return normalise(str(exc), 40)
        return None

    return Target("manifest", seeds, check)


def build_targets(stack: ExitStack) -> dict[str, Target]:
    records, stun = _records_and_stun_targets(stack)
    targets = [_frb_target(stack), records, stun, _signal_target(stack), _offer_target(stack),
               _negotiation_target(stack), _config_target(stack), _native_target(stack), _vnet_target(stack),
               _dtls_target(stack), _control_target(stack), _metrics_target(stack), _turn_target(stack),
               _openflow_target(stack), _xmpp_target(stack), _claims_target(stack), _ring_target(stack),
               _manifest_target(stack)]
    return {t.name: t for t in targets}


TARGETS = ("frb", "records", "stun", "signal", "offer", "negotiation", "config", "native", "vnet", "dtls", "control",
           "metrics", "turn", "openflow", "xmpp", "claims", "ring",
           "manifest")


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


WALL_FACTOR, WALL_MIN = 20.0, 5.0  # the wall-clock backstop to a target's CPU-time limit


def hung() -> bool:
    """Whether the current input's time ran out (a target whose code swallows ``Hang`` asks)."""
    return _hung[0]


class Hang(BaseException):
    """An input the target was still busy with after its ``hang_seconds`` (an endless loop, most likely)."""


_hung = [False]
"""Set when the alarm went off: code with a bare ``except:`` (os-ken's parser) swallows the Hang."""


def _hang(signum: int, frame: Any) -> None:
    _hung[0] = True
    raise Hang("still running after the target's time limit")


def run_target(target: Target, count: int, seed: int) -> Result:
    import signal

    rng = random.Random(f"{target.name}-{seed}")
    result = Result(target.name)
    started = time.perf_counter()
    # CPU time first: a loop burns CPU, while a process that waits for a core on a loaded machine does not
    # (a wall-clock limit of 0.25 s called an ordinary os-ken parse a hang at load 5). Wall time backs it,
    # `WALL_FACTOR` times longer, for a check that blocks without spinning.
    previous = signal.signal(signal.SIGPROF, _hang), signal.signal(signal.SIGALRM, _hang)
    try:
        _run_inputs(target, count, rng, result)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, previous[0])
        signal.signal(signal.SIGALRM, previous[1])
    result.seconds = time.perf_counter() - started
    return result


def _run_inputs(target: Target, count: int, rng: random.Random, result: Result) -> None:
    import signal

    for i, data in enumerate(target.inputs(rng, count)):
        result.inputs += 1
        try:
            _hung[0] = False
            signal.setitimer(signal.ITIMER_PROF, target.hang_seconds)
            signal.setitimer(signal.ITIMER_REAL, max(WALL_FACTOR * target.hang_seconds, WALL_MIN))
            try:
                reason = target.check(data)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_REAL, 0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - the bug we are looking for; a Rust panic is a BaseException
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

    logging.disable(logging.CRITICAL)


def env_seed() -> int:
    return int(os.environ.get("EVIO_FUZZ_SEED", "1"))
