"""Every STUN and TURN server, transports in turn (servers.py), and the TURN stream bridge (stream_relay.py).

TURN queries are aioice's ``relayed_candidate`` replaced by fakes that answer, refuse or stay silent on
cue; the bridge runs over a real loopback TCP connection. No root, no network.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aioice.ice
import aioice.stun
import aioice.turn
import pytest
from aioice import Candidate, Connection, TransportPolicy

from evio.testing.waiting import wait_until
from evio.tunnel.path import servers
from evio.tunnel.path.servers import Attempt, RelayMemory, ServerGathering, attempts, describe
from evio.tunnel.path.stream_relay import HIGH_WATER, StreamBridge, split_stream
from evio.tunnel.path.turn_credentials import TurnRelay

# -- the order of transports ------------------------------------------------------------


def test_auto_tries_udp_then_tcp_on_the_same_port_then_tls_on_its_port_and_remembers_what_worked() -> None:
    server = TurnRelay("203.0.113.10", 3478, secret="s", tls_port=5349)
    assert attempts(server) == [Attempt("udp", ("203.0.113.10", 3478)), Attempt("tcp", ("203.0.113.10", 3478)),
                                Attempt("tls", ("203.0.113.10", 5349))]  # fmt: skip
    memory = RelayMemory()
    memory.worked(server, "tcp")
    assert [a.transport for a in attempts(server, memory.first(server))] == ["tcp", "udp", "tls"]
    other = TurnRelay("203.0.113.11", 3478, secret="s")
    assert memory.first(other) == "tcp"  # not seen yet: as the last that worked anywhere
    assert attempts(TurnRelay("h", 3478, secret="s", transport="tls", tls_port=443)) == [Attempt("tls", ("h", 443))]
    assert attempts(TurnRelay("h", 3478, secret="s", transport="udp"), "tcp") == [Attempt("udp", ("h", 3478))]


def test_a_failure_is_described_in_one_line() -> None:
    refused = aioice.stun.Message(aioice.stun.Method.ALLOCATE, aioice.stun.Class.ERROR)
    refused.attributes["ERROR-CODE"] = (403, "Forbidden")
    assert describe(aioice.stun.TransactionFailed(refused)) == "STUN transaction failed (403 - Forbidden)"
    assert describe(aioice.stun.TransactionTimeout()) == "no answer"
    assert describe(ConnectionRefusedError(111, "Connection refused")) == "Connection refused"
    assert describe(KeyError("XOR-MAPPED-ADDRESS")) == "answer without XOR-MAPPED-ADDRESS"


# -- gathering from several TURN servers ------------------------------------------------------


class FakeRelayProtocol:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


Behaviour = Callable[[], Awaitable[None]]


def silent() -> Behaviour:
    async def wait() -> None:
        await asyncio.sleep(3600)

    return wait


def after(seconds: float, error: BaseException | None = None) -> Behaviour:
    async def wait() -> None:
        await asyncio.sleep(seconds)
        if error is not None:
            raise error

    return wait


class FakeTurn:
    """aioice's relayed_candidate: each (address, transport) behaves as told; what it allocated is kept."""

    def __init__(self, behaviours: dict[tuple[int, str], Behaviour]) -> None:
        self.behaviours = behaviours
        self.started: list[tuple[int, str, float]] = []
        self.protocols: list[FakeRelayProtocol] = []

    async def __call__(self, *, turn_server: tuple[str, int], turn_transport: str, turn_ssl: Any, **_: Any) -> tuple[Candidate, Any]:
        transport = "tls" if turn_ssl else turn_transport
        self.started.append((turn_server[1], transport, time.monotonic()))
        await self.behaviours[(turn_server[1], transport)]()
        protocol = FakeRelayProtocol()
        self.protocols.append(protocol)
        candidate = Candidate(foundation="x", component=1, transport="udp", priority=1, host="198.51.100.1",
                              port=40000 + len(self.protocols), type="relay", related_address="0.0.0.0", related_port=9)  # fmt: skip
        return candidate, protocol


