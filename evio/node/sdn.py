"""The SDN controller as the daemon sees it: commands in, events out, a thread it must watch.

os-ken runs with its native (thread) hub in a thread of its own; everything
crossing to it goes through `evio.sdn.boundary` (a thread-safe command queue
one way, events delivered into the asyncio loop the other). The daemon
depends on `SdnController` only; `OskenController` is the real one and
`evio.testing.fake_sdn.FakeSdn` the fake.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Protocol

from evio.node.errors import DependencyError
from evio.sdn.boundary import AsyncioEventSink, CommandQueue, ControllerChannel, ControllerEvent

log = logging.getLogger(__name__)

LISTEN_HOST = "127.0.0.1"
READY_TIMEOUT = 10.0


class SdnController(Protocol):
    @property
    def commands(self) -> CommandQueue: ...

    @property
    def listen_port(self) -> int: ...

    async def start(self) -> None:
        """Start it and return once switches can connect."""
        ...

    async def next_event(self) -> ControllerEvent: ...

    async def wait_stopped(self) -> str:
        """Returns (with the reason) only if the controller stops on its own: the node cannot go on."""
        ...


def free_tcp_port(host: str = LISTEN_HOST) -> int:
    """A TCP port nothing listens on right now (the kernel's pick), for the controller's OpenFlow listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class OskenController:
    def __init__(self, listen_port: int, listen_host: str = LISTEN_HOST, switch_run_dir: Path | None = None) -> None:
        """`switch_run_dir`: the rundir of the ovs-vswitchd whose bridges this controller serves;
        OpenFlow connections from any other process are refused (evio.sdn.switch_peer)."""
        self._port = listen_port
        self._host = listen_host
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
    def listen_port(self) -> int:
        return self._port

    async def start(self) -> None:
        try:
            from evio.sdn.ofapp import ControllerConfig, start_controller_thread
        except Exception as exc:  # os-ken missing or broken: say so rather than crash later
            raise DependencyError(f"cannot load the SDN controller (os-ken): {type(exc).__name__}: {exc}") from exc
        loop = asyncio.get_running_loop()
        self._sink = AsyncioEventSink(loop)
        self._channel = ControllerChannel(self._sink)
        self._stopped = loop.create_future()
        stopped = self._stopped

        def on_exit(error: BaseException | None) -> None:  # in the controller's thread
            reason = f"os-ken stopped: {error!r}" if error is not None else "os-ken stopped"

            def settle() -> None:
                if not stopped.done():
                    stopped.set_result(reason)

            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop is closed: the daemon is exiting anyway
                pass

        peer_check = None
        if self._switch_run_dir is not None:
            from evio.sdn.switch_peer import VswitchdPeerCheck

            peer_check = VswitchdPeerCheck(self._switch_run_dir)
        config = ControllerConfig(self._channel, peer_check=peer_check)
        start_controller_thread(config, self._host, self._port, on_exit=on_exit)
        await self._wait_listening()
        log.info("sdn controller listening on %s:%d", self._host, self._port)

    async def _wait_listening(self) -> None:
        # OVS backs off up to 8 s between controller connection attempts, so
        # bridges are made only once the controller accepts connections.
        assert self._stopped is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while True:
            if self._stopped.done():
                raise DependencyError(f"SDN controller failed to start: {self._stopped.result()}")
            try:
                _, writer = await asyncio.open_connection(self._host, self._port)
            except OSError:
                if loop.time() > deadline:
                    raise DependencyError(
                        f"SDN controller not listening on {self._host}:{self._port} after {READY_TIMEOUT:.0f} s"
                    ) from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return

    async def next_event(self) -> ControllerEvent:
        if self._sink is None:
            raise RuntimeError("controller not started")
        return await self._sink.get()

    async def wait_stopped(self) -> str:
        if self._stopped is None:
            raise RuntimeError("controller not started")
        return await asyncio.shield(self._stopped)
