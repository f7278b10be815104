"""``TunnelSignaling`` over Unix sockets in a shared directory (lab tool, tests, benchmarks).

Network namespaces do not separate the filesystem, so two processes in
different namespaces of one machine can exchange offers through
``DIR/<node id>.sock`` without any network path between them. One JSON line
each way: ``{"from": N, "body": {...}}`` then ``{"answer": {...}}`` or
``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path

from evio.tunnel.errors import OfferError, SignalingFailed, TunnelError
from evio.tunnel.path.offer_answer import Body, OfferHandler

logger = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024


class UnixSocketSignaling:
    def __init__(self, directory: Path, node_id: int) -> None:
        self._directory = directory
        self._node_id = node_id
        self._handler: OfferHandler | None = None
        self._server: asyncio.AbstractServer | None = None

    def socket_path(self, node: int) -> Path:
        return self._directory / f"{node:032x}.sock"

    def serve(self, handler: OfferHandler) -> None:
        self._handler = handler

    async def open(self) -> None:
        """Start listening on our socket (offers arrive only after this)."""
        path = self.socket_path(self._node_id)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await asyncio.start_unix_server(self._on_client, path=str(path), limit=_MAX_LINE)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.socket_path(self._node_id).unlink()

    async def request(self, peer: int, body: Body, timeout: float) -> Body:
        try:
            return await asyncio.wait_for(self._request(peer, body), timeout)
        except TimeoutError:
            raise SignalingFailed(f"no answer from {peer:032x} in {timeout} s") from None

    async def _request(self, peer: int, body: Body) -> Body:
        path = self.socket_path(peer)
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(str(path), limit=_MAX_LINE)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                await asyncio.sleep(0.02)  # the peer has not started listening yet
        try:
            writer.write(json.dumps({"from": f"{self._node_id:032x}", "body": body}).encode() + b"\n")
            await writer.drain()
            reply = json.loads(await reader.readline())
        except (OSError, ValueError) as exc:
            raise SignalingFailed(f"signaling to {peer:032x} failed: {exc}") from exc
        finally:
            writer.close()
        if not isinstance(reply, dict) or "answer" not in reply:
            raise SignalingFailed(f"offer refused by {peer:032x}: {reply.get('error') if isinstance(reply, dict) else reply}")
        answer = reply["answer"]
        if not isinstance(answer, dict):
            raise SignalingFailed("answer is not an object")
        return answer

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = json.loads(await reader.readline())
            peer = int(request["from"], 16)
            if self._handler is None:
                raise SignalingFailed("not serving offers")
            reply: dict[str, object] = {"answer": await self._handler(peer, request["body"])}
        except (OfferError, SignalingFailed, TunnelError) as exc:
            reply = {"error": str(exc)}
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": f"malformed request: {exc}"}
        except Exception as exc:  # the handler's bug must not leave the peer waiting
            logger.exception("tunnel offer handler failed")
            reply = {"error": f"internal error: {exc}"}
        try:
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except OSError as exc:
            logger.info("tunnel signaling reply failed: %s", exc)
        finally:
            writer.close()
