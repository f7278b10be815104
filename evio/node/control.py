"""The daemon's local control API: a Unix socket answering small JSON requests.

The CLI (and `evio lab topology`) talks to a running daemon only through
this socket, as tailscale's CLI does with tailscaled. One request per
connection: the client writes one JSON object and a newline, the daemon
answers with one JSON object and a newline, and closes.

    {"request": "status"}   -> {"ok": true, "status": {node id, overlays, links, peers, ...}}
    {"request": "ping"}     -> {"ok": true}
    anything else           -> {"ok": false, "error": "..."}

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
MAX_REQUEST_BYTES = 4096
READ_TIMEOUT = 5.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024

Handlers = Mapping[str, Callable[[], dict[str, Any]]]


class ControlError(Exception):
    """The daemon could not be asked, or answered with an error."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def respond(line: bytes, handlers: Handlers) -> dict[str, Any]:
    """The answer to one request line (pure: the handlers build what is asked for)."""
    try:
        request = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return {"ok": False, "error": "request is not JSON"}
    if not isinstance(request, dict) or not isinstance(request.get("request"), str):
        return {"ok": False, "error": 'expected {"request": NAME}'}
    name = request["request"]
    if name == "ping":
        return {"ok": True}
    handler = handlers.get(name)
    if handler is None:
        known = ", ".join(sorted({"ping", *handlers}))
        return {"ok": False, "error": f"unknown request {name!r} (known: {known})"}
    try:
        return {"ok": True, name: handler()}
    except Exception as exc:
        log.exception("control request %s failed", name)
        return {"ok": False, "error": f"{name} failed: {type(exc).__name__}: {exc}"}


class ControlServer:
    def __init__(self, path: Path, handlers: Handlers) -> None:
        self.path = path
        self._handlers = handlers
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
                    answer = respond(line, self._handlers)
            writer.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the client went away; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


def query(path: Path, request: str, timeout: float = 5.0) -> dict[str, Any]:
    """Ask the daemon listening on `path` (blocking; for the CLI). Returns the answer's payload."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
            conn.sendall(json.dumps({"request": request}).encode() + b"\n")
            chunks = []
            size = 0
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise ControlError(f"answer from {path} too large")
        except FileNotFoundError:
            raise ControlError(f"no daemon control socket at {path} (is evio running?)") from None
        except ConnectionRefusedError:
            raise ControlError(f"nothing listens on {path} (the daemon is not running)") from None
        except OSError as exc:
            raise ControlError(f"cannot ask the daemon at {path}: {exc}") from None
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        raise ControlError(f"unreadable answer from {path}") from None
    if not isinstance(answer, dict):
        raise ControlError(f"unreadable answer from {path}")
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "request failed")))
    payload = answer.get(request, {})
    return payload if isinstance(payload, dict) else {}
