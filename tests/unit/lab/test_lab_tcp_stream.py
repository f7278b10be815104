"""The churn scenarios' TCP stream checker, over loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from evio.lab.tcp_stream import Client, payload
from evio.testing.waiting import wait_until


@contextlib.asynccontextmanager
async def echo_server(transform: Callable[[bytes], bytes] = lambda b: b, close_after: int | None = None) -> AsyncIterator[int]:
    """Echoes what it reads; with `close_after`, exactly that many bytes, then ends the stream."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        left = close_after
        while data := await reader.read(65536):
            if left is not None:
                # By bytes, not by reads: a loaded host hands two messages over in one read.
                data, left = data[:left], left - len(data[:left])
            writer.write(transform(data))
            await writer.drain()
            if left == 0:
                # End the stream with a FIN, and keep reading: closing with the client's later
                # messages unread would send a reset, which a slow client may see before the FIN.
                writer.write_eof()
                while await reader.read(65536):
                    pass
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port


async def run_client(port: int, seconds: float) -> Client:
    client = Client("127.0.0.1", port, rate=200, size=64, user_timeout=5)
    task = asyncio.create_task(client.run(connect_timeout=5))
    await asyncio.sleep(seconds)
    client.stop()
    await task
    return client


async def test_an_echoing_peer_keeps_the_stream_whole() -> None:
    async with echo_server() as port:
        client = Client("127.0.0.1", port, rate=200, size=64, user_timeout=5)
        task = asyncio.create_task(client.run(connect_timeout=5))
        # Until 50 came back, however long a loaded host takes (a fixed 0.5 s once saw fewer than 50 sent).
        await wait_until(lambda: client.report.echoed >= 50, timeout=30)
        client.stop()
        await task
    report = client.report
    assert report.broken is None and report.final
    # Stopped mid-stream: what was sent in the last few 5 ms slots may still be on its way back (more on a loaded host).
    assert report.sent >= 50 and report.sent - report.echoed <= 20
    assert report.max_stall < 2.0


async def test_a_corrupt_echo_breaks_the_stream() -> None:
    def flip(data: bytes) -> bytes:
        return data[:-1] + bytes([data[-1] ^ 1])

    async with echo_server(flip) as port:
        client = await run_client(port, 0.3)
    assert client.report.broken is not None and "wrong" in client.report.broken


async def test_a_closed_connection_breaks_the_stream() -> None:
    async with echo_server(close_after=64 * 9) as port:
        client = await run_client(port, 0.3)
    assert client.report.broken == "end of stream"
    assert client.report.echoed == 9


def test_payload_carries_its_number() -> None:
    assert payload(7, 16)[:8] == (7).to_bytes(8, "big") and payload(7, 16) != payload(8, 16)