@pytest.fixture
def relay_conn() -> Connection:
    conn = Connection(ice_controlling=True, transport_policy=TransportPolicy.RELAY)
    conn._local_candidates_start = conn._local_candidates_end = True
    return conn


def creds(server: TurnRelay) -> tuple[str, str]:
    return "u", "p"


async def gather(monkeypatch: pytest.MonkeyPatch, conn: Connection, fake: FakeTurn, turn: list[TurnRelay],
                 memory: RelayMemory | None = None) -> tuple[ServerGathering, float]:  # fmt: skip
    monkeypatch.setattr(aioice.ice, "relayed_candidate", fake)
    gathering = ServerGathering(memory or RelayMemory())
    started = time.monotonic()
    await asyncio.wait_for(gathering.gather(None, (), conn, turn, creds), 3.0)
    return gathering, time.monotonic() - started


async def test_udp_without_an_answer_brings_in_tcp_after_a_pause_and_tcp_is_first_next_time(
    monkeypatch: pytest.MonkeyPatch, relay_conn: Connection
) -> None:
    fake = FakeTurn({(3478, "udp"): silent(), (3478, "tcp"): after(0.01), (5349, "tls"): silent()})
    memory = RelayMemory()
    server = TurnRelay("203.0.113.10", 3478, secret="s")
    gathering, took = await gather(monkeypatch, relay_conn, fake, [server], memory)
    assert [c.port for c in relay_conn.local_candidates] == [40001]
    assert [(port, t) for port, t, _ in fake.started] == [(3478, "udp"), (3478, "tcp")]
    # Timers never fire early; on a loaded machine they fire late, so the upper bounds only tell the pause and
    # the answer apart from the 3 s deadline.
    assert servers.STREAM_AFTER - 0.01 <= fake.started[1][2] - fake.started[0][2] < servers.STREAM_AFTER + 1.0
    assert took < servers.STREAM_AFTER + 1.0 and gathering.problems == []  # UDP lost the race: no problem
    # The next tunnel starts with TCP and is done in a round trip.
    fake.started.clear()
    conn2 = Connection(ice_controlling=True, transport_policy=TransportPolicy.RELAY)
    _, took = await gather(monkeypatch, conn2, fake, [server], memory)
    assert [t for _, t, _ in fake.started] == ["tcp"] and took < servers.STREAM_AFTER


async def test_a_refusing_server_is_named_and_a_silent_one_cut_off_once_another_allocated(
    monkeypatch: pytest.MonkeyPatch, relay_conn: Connection
) -> None:
    refused = aioice.stun.Message(aioice.stun.Method.ALLOCATE, aioice.stun.Class.ERROR)
    refused.attributes["ERROR-CODE"] = (401, "Unauthorized")
    fake = FakeTurn({
        (1000, "udp"): after(0.0, aioice.stun.TransactionFailed(refused)),  # refuses over UDP (and is not retried on TCP:)
        (1000, "tcp"): after(0.0, aioice.stun.TransactionFailed(refused)),
        (1000, "tls"): after(0.0, ConnectionRefusedError(111, "Connection refused")),
        (2000, "udp"): silent(),  # a dead server
        (3000, "udp"): after(0.02),  # a good one
    })  # fmt: skip
    turn = [TurnRelay("a", 1000, secret="s", tls_port=1000), TurnRelay("b", 2000, secret="s", transport="udp"),
            TurnRelay("c", 3000, secret="s", transport="udp")]  # fmt: skip
    gathering, took = await gather(monkeypatch, relay_conn, fake, turn)
    assert [c.port for c in relay_conn.local_candidates] == [40001]
    # The good server answered after 0.02 s; the dead one had GRACE more, not the whole deadline.
    assert 0.02 + servers.GRACE - 0.01 <= took < servers.GRACE + 1.0
    assert sorted((p.server, p.kind, p.reason) for p in gathering.problems) == [
        ("a:1000", "turn/tcp", "STUN transaction failed (401 - Unauthorized)"),
        ("a:1000", "turn/tls", "Connection refused"),
        ("a:1000", "turn/udp", "STUN transaction failed (401 - Unauthorized)"),
        ("b:2000", "turn/udp", "no allocation in time"),
    ]


