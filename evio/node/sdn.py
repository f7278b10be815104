"""The SDN controller as the daemon sees it: commands in, events out, a thread it must watch.

os-ken runs with its native (thread) hub in a thread of its own; everything
crossing to it goes through `evio.sdn.boundary` (a thread-safe command queue
one way, events delivered into the asyncio loop the other). The daemon
depends on `SdnController` only; `OskenController` is the real one and
`evio.testing.fake_sdn.FakeSdn` the fake.

The bridges reach it over a Unix socket the controller makes in a private
directory of OVS's rundir before any bridge exists (evio.sdn.controller_socket;
issue 21 M1): no other local process can stand in for it, also after a crash.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any, Protocol

from evio.node.errors import DependencyError
from evio.sdn.boundary import AsyncioEventSink, CommandQueue, ControllerChannel, ControllerEvent

log = logging.getLogger(__name__)

LISTEN_HOST = "127.0.0.1"
READY_TIMEOUT = 10.0


class SdnController(Protocol):
    @property
    def commands(self) -> CommandQueue: ...

    @property
    def listen_address(self) -> str:
        """Where the bridges reach it, as OVS writes a controller target (`unix:PATH`)."""
        ...

    async def start(self) -> None:
        """Start it and return once switches can connect."""
        ...

    async def next_event(self) -> ControllerEvent: ...

    async def wait_stopped(self) -> str:
        """Returns (with the reason) only if the controller stops on its own: the node cannot go on."""
        ...


def free_tcp_port(host: str = LISTEN_HOST) -> int:
    """A TCP port nothing listens on right now (the kernel's pick). Not for the controller: between
    this probe and a later bind any local process can take it (issue 21 M1); tests and the lab use it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class OskenController:
    def __init__(self, socket_path: Path, switch_run_dir: Path) -> None:
        """`socket_path`: the Unix socket the bridges connect to (evio.sdn.controller_socket.controller_socket_path);
        `switch_run_dir`: the rundir of the ovs-vswitchd whose bridges this controller serves: only it, root
        and the OVS user may connect, and only it may control a bridge (evio.sdn.vswitchd_peer_check)."""
        self._socket_path = socket_path
        self._switch_run_dir = switch_run_dir
        self._sink: AsyncioEventSink | None = None
        self._channel: ControllerChannel | None = None
        self._stopped: asyncio.Future[str] | None = None

    @property
    def commands(self) -> CommandQueue:
        if self._channel is None:
            raise RuntimeError("controller not started")
        return self._channel.commands

    @property
    def listen_address(self) -> str:
        return f"unix:{self._socket_path}"

    async def start(self) -> None:
        try:
            from evio.sdn.handed_listener import HandedListener
            from evio.sdn.ofapp import ControllerConfig, start_controller_thread
        except Exception as exc:  # os-ken missing or broken: say so rather than crash later
            raise DependencyError(f"cannot load the SDN controller (os-ken): {type(exc).__name__}: {exc}") from exc
        from evio.sdn.controller_socket import OvsOwner, SwitchAdmission, bind_controller_socket
        from evio.sdn.vswitchd_peer_check import VswitchdPeerCheck

        # Bound here, before any bridge exists, in a directory no one else can write: a bridge never
        # meets a controller address that another process could hold (issue 21 M1).
        try:
            owner = OvsOwner.of_run_dir(self._switch_run_dir)
            sock = bind_controller_socket(self._socket_path, owner)
        except OSError as exc:
            raise DependencyError(f"cannot make the SDN controller's socket {self._socket_path}: {exc}") from exc
        loop = asyncio.get_running_loop()
        self._sink = AsyncioEventSink(loop)
        self._channel = ControllerChannel(self._sink)
        self._stopped = loop.create_future()
        stopped = self._stopped
        serving: asyncio.Future[None] = loop.create_future()

        def settle_soon(future: asyncio.Future[Any], value: Any) -> None:  # from the controller's thread
            def settle() -> None:
                if not future.done():
                    future.set_result(value)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed: the daemon is exiting anyway
                pass

        def on_exit(error: BaseException | None) -> None:
            settle_soon(stopped, f"os-ken stopped: {error!r}" if error is not None else "os-ken stopped")

        listener = HandedListener(sock, SwitchAdmission(self._switch_run_dir, owner),
                                  on_serving=lambda: settle_soon(serving, None))
        config = ControllerConfig(self._channel, peer_check=VswitchdPeerCheck(self._switch_run_dir))
        start_controller_thread(config, on_exit=on_exit, listener=listener)
        # Connections queue on the socket until os-ken accepts them; this only reports a failed start.
        done, _ = await asyncio.wait((serving, stopped), timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if stopped in done:
            raise DependencyError(f"SDN controller failed to start: {stopped.result()}")
        if not done:
            raise DependencyError(f"SDN controller not serving {self._socket_path} after {READY_TIMEOUT:.0f} s")
        log.info("sdn controller listening on %s", self._socket_path)

    async def next_event(self) -> ControllerEvent:
        if self._sink is None:
            raise RuntimeError("controller not started")
        return await self._sink.get()

    async def wait_stopped(self) -> str:
        if self._stopped is None:
            raise RuntimeError("controller not started")
        return await asyncio.shield(self._stopped)
