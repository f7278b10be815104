"""`Node`: the daemon's parts for every overlay, started in order and stopped in reverse.

Start: the local control API (its socket doubles as the lock against a
second daemon on the same state dir); the SDN controller (os-ken thread)
until it accepts switches; per overlay the bridge, its attachment to the
controller, the tunnel manager and the overlay controller; then the
signaling accounts log in; then the address announcer. `run()` then waits for `stop()` (the
signal handlers call it) or for a part that must not die (the SDN
controller) to die, and tears everything down: links released, tunnels
closed, ports removed, bridges deleted, accounts logged out.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evio.ids import format_node_id
from evio.node.control import ControlServer
from evio.node.errors import StartupError
from evio.node.overlay_stack import OverlayStack
from evio.node.plan import NodePlan
from evio.node.platform import Platform
from evio.node.sdn import SdnController
from evio.node.side_loop import SideLoop
from evio.node.signal_mux import SharedAccount
from evio.signal.interface import Signaling

log = logging.getLogger(__name__)


class Node:
    def __init__(
        self,
        plan: NodePlan,
        platform: Platform,
        control_socket: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self._platform = platform
        self._control_socket = control_socket
        self._clock = clock
        self.sdn: SdnController | None = None
        self.accounts: dict[str, Signaling] = {}
        self.overlays: dict[str, OverlayStack] = {}
        self._control: ControlServer | None = None
        self._announcer: SideLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop_requested = asyncio.Event()
        self._fatal: str | None = None
        self._started_at: float | None = None
        self.ready = asyncio.Event()  # set once every part is up

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    def stop(self) -> None:
        """Ask `run()` to tear down and return (safe from a signal handler)."""
        self._stop_requested.set()

    async def run(self) -> str | None:
        """Start, serve until `stop()`, tear down. Returns None on a requested stop, else why it had to stop."""
        try:
            await self.start()
        except BaseException:
            await self.shutdown()
            raise
        try:
            await self._stop_requested.wait()
        finally:
            await self.shutdown()
        return self._fatal

    async def start(self) -> None:
        started = self._clock()
        if self._control_socket is not None:
            # First: its socket is also the lock that keeps a second daemon with this state dir
            # from touching the bridges of the first.
            control = ControlServer(self._control_socket, {"status": self.status})
            await control.start()
            self._control = control
        self.sdn = self._platform.sdn_controller()
        await self.sdn.start()
        self._watch(self._sdn_events(self.sdn), "sdn events")
        self._watch(self._sdn_alive(self.sdn), "sdn watch")
        shared: dict[str, SharedAccount] = {}
        for account in self.plan.accounts:
            client = self._platform.signal_client(account.settings)
            self.accounts[account.jid] = client
            shared[account.jid] = SharedAccount(client)
        for overlay_plan in self.plan.overlays:
            signaling = shared[overlay_plan.account].view(overlay_plan.id)
            stack = OverlayStack(
                overlay_plan,
                self.node_id,
                signaling,
                self._platform.bridge(overlay_plan),
                self.sdn,
                make_links=lambda on_event, p=overlay_plan, s=signaling: self._platform.links(  # type: ignore[misc]
                    p, self.node_id, s, on_event
                ),
                make_controller=lambda links, p=overlay_plan, s=signaling: self._platform.overlay_controller(  # type: ignore[misc]
                    p, self.node_id, s, links
                ),
                clock=self._clock,
            )
            self.overlays[overlay_plan.id] = stack
            try:
                await stack.start()
            except Exception as exc:
                raise StartupError(f"overlay {overlay_plan.id}: {type(exc).__name__}: {exc}") from exc
        for jid, client in self.accounts.items():
            try:
                await client.start()
            except Exception as exc:
                raise StartupError(f"signaling account {jid}: {type(exc).__name__}: {exc}") from exc
        announcer = self._platform.address_announcer({stack.bridge.name for stack in self.overlays.values()})
        if announcer is not None:
            # Its netlink watch cannot run on uvloop: it gets a thread and a plain loop of its own.
            self._announcer = SideLoop("evio-garp", announcer.run)
            self._announcer.start()
        self._started_at = self._clock()
        # What startup made (some 130 000 objects: modules, os-ken's parsers, config) lives as long
        # as the process. Frozen, it is out of the collector's full passes, which otherwise take
        # 40-60 ms here and stall every tunnel's data path on this loop meanwhile.
        gc.collect()
        gc.freeze()
        self.ready.set()
        log.info("node %s up: %d overlay(s) in %.2f s", format_node_id(self.node_id), len(self.overlays),
                 self._clock() - started)

    async def shutdown(self) -> None:
        """Undo whatever `start` did, in reverse order; every step runs even if one before it failed."""
        self.ready.clear()
        if self._control is not None:
            await self._control.stop()
            self._control = None
        if self._announcer is not None:
            await asyncio.to_thread(self._announcer.stop)
            self._announcer = None
        for stack in reversed(list(self.overlays.values())):
            await stack.stop()
        self.overlays.clear()
        for jid, client in self.accounts.items():
            try:
                await client.stop()
            except Exception:
                log.exception("signaling account %s did not stop cleanly", jid)
        self.accounts.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        gc.unfreeze()  # what start froze may now be garbage
        log.info("node %s stopped", format_node_id(self.node_id))

    # -- supervised tasks ------------------------------------------------------------------------

    def _watch(self, coro: Any, what: str, fatal: bool = True) -> None:
        task = asyncio.create_task(coro, name=what)

        def done(t: asyncio.Task[Any]) -> None:
            if t.cancelled():
                return
            error = t.exception()
            if error is not None:
                log.error("%s failed", what, exc_info=error)
                if fatal:
                    self._fail(f"{what} failed: {error!r}")

        task.add_done_callback(done)
        self._tasks.append(task)

    def _fail(self, reason: str) -> None:
        if self._fatal is None:
            self._fatal = reason
            log.error("node stopping: %s", reason)
        self._stop_requested.set()

    async def _sdn_alive(self, sdn: SdnController) -> None:
        self._fail(await sdn.wait_stopped())

    async def _sdn_events(self, sdn: SdnController) -> None:
        while True:
            event = await sdn.next_event()
            stack = self.overlays.get(event.overlay)
            if stack is not None:
                try:
                    stack.controller_event(event)
                except Exception:
                    log.exception("handling %s failed", event)

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "node_id": format_node_id(self.node_id),
            "pid": os.getpid(),
            "uptime": round(self._clock() - self._started_at, 3) if self._started_at is not None else None,
            "sdn_port": self.sdn.listen_port if self.sdn is not None else None,
            "overlays": {name: stack.status() for name, stack in self.overlays.items()},
        }
