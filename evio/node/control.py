"""The daemon's local control API: a Unix socket answering small JSON requests.

The CLI (and `evio lab topology`) talks to a running daemon only through
this socket, as tailscale's CLI does with tailscaled. One request per
connection: the client writes one JSON object and a newline, the daemon
answers with one JSON object and a newline, and closes.

    {"request": "status"}   -> {"ok": true, "status": {the status document, evio.node.status}}
    {"request": "ping"}     -> {"ok": true}
    {"request": "probe", "overlay": ID, "peer": NODE_ID, "timeout": S}
                            -> {"ok": true, "probe": {"result": "pong" | "no-link" | "timeout", ...}}
    anything else           -> {"ok": false, "error": "..."}

Requests with arguments (probe) are served by coroutines, given the whole
request object, and answered within `REQUEST_TIMEOUT`.

The socket is created mode 0600 in the node's state directory: only root
(who runs the daemon) may ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

# The client side lives in control_client (no asyncio: `evio status` starts fast); re-exported here.
from evio.node.control_client import (
    MAX_RESPONSE_BYTES,
    SOCKET_NAME,
    ControlError,
    query,
    socket_path,
)

__all__ = ["MAX_RESPONSE_BYTES", "SOCKET_NAME", "ControlError", "ControlServer", "query", "respond", "socket_path"]

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4096
READ_TIMEOUT = 5.0

REQUEST_TIMEOUT = 30.0  # an asynchronous handler that takes longer is answered with an error

Handlers = Mapping[str, Callable[[], dict[str, Any]]]
RequestHandlers = Mapping[str, Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]]


def parse_request(line: bytes) -> dict[str, Any] | str:
    """The request object of one line, or why it is not one."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; deep nesting is not (review21i I8)
        return "request is not JSON"
    if not isinstance(request, dict) or not isinstance(request.get("request"), str):
        return 'expected {"request": NAME}'
    return request


def respond(line: bytes, handlers: Handlers, request_handlers: RequestHandlers | None = None) -> dict[str, Any]:
    """The answer to one request line (pure: the handlers build what is asked for)."""
    request = parse_request(line)
    if isinstance(request, str):
        return {"ok": False, "error": request}
    name = request["request"]
    if name == "ping":
        return {"ok": True}
    handler = handlers.get(name)
    if handler is None:
        known = ", ".join(sorted({"ping", *handlers, *(request_handlers or {})}))
        return {"ok": False, "error": f"unknown request {name!r} (known: {known})"}
    try:
        return {"ok": True, name: handler()}
    except Exception as exc:
        log.exception("control request %s failed", name)
        return {"ok": False, "error": f"{name} failed: {type(exc).__name__}: {exc}"}


async def respond_async(line: bytes, handlers: Handlers, request_handlers: RequestHandlers) -> dict[str, Any]:
    """As `respond`, with the requests that take arguments and time (served by coroutines)."""
    request = parse_request(line)
    if isinstance(request, str) or request["request"] not in request_handlers:
        return respond(line, handlers, request_handlers)
    name = request["request"]
    try:
        return {"ok": True, name: await asyncio.wait_for(request_handlers[name](request), REQUEST_TIMEOUT)}
    except TimeoutError:
        return {"ok": False, "error": f"{name} took longer than {REQUEST_TIMEOUT:.0f} s"}
    except ControlError as exc:
        return {"ok": False, "error": str(exc)}
    except Exception as exc:
        log.exception("control request %s failed", name)
        return {"ok": False, "error": f"{name} failed: {type(exc).__name__}: {exc}"}


class ControlServer:
    def __init__(self, path: Path, handlers: Handlers, request_handlers: RequestHandlers | None = None) -> None:
        self.path = path
        self._handlers = handlers
        self._request_handlers: RequestHandlers = request_handlers or {}
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        if len(os.fsencode(self.path)) > 107:
            raise ControlError(f"control socket path too long for a Unix socket: {self.path}")
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._remove_stale()
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        finally:
            os.umask(old_umask)
        log.info("control API listening on %s", self.path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _remove_stale(self) -> None:
        """A socket left by a daemon that died; refuse to take over one a live daemon answers on."""
        if not self.path.exists():
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(self.path))
        except OSError:
            self.path.unlink()
            return
        finally:
            probe.close()
        raise ControlError(f"another daemon answers on {self.path}: is evio already running with this state dir?")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
            except (TimeoutError, asyncio.LimitOverrunError, ValueError):
                answer = {"ok": False, "error": "no request line"}
            else:
                if len(line) > MAX_REQUEST_BYTES:
                    answer = {"ok": False, "error": "request too large"}
                else:
                    answer = await respond_async(line, self._handlers, self._request_handlers)
            writer.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the client went away; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
