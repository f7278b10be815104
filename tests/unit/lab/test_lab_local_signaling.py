"""UnixSocketSignaling: offers between processes through a shared directory (here: one process)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evio.lab.local_signaling import UnixSocketSignaling
from evio.tunnel.errors import OfferError, SignalingFailed
from evio.tunnel.path.offer_answer import Body


async def test_request_reaches_the_handler_and_returns_its_answer(tmp_path: Path) -> None:
    a, b = UnixSocketSignaling(tmp_path, 1), UnixSocketSignaling(tmp_path, 2)
    seen: list[tuple[int, Body]] = []

    async def handler(peer: int, body: Body) -> Body:
        seen.append((peer, body))
        if body.get("bad"):
            raise OfferError("bad", "refused")
        if body.get("crash"):
            raise RuntimeError("bug")
        return {"answer": body["n"] + 1}

    b.serve(handler)
    await b.open()
    try:
        assert await a.request(2, {"n": 41}, timeout=2) == {"answer": 42}
        assert seen == [(1, {"n": 41})]
        with pytest.raises(SignalingFailed, match="refused"):
            await a.request(2, {"bad": True}, timeout=2)
        with pytest.raises(SignalingFailed, match="internal error"):
            await a.request(2, {"crash": True}, timeout=2)
    finally:
        await b.close()
    assert not b.socket_path(2).exists()


async def test_request_waits_for_a_late_listener_then_times_out(tmp_path: Path) -> None:
    a, b = UnixSocketSignaling(tmp_path, 1), UnixSocketSignaling(tmp_path, 2)

    async def handler(peer: int, body: Body) -> Body:
        return {"ok": True}

    b.serve(handler)
    request = asyncio.create_task(a.request(2, {}, timeout=3))
    await asyncio.sleep(0.1)  # the peer starts listening after the request was made
    await b.open()
    try:
        assert await request == {"ok": True}
    finally:
        await b.close()
    with pytest.raises(SignalingFailed):
        await a.request(3, {}, timeout=0.2)