async def test_every_server_that_allocates_gives_a_relayed_candidate(monkeypatch: pytest.MonkeyPatch, relay_conn: Connection) -> None:
    fake = FakeTurn({(1000, "udp"): after(0.01), (2000, "udp"): after(0.03)})
    turn = [TurnRelay("a", 1000, secret="s", transport="udp"), TurnRelay("b", 2000, secret="s", transport="udp")]
    gathering, _ = await gather(monkeypatch, relay_conn, fake, turn)
    assert len(relay_conn.local_candidates) == 2 and len(relay_conn._protocols) == 2
    assert gathering.problems == []


# -- the stream bridge ---------------------------------------------------------------------


def channel_data(channel: int, payload: bytes, pad: bool = True) -> bytes:
    data = struct.pack("!HH", channel, len(payload)) + payload
    return data + bytes(-len(data) % 4) if pad else data


def test_a_stream_splits_into_whole_messages_padded_to_four_bytes() -> None:
    stun = bytes(aioice.stun.Message(aioice.stun.Method.REFRESH, aioice.stun.Class.RESPONSE))
    stream = bytearray(channel_data(0x4000, b"\x01abc") + stun + channel_data(0x4001, b"\x01abcde") + channel_data(0x4000, b"\x01xyz")[:5])
    found, rest = split_stream(stream, 0)
    assert [(size, is_channel) for _, size, is_channel in found] == [(8, True), (len(stun), False), (10, True)]
    assert [offset for offset, _, _ in found] == [0, 8, 8 + len(stun)]
    assert rest == 8 + len(stun) + 12  # the incomplete last message waits for more
    assert split_stream(bytearray(b"\x40\x00"), 0) == ([], 0)


class RecordingTurnClient(aioice.turn.TurnClientTcpProtocol):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 3478), "u", "p", 600, 500)
        self.received: list[bytes] = []

    def datagram_received(self, data: bytes | str, addr: tuple[str, int]) -> None:
        self.received.append(bytes(data))  # type: ignore[arg-type]


