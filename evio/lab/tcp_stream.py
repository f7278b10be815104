"""A long-lived TCP stream with sequence checks, for churn and fault scenarios.

    python -m evio.lab.tcp_stream serve --bind 10.254.0.3 --port 5300
    python -m evio.lab.tcp_stream client --connect 10.254.0.3:5300 --rate 20

The client sends numbered messages at `rate` per second and checks that each
comes back whole and in order. Once a second, and when it stops (SIGTERM,
SIGINT), it prints a JSON report line: messages sent and echoed, the longest
time the stream made no progress while messages were outstanding, and why it
broke, if it did. A stream breaks on a reset, an end of stream, a corrupt or
out-of-order echo, or no progress for `--user-timeout` seconds (TCP_USER_TIMEOUT:
the kernel gives up on unacknowledged data after that long, where its default
would wait some 15 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass

_HEADER = struct.Struct(">Q")
TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)


def payload(seq: int, size: int) -> bytes:
    """Message `seq`: its number, then a pattern that depends on it (so a misplaced byte shows)."""
    body = bytes((seq + i) & 0xFF for i in range(size - _HEADER.size))
    return _HEADER.pack(seq) + body


@dataclass
class StreamReport:
    sent: int = 0
    echoed: int = 0
    max_stall: float = 0.0
    broken: str | None = None
    final: bool = False

    def line(self) -> str:
        return json.dumps({**asdict(self), "max_stall": round(self.max_stall, 3), "t": round(time.time(), 3)})


def _tune(sock: socket.socket, user_timeout: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, int(user_timeout * 1000))


async def serve(bind: str, port: int, user_timeout: float) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _tune(writer.get_extra_info("socket"), user_timeout)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, bind, port)
    print(json.dumps({"listening": f"{bind}:{port}"}), flush=True)
    async with server:
        await server.serve_forever()


class Client:
    def __init__(self, host: str, port: int, rate: float, size: int, user_timeout: float) -> None:
        self.host, self.port, self.rate, self.size, self.user_timeout = host, port, rate, size, user_timeout
        self.report = StreamReport()
        self._last_progress = time.monotonic()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _stall(self) -> float:
        if self.report.sent == self.report.echoed:
            self._last_progress = time.monotonic()  # nothing outstanding: idle is not a stall
            return 0.0
        return time.monotonic() - self._last_progress

    async def run(self, connect_timeout: float) -> StreamReport:
        reader, writer = await self._connect(connect_timeout)
        _tune(writer.get_extra_info("socket"), self.user_timeout)
        tasks = [asyncio.create_task(c) for c in (self._send(writer), self._receive(reader), self._print())]
        stopper = asyncio.create_task(self._stop.wait())
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in [stopper, *tasks]:
            task.cancel()
        await asyncio.gather(stopper, *tasks, return_exceptions=True)
        writer.close()
        self.report.max_stall = max(self.report.max_stall, self._stall())
        self.report.final = True
        print(self.report.line(), flush=True)
        return self.report

    async def _connect(self, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 2.0)
            except (TimeoutError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while True:
                if self.report.sent == self.report.echoed:
                    self._last_progress = time.monotonic()  # stalls count from the first outstanding message
                writer.write(payload(self.report.sent, self.size))
                self.report.sent += 1
                await writer.drain()
                # A late loop skips the slots it missed: a catch-up burst would count as stream stalls.
                next_at = max(next_at + interval, time.monotonic())
                await asyncio.sleep(next_at - time.monotonic())
        except OSError as exc:
            self.report.broken = self.report.broken or f"send: {exc}"

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                data = await reader.readexactly(self.size)
                expected = payload(self.report.echoed, self.size)
                if data != expected:
                    (got,) = _HEADER.unpack_from(data)
                    self.report.broken = f"echo {self.report.echoed} wrong (got message {got})"
                    return
                self.report.max_stall = max(self.report.max_stall, time.monotonic() - self._last_progress)
                self.report.echoed += 1
                self._last_progress = time.monotonic()
        except asyncio.IncompleteReadError:
            self.report.broken = "end of stream"
        except OSError as exc:
            self.report.broken = f"receive: {exc}"

    async def _print(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.report.max_stall = max(self.report.max_stall, self._stall())
            print(self.report.line(), flush=True)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evio.lab.tcp_stream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    server = sub.add_parser("serve")
    server.add_argument("--bind", required=True)
    server.add_argument("--port", type=int, required=True)
    client = sub.add_parser("client")
    client.add_argument("--connect", type=_host_port, required=True, metavar="HOST:PORT")
    client.add_argument("--rate", type=float, default=20.0, help="messages per second")
    client.add_argument("--size", type=int, default=256, help="bytes per message (at least 8)")
    client.add_argument("--connect-timeout", type=float, default=30.0)
    for p in (server, client):
        p.add_argument("--user-timeout", type=float, default=10.0, help="seconds without progress that break the stream")
    args = parser.parse_args(argv)

    async def run() -> int:
        loop = asyncio.get_running_loop()
        if args.mode == "serve":
            task = asyncio.create_task(serve(args.bind, args.port, args.user_timeout))
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, task.cancel)
            try:
                await task
            except asyncio.CancelledError:
                pass
            return 0
        host, port = args.connect
        stream = Client(host, port, args.rate, max(args.size, _HEADER.size), args.user_timeout)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stream.stop)
        report = await stream.run(args.connect_timeout)
        return 0 if report.broken is None else 1

    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
