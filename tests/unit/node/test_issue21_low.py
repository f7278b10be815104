"""Issue 21, low findings: a key overwritten by `evio pki --force` ends up 0600 whatever its mode was; the
metrics endpoint caps its connections and bounds each request, and shows no addresses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from evio.cli import main
from evio.node.metrics import MetricsServer

NODE = "0" * 31 + "1"


@pytest.mark.parametrize("command", ["ca", "issue"])
def test_an_overwritten_key_is_0600_whatever_mode_the_old_file_had(tmp_path: Path, command: str) -> None:
    assert main(["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")]) == 0
    issue = ["pki", "issue", "--ca", str(tmp_path / "ca"), "--overlay", "ov1", "--node", NODE, "--out", str(tmp_path / "n1")]
    assert main(issue) == 0
    key = tmp_path / ("ca/ca.key" if command == "ca" else "n1/node.key")
    key.chmod(0o644)  # loosened by hand, or an older tool's file
    again = ["pki", "ca", "--name", "ov1 CA", "--out", str(tmp_path / "ca")] if command == "ca" else issue
    assert main([*again, "--force"]) == 0
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600


STATUS: dict[str, Any] = {
    "node_id": "0" * 32,
    "overlays": {"ov1": {"links": [{
        "peer": "1" * 32, "peer_name": "alice@example.org", "type": "successor", "state": "up", "path": "direct",
        "local_candidate": "host", "remote_candidate": "srflx", "remote_address": "203.0.113.7:40001",
        "tunnel_state": "up", "tx": {}, "rx": {},
    }]}},
}  # fmt: skip


@contextlib.asynccontextmanager
async def metrics(**limits: Any) -> AsyncIterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, lambda: STATUS, **limits)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def scrape(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return raw


async def test_a_scrape_shows_no_addresses() -> None:
    async with metrics() as server:
        raw = await scrape(server.bound_port)
    assert raw.startswith(b"HTTP/1.1 200 OK") and b'remote_candidate="srflx"' in raw
    assert b"203.0.113.7" not in raw and b"40001" not in raw


async def test_connections_beyond_the_cap_are_closed_at_once_and_idle_ones_time_out() -> None:
    async with metrics(max_connections=2, request_timeout=0.5) as server:
        idle = [await asyncio.open_connection("127.0.0.1", server.bound_port) for _ in range(2)]
        extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", server.bound_port)
        assert await asyncio.wait_for(extra_reader.read(), 0.4) == b""  # closed long before the timeout
        assert server.refused_connections == 1
        for reader, _ in idle:  # a client that never sends a request is let go at the timeout
            assert await asyncio.wait_for(reader.read(), 2) == b""
        raw = await scrape(server.bound_port)  # room again
        assert raw.startswith(b"HTTP/1.1 200 OK")
        for _, writer in [*idle, (extra_reader, extra_writer)]:
            writer.close()