async def bridge_over_loopback_tcp() -> tuple[StreamBridge, RecordingTurnClient, asyncio.StreamReader, asyncio.StreamWriter, asyncio.Server]:
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.get_running_loop().create_future()
    server = await asyncio.start_server(lambda r, w: accepted.set_result((r, w)), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await asyncio.get_running_loop().create_connection(RecordingTurnClient, "127.0.0.1", port)
    reader, writer = await accepted
    bridge = StreamBridge(client, 0x4000)
    bridge.attach()
    return bridge, client, reader, writer, server


async def test_the_bridge_hands_records_to_the_data_path_and_everything_else_to_the_turn_client() -> None:
    bridge, client, reader, writer, server = await bridge_over_loopback_tcp()
    datapath = bridge.datapath_sock
    try:
        stun = bytes(aioice.stun.Message(aioice.stun.Method.REFRESH, aioice.stun.Class.RESPONSE))
        records = [channel_data(0x4000, bytes([1]) + bytes([i]) * (i * 7 % 50)) for i in range(40)]
        stream = b"".join(records[:20]) + stun + channel_data(0x4001, b"\x01other") + b"".join(records[20:])
        for i in range(0, len(stream), 13):  # in pieces that cut messages anywhere
            writer.write(stream[i : i + 13])
            await writer.drain()
        got: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + 2
        while len(got) < 40 and time.monotonic() < deadline:
            try:
                got.append(await asyncio.wait_for(loop.sock_recv(datapath, 2048), 0.5))
            except TimeoutError:
                break
        assert got == [channel_data(0x4000, r[4:4 + struct.unpack("!H", r[2:4])[0]], pad=False) for r in records]
        assert client.received == [stun, channel_data(0x4001, b"\x01other", pad=False)]

        # Out: what the data path sends to the bridge goes on the stream padded, in order.
        for payload in (b"\x01a", b"\x01bcde", b"\x01fgh"):
            datapath.sendto(channel_data(0x4000, payload, pad=False), bridge.address)
        expected = b"".join(channel_data(0x4000, p) for p in (b"\x01a", b"\x01bcde", b"\x01fgh"))
        assert await asyncio.wait_for(reader.readexactly(len(expected)), 2) == expected

        # A sender that is not the data path is not relayed.
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        stranger.sendto(channel_data(0x4000, b"\x01evil", pad=False), bridge.address)
        stranger.close()
        await wait_until(lambda: bridge.foreign == 1, 2.0, what="the stranger's datagram counted")
    finally:
        bridge.detach()
        writer.close()
        server.close()
        client.transport.close()


async def test_records_beyond_the_streams_high_water_are_dropped_whole_and_counted() -> None:
    bridge, client, reader, writer, server = await bridge_over_loopback_tcp()
    try:
        client.transport.pause_reading()
        far = writer.transport
        assert isinstance(far, asyncio.Transport)
        far.pause_reading()  # the far end reads nothing: the stream's buffers fill
        record = channel_data(0x4000, b"\x01" + bytes(1395), pad=False)
        sent = 0
        while bridge.dropped_full == 0 and sent < 20 * HIGH_WATER // len(record):
            bridge.datapath_sock.sendto(record, bridge.address)
            sent += 1
            if sent % 64 == 0:
                await asyncio.sleep(0)
        await wait_until(lambda: bridge.dropped_full > 0, 2.0, what="a record dropped")
        assert bridge.records_out + bridge.dropped_full <= sent
        far.resume_reading()
        # What went on the stream is whole messages: it parses to the end, every one a record of ours.
        queued = bridge.records_out
        data = await asyncio.wait_for(reader.readexactly(queued * len(channel_data(0x4000, b"\x01" + bytes(1395)))), 10)
        found, rest = split_stream(bytearray(data), 0)
        assert len(found) == queued and rest == len(data)
    finally:
        bridge.detach()
        writer.close()
        server.close()
        client.transport.close()


# -- several STUN servers, through a real agent on loopback --------------------------------------------


class StunResponder:
    """A STUN server on loopback that answers every Binding with ``answer(request, addr)``."""

    def __init__(self, answer: Callable[[aioice.stun.Message, tuple[str, int]], bytes]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.answer = answer
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._serve)

    @property
    def address(self) -> tuple[str, int]:
        return self.sock.getsockname()

    def _serve(self) -> None:
        data, addr = self.sock.recvfrom(2048)
        self.sock.sendto(self.answer(aioice.stun.parse_message(data), addr), addr)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


def mapped(request: aioice.stun.Message, addr: tuple[str, int]) -> bytes:
    response = aioice.stun.Message(request.message_method, aioice.stun.Class.RESPONSE, request.transaction_id)
    response.attributes["XOR-MAPPED-ADDRESS"] = ("198.51.100.7", addr[1])
    return bytes(response)


def garbage(request: aioice.stun.Message, addr: tuple[str, int]) -> bytes:
    return b"\x01\x01\x00\x08" + request.transaction_id[:4] + b"\xff" * 24  # STUN-looking, cut short


async def test_a_stun_server_answering_garbage_is_named_and_does_not_hold_up_the_good_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from evio.tunnel.path.ice import IceAgent, IceConfig, RelayPolicy

    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.2"])
    good, bad = StunResponder(mapped), StunResponder(garbage)
    agent = IceAgent(IceConfig(stun=(bad.address, good.address), relay=RelayPolicy.NEVER, gather_timeout=3.0), True, "a", 0.0)
    try:
        started = time.monotonic()
        direct, _ = await agent.gather()
        took = time.monotonic() - started
        assert direct is not None and any("198.51.100.7" in c and "typ srflx" in c for c in direct.candidates)
        assert [(p.server, p.kind, p.reason) for p in agent.server_problems] == [
            (f"127.0.0.1:{bad.address[1]}", "stun", "no answer in time")]
        assert took < servers.GRACE + 1.0, took  # not the 3 s deadline
    finally:
        await agent.close()
        good.close()
        bad.close()
